"""``ringfeed dataset|datasets|inspect|get|ingest``: datasets and their samples."""

from __future__ import annotations

import uuid
from pathlib import Path

import click
from rich.progress import Progress
from rich.table import Table

from ringfeed.cli.app import console, err_console, main, open_store
from ringfeed.cli.render import (
    JSON_OPTION,
    dataset_json,
    human_bytes,
    print_json,
    print_label_table,
    print_table,
    progress_bar,
    sample_json,
)
from ringfeed.cli.types import COUNT, PORT, IntList
from ringfeed.errors import RingfeedError
from ringfeed.loader.options import CONSISTENCY_LEVELS  # the native session's levels, for writes as for reads


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
@click.option("--shape", type=IntList("3,224,224"), default=None,
              help="Raw tensors: comma-separated shape, e.g. 3,224,224.")
@click.option("--label-names", default="", help="Comma-separated class names, label 0 first (e.g. normal,tumor).")
@click.option("--replication-factor", "--rf", "rf", default=1, show_default=True, type=COUNT)
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

    schema = DatasetSchema(
        name=name, natural_keys=tuple(Column.parse(k) for k in keys), metadata=tuple(Column.parse(m) for m in metadata),
        encoding=Encoding(encoding, dtype, shape), replication_factor=rf, keyspace=keyspace,
        label_names=tuple(n.strip() for n in label_names.split(",") if n.strip()),
        with_metadata_by_uuid=metadata_by_uuid,
    )
    with open_store(ctx) as store:
        created = store.create_dataset(schema)
    console.print(f"dataset [bold]{name}[/] " + ("created" if created else "already exists (same schema)")
                  + f" in keyspace {schema.keyspace}")


@dataset.command("drop")
@click.argument("name")
@click.option("--keep-tables", is_flag=True, help="Keep keyspace and tables; forget the catalog entry (and splits).")
@click.option("--force", is_flag=True, help="Also drop the dataset's splits (without it, one with splits is kept).")
@click.confirmation_option(prompt="Drop the dataset and its samples?")
@click.pass_context
def dataset_drop(ctx, name, keep_tables, force):
    """Drop dataset NAME: its splits (only with --force), its keyspace (unless --keep-tables), its catalog entry."""
    with open_store(ctx) as store:
        store.drop_dataset(name, drop_tables=not keep_tables, force=force)
    console.print(f"dataset {name} dropped")


@dataset.command("migrate")
@click.argument("name")
@click.pass_context
def dataset_migrate(ctx, name):
    """Bring dataset NAME, written by an earlier Ringfeed, up to the current layout (run it once; re-running is safe).

    Makes metadata_by_nat one row per natural key (a relabelled sample had a row per label), gives the dataset the
    identity its splits record, and keeps the splits that are still valid. Stop ingests into NAME first.
    """
    from ringfeed.migration import migrate_dataset

    with open_store(ctx) as store:
        with err_console.status(f"migrating {name}…"):
            summary = migrate_dataset(store, name)
    if summary.up_to_date:
        console.print(f"dataset {name} is up to date: nothing to migrate")
        return
    console.print(f"[bold green]migrated[/] {name}: {summary.samples:,} samples"
                  + (f" ({summary.old_rows:,} rows before, {summary.relabelled:,} relabelled samples counted once "
                     "with their last label)" if summary.old_rows else ""))
    if summary.splits_kept:
        console.print("splits kept: " + ", ".join(summary.splits_kept), highlight=False)
    for split, why in summary.splits_refused:
        console.print(f"[bold yellow]split {split} no longer loads[/]: {why}; delete it and create it again",
                      highlight=False)


@main.command("datasets")
@JSON_OPTION
@click.pass_context
def datasets_list(ctx, as_json):
    """List datasets with their sample counts and sizes."""
    with open_store(ctx) as store:
        infos = store.datasets()
    if as_json:
        print_json([dataset_json(info) for info in infos])
        return
    table = Table("dataset", "keyspace", "encoding", "samples", "bytes", "labels", "updated")
    for info in infos:
        table.add_row(info.schema.name, info.schema.keyspace, info.schema.encoding.kind, f"{info.samples:,}",
                      human_bytes(info.bytes), str(len(info.label_counts)),
                      info.stats_updated_at.strftime("%Y-%m-%d %H:%M") if info.stats_updated_at else "-")
    if infos:
        print_table(table)
    else:
        console.print("no datasets yet: create one with `ringfeed dataset create`")


@main.command()
@click.argument("name")
@JSON_OPTION
@click.pass_context
def inspect(ctx, name, as_json):
    """Schema, per-label counts and bytes of dataset NAME."""
    with open_store(ctx) as store:
        info = store.info(name)
    if as_json:
        print_json(dataset_json(info))
        return
    schema = info.schema
    encoding = schema.encoding.kind + (f" {schema.encoding.dtype}{list(schema.encoding.shape)}"
                                       if schema.encoding.kind == "raw" else "")
    console.print(f"[bold]{schema.name}[/] · keyspace {schema.keyspace} · RF {schema.replication_factor} · {encoding}")
    console.print("natural key: " + ", ".join(f"{c.name} {c.type}" for c in schema.natural_keys))
    if schema.metadata:
        console.print("metadata:    " + ", ".join(f"{c.name} {c.type}" for c in schema.metadata))
    console.print(f"samples: {info.samples:,} · {human_bytes(info.bytes)}")
    print_label_table(schema, info.label_counts, info.label_bytes)
    if info.last_ingest:
        last = info.last_ingest
        console.print(f"last ingest: {last['written']:,} written, {sum(last['rejected'].values()):,} rejected "
                      f"from {last['source']}")


