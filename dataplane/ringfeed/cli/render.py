"""How the CLI shows things: progress bars, sizes, tables for people and JSON for scripts.

The JSON documents (``--json``) are built here by pure functions; their keys are part of the CLI's contract and
documented in docs/datasets.md and docs/splits.md: add keys, never rename or remove one.
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ringfeed.cli.app import console, err_console

JSON_OPTION = click.option("--json", "as_json", is_flag=True,
                           help="Print one JSON document (stable keys, see the docs) instead of tables.")

# Wide enough for any table: what a table measures under it is its natural width.
UNLIMITED_WIDTH = 1_000_000


class RateColumn(ProgressColumn):
    """Items per second (rich's TransferSpeedColumn only speaks bytes)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "-/s", style="cyan")


class StderrProgress(Progress):
    """rich's Progress, but drawing nothing at its end (not even the blank line rich prints on a non-terminal) when
    it had no task, or when it ends with an error on a non-terminal: the command's one-line error is then the whole
    of stderr."""

    failed = False

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.failed = exc_type is not None and not self.console.is_interactive
        self.stop()

    def stop(self) -> None:
        if not self.disable and (self.failed or not self.tasks):
            self.live.transient = True
            self.live.stop()
            return
        super().stop()


def progress_bar() -> Progress:
    """A progress bar on stderr: stdout keeps the command's result. Not on a terminal (a pipe, a Job's log), the bar
    is drawn once, as it ends."""
    return StderrProgress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TaskProgressColumn(), RateColumn(), TimeElapsedColumn(), TextColumn("eta"),
                          TimeRemainingColumn(), console=err_console)


def print_label_table(schema, counts, sizes, this_run=None) -> None:
    if not counts and not this_run:
        console.print("no samples yet: add some with `ringfeed ingest`")
        return
    table = Table("label", "name", "samples", "bytes", *(["this ingest"] if this_run is not None else []))
    for label in sorted(set(counts) | set(this_run or {})):
        table.add_row(str(label), schema.label_name(label), f"{counts.get(label, 0):,}",
                      human_bytes(sizes.get(label, 0)),
                      *([f"{this_run.get(label, 0):,}"] if this_run is not None else []))
    print_table(table)


def print_table(table: Table, out: Console = console) -> None:
    """A table for people: fitted to a terminal; at its natural width otherwise (a pipe, a file), so that no cell is
    cut or wrapped to fit 80 columns."""
    if not out.is_terminal:
        natural = out.measure(table, options=out.options.update(max_width=UNLIMITED_WIDTH)).maximum
        out = Console(file=out.file, width=max(natural, out.width), no_color=True)
    out.print(table)


def print_json(document) -> None:
    """A JSON document for scripts, alone on stdout."""
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def dataset_json(info) -> dict:
    """A dataset as ``datasets --json`` and ``inspect --json`` show it."""
    schema = info.schema
    labels = sorted(set(info.label_counts) | set(range(len(schema.label_names))))
    return {
        "name": schema.name, "keyspace": schema.keyspace, "dataset_id": _text(info.dataset_id),
        "encoding": {"kind": schema.encoding.kind, "dtype": schema.encoding.dtype,
                     "shape": list(schema.encoding.shape) if schema.encoding.shape else None},
        "replication_factor": schema.replication_factor,
        "natural_keys": [{"name": c.name, "type": c.type} for c in schema.natural_keys],
        "metadata": [{"name": c.name, "type": c.type} for c in schema.metadata],
        "samples": info.samples, "bytes": info.bytes,
        "labels": [{"label": label, "name": schema.label_name(label), "samples": info.label_counts.get(label, 0),
                    "bytes": info.label_bytes.get(label, 0)} for label in labels],
        "created_at": _time(info.created_at), "stats_updated_at": _time(info.stats_updated_at),
        "last_ingest": info.last_ingest,
    }


def split_json(stored, *, detail: bool) -> dict:
    """A split version as ``split list --json`` shows it; with ``detail`` (``split show --json``) also its
    parameters and statistics (per part, and per part × class: samples, target, available)."""
    document = {
        "dataset": stored.dataset, "name": stored.name, "version": stored.version, "split_id": str(stored.split_id),
        "dataset_id": _text(stored.dataset_id), "content_hash": stored.content_hash,
        "parts": dict(stored.part_sizes), "samples": stored.samples, "created_at": _time(stored.created_at),
    }
    if detail:
        document |= {"spec": stored.spec.to_dict(), "stats": stored.stats}
    return document


def sample_json(dataset: str, schema, record, output) -> dict:
    """One sample as ``get --json`` shows it (``fields``: natural keys and metadata, null when unknown)."""
    return {"dataset": dataset, "uuid": str(record.uuid), "label": record.label,
            "label_name": schema.label_name(record.label), "bytes": len(record.data),
            "fields": record.fields, "output": str(output) if output else None}


def _time(moment) -> str | None:
    return moment.isoformat() if moment else None


def _text(value) -> str | None:
    return str(value) if value is not None else None


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"
