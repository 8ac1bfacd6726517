"""``ringfeed`` command line: a local ring, datasets, ingest and inspection.

Every command that talks to Cassandra takes ``--hosts/--port/--username/--password`` (or RINGFEED_* variables);
the defaults reach the ring started by ``ringfeed local up``.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import click
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError

console = Console()
err_console = Console(stderr=True)


def default_local_dir() -> Path:
    state_home = os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")
    return Path(os.environ.get("RINGFEED_LOCAL_DIR", Path(state_home) / "ringfeed" / "local"))


class RingfeedGroup(click.Group):
    """Prints RingfeedError as one line and exits 1, instead of a traceback."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except RingfeedError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            sys.exit(1)


@click.group(cls=RingfeedGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--hosts", envvar="RINGFEED_HOSTS", default="127.0.0.1", show_default=True,
              help="Comma-separated Cassandra contact points [env RINGFEED_HOSTS].")
@click.option("--port", envvar="RINGFEED_PORT", default=9042, show_default=True, help="CQL port [env RINGFEED_PORT].")
@click.option("--username", envvar="RINGFEED_USERNAME", default=None, help="[env RINGFEED_USERNAME]")
@click.option("--password", envvar="RINGFEED_PASSWORD", default=None, help="[env RINGFEED_PASSWORD]")
@click.version_option(package_name="ringfeed")
@click.pass_context
def main(ctx, hosts, port, username, password):
    """Ringfeed: deep-learning training data in an Apache Cassandra ring.

    \b
    Typical session:
      ringfeed local up                        # a real Cassandra node on 127.0.0.1
      ringfeed dataset create pets --key path:text --encoding jpeg
      ringfeed ingest pets ./pets              # ImageFolder, CSV/Parquet manifest or .tar shards
      ringfeed inspect pets
    """
    ctx.obj = ClusterAddress(tuple(h.strip() for h in hosts.split(",") if h.strip()), port, username, password)


def _store(ctx):
    from ringfeed.store import Store

    return Store(ctx.obj)


# -- local ring ---------------------------------------------------------------------------------------------------

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
    _print_ring(ring)
    console.print(f"CQL on {', '.join(ring.hosts)}:9042 · stop with [bold]ringfeed local down[/]")


@local.command("status")
@click.pass_context
def local_status(ctx):
    """Nodes, PIDs, CQL readiness and data size."""
    _print_ring(_ring(ctx))


@local.command("add-node")
@click.pass_context
def local_add_node(ctx):
    """Bootstrap one more node; it streams its share of the data, then serves CQL."""
    ring = _ring(ctx)
    with console.status("bootstrapping a new node…"):
        index = ring.add_node()
    console.print(f"node {index} joined on {ring.address(index)}")
    _print_ring(ring)


@local.command("remove-node")
@click.option("--node", "index", type=int, default=None, help="Node index (default: the highest).")
@click.pass_context
def local_remove_node(ctx, index):
    """Decommission a node (its data streams to the others), then stop its JVM."""
    ring = _ring(ctx)
    with console.status("decommissioning…"):
        removed = ring.remove_node(index)
    console.print(f"node {removed} decommissioned and stopped")
    _print_ring(ring)


@local.command("down")
@click.option("--purge", is_flag=True, help="Also delete data, logs and state.")
@click.pass_context
def local_down(ctx, purge):
    """Stop every node by PID."""
    ring = _ring(ctx)
    ring.down(purge=purge)
    console.print("local ring stopped" + (" and purged" if purge else ""))


def _print_ring(ring) -> None:
    table = Table("node", "address", "pid", "state", "CQL", "data")
    for node in ring.status():
        state = "decommissioned" if node.decommissioned else ("running" if node.running else "stopped")
        table.add_row(str(node.index), node.address, str(node.pid or "-"), state,
                      "[green]ready[/]" if node.cql_ready else "[red]no[/]", _human_bytes(node.data_bytes))
    console.print(table)


# -- datasets -----------------------------------------------------------------------------------------------------