@main.command()
@click.argument("name")
@click.argument("sample_id", metavar="[UUID]", required=False)
@click.option("--key", "keys", multiple=True, metavar="COLUMN=VALUE",
              help="Look the sample up by its natural key instead of its UUID: every natural-key column once.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="Write the sample's bytes here.")
@JSON_OPTION
@click.pass_context
def get(ctx, name, sample_id, keys, output, as_json):
    """Show one sample of dataset NAME (UUID, label, natural keys and metadata, size), by UUID or by natural key;
    -o writes its bytes to a file.

    \b
    Examples:
      ringfeed get slides 6f1c9a4e-…                  # by UUID
      ringfeed get slides --key patient_id=P001 --key slide_num=0 --key x=0 --key y=224 -o patch.jpg
    """
    if bool(sample_id) == bool(keys):
        raise RingfeedError("give a sample's UUID or its natural key (--key COLUMN=VALUE for each key column), "
                            "not both")
    with open_store(ctx) as store:
        if keys:
            record = store.sample_by_key(name, parse_key_values(keys))
        else:
            record = store.sample(name, parse_uuid(sample_id))
        schema = store.schema(name)
    if output:
        output.write_bytes(record.data)
    if as_json:
        print_json(sample_json(name, schema, record, output))
        return
    table = Table("field", "value", show_header=False, box=None)
    table.add_row("uuid", str(record.uuid))
    table.add_row("label", f"{record.label} ({schema.label_name(record.label)})")
    table.add_row("bytes", f"{len(record.data):,}" + (f" → {output}" if output else ""))
    if record.fields is None:
        table.add_row("fields", "unknown: the dataset keeps no metadata_by_uuid (look it up by --key instead)")
    for column, value in (record.fields or {}).items():
        table.add_row(column, str(value))
    print_table(table)


def parse_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise RingfeedError(f"{text!r} is not a UUID") from None


def parse_key_values(items: tuple[str, ...]) -> dict[str, str]:
    """``--key COLUMN=VALUE`` options as a dict (values as typed; the store converts them to the column types)."""
    values: dict[str, str] = {}
    for item in items:
        column, sep, value = item.partition("=")
        if not sep or not column.strip():
            raise RingfeedError(f"--key {item!r}: write COLUMN=VALUE, e.g. --key patient_id=P001")
        if column.strip() in values:
            raise RingfeedError(f"--key {column.strip()} is given twice")
        values[column.strip()] = value
    return values


class RichIngestProgress:
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
@click.option("--workers", default=8, show_default=True, type=COUNT, help="Threads reading and checking input files.")
@click.option("--concurrency", default=64, show_default=True, type=COUNT, help="Writes in flight.")
@click.option("--max-sample-mb", default=64, show_default=True, type=COUNT, help="Larger inputs are rejected.")
@click.option("--full-decode", is_flag=True, help="Decode every image to verify it (slow); default: structure check.")
@click.option("--consistency", type=click.Choice(CONSISTENCY_LEVELS, case_sensitive=False), default="ONE",
              show_default=True, help="Write consistency level.")
@click.option("--metrics-port", type=PORT, default=None,
              help="Serve the ingest's progress and rejects by reason to Prometheus on this port while it runs "
                   "(the operator's ingest Jobs do).")
@click.pass_context
def ingest_command(ctx, name, source, fmt, path_column, label_column, workers, concurrency, max_sample_mb,
                   full_decode, consistency, metrics_port):
    """Ingest SOURCE into dataset NAME; re-running is safe (same UUIDs, no duplicates).

    \b
    SOURCE is one of:
      an ImageFolder tree   root/<class>/**/<file>     fields: path, class; label = class index
      a CSV/Parquet manifest with a file-path column, a label column and the schema's columns
      WebDataset .tar shards (a file or a folder)      fields: key + the .json member; label from .cls
    Corrupt, unreadable and oversized inputs are skipped and reported.
    """
    from ringfeed.ingest import IngestOptions, IngestSummary, ingest
    from ringfeed.metrics import serve_ingest_metrics

    options = IngestOptions(format=fmt, path_column=path_column, label_column=label_column, workers=workers,
                            concurrency=concurrency, max_sample_bytes=max_sample_mb * 2**20,
                            full_decode=full_decode, consistency=consistency.upper())
    summary = IngestSummary(name, str(source))
    if metrics_port is not None:
        serve_ingest_metrics(summary, metrics_port)
    with open_store(ctx) as store:
        with progress_bar() as progress:
            ingest(store, name, str(source), options, RichIngestProgress(progress), summary)
        with err_console.status("counting samples…"):
            info = store.refresh_stats(name)
    print_ingest_summary(summary, info)


def print_ingest_summary(summary, info) -> None:
    rejected = sum(summary.rejected.values())
    megabytes_per_s = summary.bytes / 2**20 / max(summary.seconds, 1e-9)
    console.print(f"[bold green]ingested[/] {summary.written:,} samples ({human_bytes(summary.bytes)}) "
                  f"from {summary.inputs:,} inputs in {summary.seconds:.1f} s · {summary.rows_per_s:,.0f} samples/s "
                  f"· {megabytes_per_s:.1f} MB/s · {summary.retries:,} retries")
    if rejected:
        console.print(f"[bold yellow]rejected[/] {rejected:,} inputs: "
                      + ", ".join(f"{kind} {count:,}" for kind, count in summary.rejected.most_common()))
        for origin, reason in summary.examples:
            console.print(f"  {origin}: {reason}", highlight=False)
    print_label_table(info.schema, info.label_counts, info.label_bytes, this_run=summary.label_counts)
    console.print(f"dataset [bold]{info.schema.name}[/] now holds {info.samples:,} samples ({human_bytes(info.bytes)})")
