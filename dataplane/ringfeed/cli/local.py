"""``ringfeed local``: a real Cassandra ring on this machine."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ringfeed.cli.app import console, default_local_dir, err_console, main
from ringfeed.cli.render import JSON_OPTION, human_bytes, print_json, print_table
from ringfeed.cli.types import COUNT, NON_NEGATIVE, JvmSize
from ringfeed.errors import RingfeedError


@main.group()
@click.option("--state-dir", type=click.Path(path_type=Path), default=default_local_dir,
              show_default=str(default_local_dir()),
              help="Config, data, logs and PIDs of the local ring; `make demo` and `make local-up` use the same "
                   "default, $XDG_STATE_HOME/ringfeed/local [env RINGFEED_LOCAL_DIR].")
@click.pass_context
def local(ctx, state_dir):
    """A real local Cassandra 5.0.9 ring on 127.0.0.1..N (jars fetched once with Maven)."""
    ctx.meta["state_dir"] = state_dir


def _ring(ctx, **settings):
    from ringfeed.local import LocalRing, RingSettings

    return LocalRing(ctx.meta["state_dir"], RingSettings(**settings))


@local.command("up")
@click.option("--nodes", default=1, show_default=True, type=COUNT, help="Number of nodes; started one at a time.")
@click.option("--heap", default="768M", show_default=True, type=JvmSize(), help="JVM heap per node.")
@click.option("--ring-delay-ms", default=5000, show_default=True, type=NON_NEGATIVE,
              help="Cassandra's RING_DELAY; the default 30000 only slows local starts.")
@click.pass_context
def local_up(ctx, nodes, heap, ring_delay_ms):
    """Start the local ring (reuses running nodes) and wait until every node answers CQL."""
    ring = _ring(ctx, heap=heap, ring_delay_ms=ring_delay_ms)
    with err_console.status("starting Cassandra…") as status:
        ring.up(nodes, on_progress=lambda message: status.update(message + "…"))
    print_ring(ring)
    console.print(f"CQL on {', '.join(ring.hosts)}:9042 · stop with [bold]ringfeed local down[/]")


@local.command("status")
@JSON_OPTION
@click.pass_context
def local_status(ctx, as_json):
    """Nodes, PIDs, CQL readiness and data size."""
    ring = _ring(ctx)
    ring.require()
    if as_json:
        print_json([{"index": node.index, "address": node.address, "pid": node.pid, "state": node_state(node),
                     "cql_ready": node.cql_ready, "data_bytes": node.data_bytes} for node in ring.status()])
        return
    print_ring(ring)


@local.command("add-node")
@click.pass_context
def local_add_node(ctx):
    """Bootstrap one more node; it streams its share of the data, then serves CQL."""
    ring = _ring(ctx)
    ring.require(running=True)
    with err_console.status("bootstrapping a new node…"):
        index = ring.add_node()
    console.print(f"node {index} joined on {ring.address(index)}")
    print_ring(ring)


@local.command("remove-node")
@click.option("--node", "index", type=COUNT, default=None,
              help="Node index (default: the highest; node 1 is the seed and stays).")
@click.option("--force", is_flag=True,
              help="Decommission even where a keyspace's replication factor is not below the nodes that remain "
                   "(Cassandra refuses otherwise; system_distributed's is 3).")
@click.pass_context
def local_remove_node(ctx, index, force):
    """Decommission a node (its data streams to the others), then stop its JVM."""
    ring = _ring(ctx)
    ring.require(running=True)
    with err_console.status("decommissioning…"):
        removed = ring.remove_node(index, force=force)
    console.print(f"node {removed} decommissioned and stopped")
    print_ring(ring)


@local.command("down")
@click.option("--purge", is_flag=True, help="Also delete data, logs and state.")
@click.pass_context
def local_down(ctx, purge):
    """Stop every node by PID; with no node running, say so and exit 1 (--purge still deletes what is there)."""
    ring = _ring(ctx)
    existed = ring.exists
    stopped = ring.down(purge=purge)
    if not stopped and not (purge and existed):
        raise RingfeedError(f"no local ring is running in {ring.state_dir}: nothing to stop (a ring kept elsewhere: "
                            "--state-dir DIR or RINGFEED_LOCAL_DIR)")
    if stopped:
        console.print(f"local ring stopped (node{'s' if len(stopped) > 1 else ''} {', '.join(map(str, stopped))})"
                      + (" and purged" if purge else ""))
    else:
        console.print(f"no node was running; {ring.state_dir} purged")


def print_ring(ring) -> None:
    table = Table("node", "address", "pid", "state", "CQL", "data")
    for node in ring.status():
        table.add_row(str(node.index), node.address, str(node.pid or "-"), node_state(node),
                      "[green]ready[/]" if node.cql_ready else "[red]no[/]", human_bytes(node.data_bytes))
    print_table(table)


def node_state(node) -> str:
    return "decommissioned" if node.decommissioned else ("running" if node.running else "stopped")