@main.group()
def dataset():
    """Create or drop a dataset (its keyspace, three tables and catalog entry)."""


@dataset.command("create")
@click.argument("name")
@click.option("--key", "keys", multiple=True, required=True, metavar="NAME:TYPE",
              help="Natural-key column (repeatable, in order); TYPE text|int|bigint.")
@click.option("--meta", "metadata", multiple=True, metavar="NAME:TYPE",
              help="Extra metadata column (repeatable); TYPE text|int|bigint|double|boolean.")
@click.option("--encoding", type=click.Choice(["jpeg", "png", "tiff", "raw"]), required=True)
@click.option("--dtype", default=None, help="Raw tensors: element type, e.g. float32.")
@click.option("--shape", default=None, help="Raw tensors: comma-separated shape, e.g. 3,224,224.")
@click.option("--label-names", default="", help="Comma-separated class names, label 0 first (e.g. normal,tumor).")
@click.option("--replication-factor", "--rf", "rf", default=1, show_default=True)
@click.option("--keyspace", default="", help="Keyspace name (default: the dataset name).")
@click.option("--metadata-by-uuid/--no-metadata-by-uuid", default=True, show_default=True,
              help="Also keep metadata by UUID, to trace results back to samples.")
@click.pass_context
def dataset_create(ctx, name, keys, metadata, encoding, dtype, shape, label_names, rf, keyspace, metadata_by_uuid):
    """Declare dataset NAME.

    \b
    Examples:
      ringfeed dataset create slides --key patient:text --key slide:int --key x:int --key y:int \\
          --meta stain:text --encoding jpeg --rf 2
      ringfeed dataset create volumes --key case:text --encoding raw --dtype float32 --shape 1,64,64,64
    """
    from ringfeed.schema import Column, DatasetSchema, Encoding

    shape_tuple = tuple(int(d) for d in shape.split(",")) if shape else None
    schema = DatasetSchema(
        name=name, natural_keys=tuple(Column.parse(k) for k in keys), metadata=tuple(Column.parse(m) for m in metadata),
        encoding=Encoding(encoding, dtype, shape_tuple), replication_factor=rf, keyspace=keyspace,
        label_names=tuple(n.strip() for n in label_names.split(",") if n.strip()),
        with_metadata_by_uuid=metadata_by_uuid,
    )
    with _store(ctx) as store:
        created = store.create_dataset(schema)
    console.print(f"dataset [bold]{name}[/] " + ("created" if created else "already exists (same schema)")
                  + f" in keyspace {schema.keyspace}")


@dataset.command("drop")
@click.argument("name")
@click.option("--keep-tables", is_flag=True, help="Only forget the catalog entry; keep keyspace and tables.")
@click.confirmation_option(prompt="Drop the dataset and its samples?")
@click.pass_context
def dataset_drop(ctx, name, keep_tables):
    """Drop dataset NAME (its keyspace, unless --keep-tables)."""
    with _store(ctx) as store:
        store.drop_dataset(name, drop_tables=not keep_tables)
    console.print(f"dataset {name} dropped")


@main.command("datasets")
@click.pass_context
def datasets_list(ctx):
    """List datasets with their sample counts and sizes."""
    with _store(ctx) as store:
        infos = store.datasets()
    table = Table("dataset", "keyspace", "encoding", "samples", "bytes", "labels", "updated")
    for info in infos:
        table.add_row(info.schema.name, info.schema.keyspace, info.schema.encoding.kind, f"{info.samples:,}",
                      _human_bytes(info.bytes), str(len(info.label_counts)),
                      info.stats_updated_at.strftime("%Y-%m-%d %H:%M") if info.stats_updated_at else "-")
    console.print(table if infos else "no datasets yet: create one with `ringfeed dataset create`")


