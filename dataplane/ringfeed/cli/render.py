"""How the CLI shows things: progress bars, sizes, label tables."""

from __future__ import annotations

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TaskProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from ringfeed.cli.app import console


class RateColumn(ProgressColumn):
    """Items per second (rich's TransferSpeedColumn only speaks bytes)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "-/s", style="cyan")


def progress_bar() -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                    RateColumn(), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console)


def print_label_table(schema, counts, sizes, this_run=None) -> None:
    if not counts and not this_run:
        console.print("no samples yet: add some with `ringfeed ingest`")
        return
    table = Table("label", "name", "samples", "bytes", *(["this ingest"] if this_run is not None else []))
    for label in sorted(set(counts) | set(this_run or {})):
        table.add_row(str(label), schema.label_name(label), f"{counts.get(label, 0):,}",
                      human_bytes(sizes.get(label, 0)),
                      *([f"{this_run.get(label, 0):,}"] if this_run is not None else []))
    console.print(table)


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
