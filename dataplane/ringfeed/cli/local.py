"""``ringfeed local``: a real Cassandra ring on this machine."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ringfeed.cli.app import console, default_local_dir, main
from ringfeed.cli.render import JSON_OPTION, human_bytes, print_json, print_table


@main.group()
@click.option("--state-dir", type=click.Path(path_type=Path), default=default_local_dir, show_default=True,
              help="Config, data, logs and PIDs of the local ring [env RINGFEED_LOCAL_DIR].")
@click.pass_context
def local(ctx, state_dir):
    """A real local Cassandra 5.0.9 ring on 127.0.0.1..N (jars fetched once with Maven)."""
    ctx.meta["state_dir"] = state_dir


def _ring(ctx, **settings):
    from ringfeed.local import LocalRing, RingSettings

    return LocalRing(ctx.meta["state_dir"], RingSettings(**settings))


@local.command("up")
@click.option("--nodes", default=1, show_default=True, help="Number of nodes; started one at a time.")
@click.option("--heap", default="768M", show_default=True, help="JVM heap per node.")
@click.option("--ring-delay-ms", default=5000, show_default=True,
              help="Cassandra's RING_DELAY; the default 30000 only slows local starts.")
@click.pass_context
def local_up(ctx, nodes, heap, ring_delay_ms):
    """Start the local ring (reuses running nodes) and wait until every node answers CQL."""
    ring = _ring(ctx, heap=heap, ring_delay_ms=ring_delay_ms)
    with console.status("starting Cassandra…") as status:
        ring.up(nodes, on_progress=lambda message: status.update(message + "…"))
    print_ring(ring)
    console.print(f"CQL on {', '.join(ring.hosts)}:9042 · stop with [bold]ringfeed local down[/]")


@local.command("status")
@JSON_OPTION
@click.pass_context
def local_status(ctx, as_json):
    """Nodes, PIDs, CQL readiness and data size."""
    ring = _ring(ctx)
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
    with console.status("bootstrapping a new node…"):
        index = ring.add_node()
    console.print(f"node {index} joined on {ring.address(index)}")
    print_ring(ring)


@local.command("remove-node")
@click.option("--node", "index", type=int, default=None, help="Node index (default: the highest).")
@click.pass_context
def local_remove_node(ctx, index):
    """Decommission a node (its data streams to the others), then stop its JVM."""
    ring = _ring(ctx)
    with console.status("decommissioning…"):
        removed = ring.remove_node(index)
    console.print(f"node {removed} decommissioned and stopped")
    print_ring(ring)


@local.command("down")
@click.option("--purge", is_flag=True, help="Also delete data, logs and state.")
@click.pass_context
def local_down(ctx, purge):
    """Stop every node by PID."""
    ring = _ring(ctx)
    ring.down(purge=purge)
    console.print("local ring stopped" + (" and purged" if purge else ""))


def print_ring(ring) -> None:
    table = Table("node", "address", "pid", "state", "CQL", "data")
    for node in ring.status():
        table.add_row(str(node.index), node.address, str(node.pid or "-"), node_state(node),
                      "[green]ready[/]" if node.cql_ready else "[red]no[/]", human_bytes(node.data_bytes))
    print_table(table)


def node_state(node) -> str:
    return "decommissioned" if node.decommissioned else ("running" if node.running else "stopped")