@main.command()
@click.argument("name")
@click.pass_context
def inspect(ctx, name):
    """Schema, per-label counts and bytes of dataset NAME."""
    with _store(ctx) as store:
        info = store.info(name)
    schema = info.schema
    encoding = schema.encoding.kind + (f" {schema.encoding.dtype}{list(schema.encoding.shape)}"
                                       if schema.encoding.kind == "raw" else "")
    console.print(f"[bold]{schema.name}[/] · keyspace {schema.keyspace} · RF {schema.replication_factor} · {encoding}")
    console.print("natural key: " + ", ".join(f"{c.name} {c.type}" for c in schema.natural_keys))
    if schema.metadata:
        console.print("metadata:    " + ", ".join(f"{c.name} {c.type}" for c in schema.metadata))
    console.print(f"samples: {info.samples:,} · {_human_bytes(info.bytes)}")
    _print_label_table(schema, info.label_counts, info.label_bytes)
    if info.last_ingest:
        last = info.last_ingest
        console.print(f"last ingest: {last['written']:,} written, {sum(last['rejected'].values()):,} rejected "
                      f"from {last['source']}")


@main.command()
@click.argument("name")
@click.argument("sample_id", metavar="UUID")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="File to write the bytes to.")
@click.pass_context
def get(ctx, name, sample_id, output):
    """Write the bytes of one sample to a file."""
    try:
        parsed = uuid.UUID(sample_id)
    except ValueError:
        raise RingfeedError(f"{sample_id!r} is not a UUID") from None
    with _store(ctx) as store:
        label, data = store.sample(name, parsed)
        label_name = store.schema(name).label_name(label)
    output.write_bytes(data)
    console.print(f"{output}: {len(data):,} bytes, label {label} ({label_name})")


# -- ingest -------------------------------------------------------------------------------------------------------

class _RichIngestProgress:
    def __init__(self, progress: Progress):
        self.progress = progress
        self.task = None

    def start(self, total):
        self.task = self.progress.add_task("ingest", total=total)

    def advance(self, inputs):
        self.progress.advance(self.task, inputs)


@main.command("ingest")
@click.argument("name")
@click.argument("source", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["auto", "imagefolder", "manifest", "webdataset"]),
              default="auto", show_default=True,
              help="auto: .csv/.parquet → manifest, .tar or a folder of .tar → webdataset, else imagefolder.")
@click.option("--path-column", default="path", show_default=True, help="Manifest column with the file path.")
@click.option("--label-column", default="label", show_default=True, help="Manifest/JSON field with the label.")
@click.option("--workers", default=8, show_default=True, help="Threads reading and checking input files.")
@click.option("--concurrency", default=64, show_default=True, help="Writes in flight.")
@click.option("--max-sample-mb", default=64, show_default=True, help="Larger inputs are rejected.")
@click.option("--full-decode", is_flag=True, help="Decode every image to verify it (slow); default: structure check.")
@click.option("--consistency", default="ONE", show_default=True, help="Write consistency level.")
@click.pass_context
def ingest_command(ctx, name, source, fmt, path_column, label_column, workers, concurrency, max_sample_mb,
                   full_decode, consistency):
    """Ingest SOURCE into dataset NAME; re-running is safe (same UUIDs, no duplicates).

    \b
    SOURCE is one of:
      an ImageFolder tree   root/<class>/**/<file>     fields: path, class; label = class index
      a CSV/Parquet manifest with a file-path column, a label column and the schema's columns
      WebDataset .tar shards (a file or a folder)      fields: key + the .json member; label from .cls
    Corrupt, unreadable and oversized inputs are skipped and reported.
    """
    from ringfeed.ingest import IngestOptions, ingest

    options = IngestOptions(format=fmt, path_column=path_column, label_column=label_column, workers=workers,
                            concurrency=concurrency, max_sample_bytes=max_sample_mb * 2**20,
                            full_decode=full_decode, consistency=consistency)
    with _store(ctx) as store:
        with _progress() as progress:
            summary = ingest(store, name, str(source), options, _RichIngestProgress(progress))
        with console.status("counting samples…"):
            info = store.refresh_stats(name)
    print_ingest_summary(summary, info)


