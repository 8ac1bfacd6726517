"""``ringfeed cache``: the Alluxio FUSE cache tier on this machine (every split as a read-only directory tree)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click
from rich.table import Table

from ringfeed.cli.app import console, err_console, main, ringfeed_state_dir
from ringfeed.cli.render import JSON_OPTION, human_bytes, print_json, print_table
from ringfeed.cli.types import ByteSize, JvmSize


def default_state_dir() -> Path:
    return ringfeed_state_dir("RINGFEED_CACHE_DIR", "cache-tier")


def loopback(ctx, param, value: str) -> str:
    if not value.startswith("127."):
        raise click.BadParameter(f"{value}: the local tier listens on loopback addresses only (127.x)")
    return value


@main.group()
@click.option("--state-dir", type=click.Path(path_type=Path), default=default_state_dir, show_default=True,
              help="Config, journal, logs and PIDs of the tier [env RINGFEED_CACHE_DIR].")
@click.pass_context
def cache(ctx, state_dir):
    """The Alluxio FUSE cache tier: every split as a read-only directory tree, read through from the ring.

    Under the mount: <dataset>/<split>/<part>/<label>/<uuid>.<ext> (images; ImageFolder reads a part as it is),
    <dataset>/<split>/<part>/<uuid>.npy and labels.csv (raw tensors). The first read of a file fetches it from
    the ring into the worker's memory; later reads come from memory. Needs `make alluxio` once.

    \b
      ringfeed cache up ./ring                 # master, worker and FUSE; the ring of --hosts
      ls ./ring/demo/by-patient/train
      ringfeed cache status
      ringfeed cache refresh                   # after making splits or versions while it runs
      ringfeed cache down
    """
    from ringfeed.cache import LocalCache

    ctx.meta["cache"] = LocalCache(state_dir)


@cache.command("up")
@click.argument("mount", type=click.Path(file_okay=False, path_type=Path))
@click.option("--memory", default="1GiB", show_default=True, type=ByteSize(),
              help="Size of the worker's memory tier (/dev/shm).")
@click.option("--address", default="127.0.40.1", show_default=True, callback=loopback,
              help="Loopback address the master and the worker listen on.")
@click.pass_context
def cache_up(ctx, mount, memory, address):
    """Start the tier (reusing what runs) and mount the tree at MOUNT."""
    ring = ctx.obj
    local_cache = ctx.meta["cache"]
    with err_console.status("starting the cache tier…") as status:
        local_cache.up(list(ring.hosts), ring.port, mount, local_dc=ring.local_dc, username=ring.username,
                       password=ring.password, tls_ca_file=ring.tls_ca_file, tls_server_name=ring.tls_server_name,
                       memory_bytes=memory, host=address,
                       on_progress=lambda message: status.update(message + "…"))
    print_status(local_cache)
    console.print(f"splits under [bold]{mount}[/]/<dataset>/<split>/<part>/ · stop with [bold]ringfeed cache down[/]")


@cache.command("serve")
@click.argument("role", type=click.Choice(["master", "worker", "fuse"]))
@click.option("--master-host", required=True, help="The master's name (on Kubernetes: its Service).")
@click.option("--hostname", default=None,
              help="This process's address, as the others reach it (on Kubernetes: the Pod IP). Default: "
                   "--master-host.")
@click.option("--node", default=None, help="The node's name: a FUSE client reads through the worker of its node.")
@click.option("--bind", default="0.0.0.0", show_default=True, help="Address every server socket binds to.")
@click.option("--serve-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("/var/lib/ringfeed-cache"),
              show_default=True, help="Configuration, journal and logs (a Pod's emptyDir).")
@click.option("--heap", default="1g", show_default=True, type=JvmSize(), help="The JVM's -Xmx.")
@click.option("--memory", default="1GiB", show_default=True, type=ByteSize(), help="worker: the memory tier's size.")
@click.option("--memory-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="worker: the memory tier's directory (a memory emptyDir). Default: SERVE_DIR/memory.")
# A plain string: a mount left behind by a killed FUSE process fails every check click could make (ENOTCONN); the
# FUSE role detaches it before mounting again.
@click.option("--mount", default=None, help="fuse: where the tree is mounted.")
@click.option("--root", default="/", show_default=True,
              help="fuse: the tree's folder mounted there (/<dataset>: one dataset's splits).")
@click.option("--tuned/--alluxio-defaults", default=True, show_default=True,
              help="The tuned preset (docs/cache.md), or Alluxio's defaults.")
@click.pass_context
def cache_serve(ctx, role, master_host, hostname, node, bind, serve_dir, heap, memory, memory_dir, mount, root, tuned):
    """Run one process of the tier in the foreground (a container's command): ROLE is master, worker or fuse.

    The master and the workers read the ring given by --hosts (or RINGFEED_HOSTS) with its credentials; the
    FUSE process reads through the workers only. The operator starts these in the cache tier's Pods.

    \b
      ringfeed cache serve master --master-host demo-cache-master.ml.svc
      ringfeed cache serve worker --master-host demo-cache-master.ml.svc --hostname $POD_IP --node $NODE_NAME
      ringfeed cache serve fuse --master-host demo-cache-master.ml.svc --hostname $POD_IP --node $NODE_NAME \\
          --mount /var/lib/ringfeed/cache/ml/demo/mnt --root /demo
    """
    from ringfeed.cache.preset import Placement
    from ringfeed.cache.serve import RingLogin, ServeSettings, serve

    ring = ctx.obj
    placement = Placement(master=master_host, hostname=hostname or master_host, bind=bind, node=node)
    settings = ServeSettings(role=role, placement=placement, state_dir=serve_dir, heap=heap, tuned=tuned,
                             memory_bytes=memory, memory_dir=memory_dir,
                             mount=Path(mount) if mount else None, root=root)
    login = None if role == "fuse" else RingLogin(tuple(ring.hosts), ring.port, ring.local_dc, ring.username,
                                                   ring.password, ring.tls_ca_file, ring.tls_server_name)
    serve(settings, login)


@cache.command("status")
@JSON_OPTION
@click.pass_context
def cache_status(ctx, as_json):
    """Processes, the mount, and how much of the memory tier is filled."""
    local_cache = ctx.meta["cache"]
    if as_json:
        settings = local_cache.settings
        print_json({"mount": settings.mount if settings else None,
                    "mounted": bool(settings) and local_cache.mounted(Path(settings.mount)),
                    "cached_bytes": local_cache.cached_bytes(),
                    "processes": [{"name": p.name, "pid": p.pid, "running": p.running}
                                  for p in local_cache.status()]})
        return
    print_status(local_cache)


@cache.command("refresh")
@click.pass_context
def cache_refresh(ctx):
    """Show splits and split versions made since FUSE listed or looked for them.

    A split version never changes, so FUSE keeps what it listed and looked up in its metadata cache (it also
    remembers paths looked up before they existed). A split made later shows under its path without this; run it
    when a listing misses a new split, after looking for a split before it was made, or after a new version of a
    split the mount has read.

    \b
      ringfeed split create demo_slides by-patient --group-by patient_id --seed 2   # v2
      ringfeed cache refresh
    """
    ctx.meta["cache"].refresh()
    console.print("the mount shows the ring's splits as they are now")


@cache.command("preload")
@click.argument("mount", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--threads", default=32, show_default=True, type=click.IntRange(1, 1024),
              help="Files read at once (each miss waits on the ring).")
@click.option("--watch", "interval", default=None, type=click.FloatRange(min=1),
              help="Keep running: after the first pass, read what is new (a split made since) every INTERVAL "
                   "seconds, and read a mount that goes away whole again once it is back.")
@click.option("--ready-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --watch: written (JSON figures) once a pass has read everything, removed while a pass "
                   "has files to read.")
@click.pass_context
def cache_preload(ctx, mount, threads, interval, ready_file):
    """Read every file under MOUNT once, so that the first epoch runs warm (default: the local tier's mount).

    Each file comes from the ring into the tier's worker, many at once, and its pages stay in the page cache
    where a warm epoch reads them. On Kubernetes, spec.cache.alluxio.preload runs this beside each node's mount.

    \b
      ringfeed cache up ./ring && ringfeed cache preload
      ringfeed cache preload ./ring/demo/by-patient/train --threads 64
    """
    from ringfeed.cache.preload import Preloader, keep_warm

    if mount is None:
        settings = ctx.meta["cache"].settings
        if settings is None:
            raise click.UsageError("no local cache tier is up: give the MOUNT to read, or `ringfeed cache up` first")
        mount = Path(settings.mount)
    if interval is None:
        if ready_file is not None:
            raise click.UsageError("--ready-file goes with --watch")
        with err_console.status("reading every file once…") as status:
            figures = Preloader(mount, threads).run_pass(
                on_progress=lambda files, size: status.update(f"{files:,} files, {human_bytes(size)} read…"))
        console.print(f"preloaded {figures.describe()}")
        if figures.failed:
            raise SystemExit(1)
        return

    def report(figures, first: bool) -> None:
        if first or figures.files or figures.failed:
            print(f"{'preloaded' if first else 'new files'}: {figures.describe()}", flush=True)

    # A container's first process gets no default SIGTERM handling: without this, every stop waits out its grace.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    keep_warm(mount, threads, interval, ready_file, report)


@cache.command("down")
@click.pass_context
def cache_down(ctx):
    """Unmount and stop every process; the memory tier is dropped (the ring keeps the data)."""
    ctx.meta["cache"].down()
    console.print("cache tier stopped")


def print_status(local_cache) -> None:
    settings = local_cache.settings
    table = Table("process", "pid", "state", "web (metrics)")
    for process in local_cache.status():
        web = local_cache.web_address(process.name) if process.name != "fuse" else "-"
        table.add_row(process.name, str(process.pid or "-"),
                      "[green]running[/]" if process.running else "[red]stopped[/]", web)
    print_table(table)
    if settings is not None:
        state = "mounted" if local_cache.mounted(Path(settings.mount)) else "not mounted"
        console.print(f"{settings.mount}: {state} · memory tier {human_bytes(local_cache.cached_bytes())} "
                      f"of {human_bytes(settings.memory_bytes)}")