class _RateColumn(ProgressColumn):
    """Items per second (rich's TransferSpeedColumn only speaks bytes)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "-/s", style="cyan")


def _progress() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                    _RateColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console)


def print_ingest_summary(summary, info) -> None:
    rejected = sum(summary.rejected.values())
    console.print(f"[bold green]ingested[/] {summary.written:,} samples ({_human_bytes(summary.bytes)}) "
                  f"from {summary.inputs:,} inputs in {summary.seconds:.1f} s "
                  f"· {summary.rows_per_s:,.0f} samples/s · {summary.bytes / 2**20 / max(summary.seconds, 1e-9):.1f} MB/s")
    if rejected:
        console.print(f"[bold yellow]rejected[/] {rejected:,} inputs: "
                      + ", ".join(f"{kind} {count:,}" for kind, count in summary.rejected.most_common()))
        for origin, reason in summary.examples:
            console.print(f"  {origin}: {reason}", highlight=False)
    _print_label_table(info.schema, info.label_counts, info.label_bytes, this_run=summary.label_counts)
    console.print(f"dataset [bold]{info.schema.name}[/] now holds {info.samples:,} samples ({_human_bytes(info.bytes)})")


def _print_label_table(schema, counts, sizes, this_run=None) -> None:
    if not counts and not this_run:
        console.print("no samples yet: add some with `ringfeed ingest`")
        return
    table = Table("label", "name", "samples", "bytes", *(["this ingest"] if this_run is not None else []))
    for label in sorted(set(counts) | set(this_run or {})):
        table.add_row(str(label), schema.label_name(label), f"{counts.get(label, 0):,}",
                      _human_bytes(sizes.get(label, 0)),
                      *([f"{this_run.get(label, 0):,}"] if this_run is not None else []))
    console.print(table)


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# -- demo ---------------------------------------------------------------------------------------------------------

DEMO_DATASET = "demo_slides"


@main.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=Path(".state/demo"), show_default=True,
              help="Where the demo images and manifest are written.")
@click.option("--patients", default=24, show_default=True)
@click.pass_context
def demo(ctx, workdir, patients):
    """Start a local node, make a patient → slide → patch image set, ingest it and show the result."""
    from ringfeed.demo import LABEL_NAMES, make_demo_set
    from ringfeed.ingest import IngestOptions, ingest
    from ringfeed.local import LocalRing
    from ringfeed.schema import Column, DatasetSchema, Encoding

    console.rule("[bold]1 · a real Cassandra node on 127.0.0.1")
    ring = LocalRing(default_local_dir())
    with console.status("starting Cassandra 5.0.9 (first run fetches its jars with Maven)…"):
        ring.up(1)
    _print_ring(ring)

    console.rule("[bold]2 · a histopathology-shaped image set")
    demo_set = make_demo_set(workdir, patients=patients)
    console.print(f"{demo_set.images:,} JPEG patches of {patients} patients + {demo_set.broken} broken inputs, "
                  f"manifest {demo_set.manifest}")

    console.rule(f"[bold]3 · dataset {DEMO_DATASET}")
    schema = DatasetSchema(
        name=DEMO_DATASET,
        natural_keys=(Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
        metadata=(Column("scanner", "text"),), encoding=Encoding("jpeg"), label_names=LABEL_NAMES,
    )
    address = ClusterAddress(tuple(ring.hosts))
    from ringfeed.store import Store

    with Store(address) as store:
        store.create_dataset(schema)
        console.print("tables: metadata_by_nat (partition: patient_id, slide_num, x, y, label), data_by_uuid, "
                      "metadata_by_uuid")
        console.rule("[bold]4 · ingest")
        with _progress() as progress:
            summary = ingest(store, DEMO_DATASET, str(demo_set.manifest), IngestOptions(),
                             _RichIngestProgress(progress))
        info = store.refresh_stats(DEMO_DATASET)
    print_ingest_summary(summary, info)
    console.rule("[bold]done")
    console.print(f"the node keeps running: try [bold]ringfeed inspect {DEMO_DATASET}[/] or "
                  f"[bold]ringfeed datasets[/]; stop it with [bold]ringfeed local down[/] (or make local-down)")
