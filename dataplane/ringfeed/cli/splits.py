"""``ringfeed split``: create, list, show, export, import and delete splits."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from ringfeed.cli.app import console, main, open_store
from ringfeed.cli.render import JSON_OPTION, human_bytes, print_json, print_table, progress_bar, split_json
from ringfeed.cli.types import NON_NEGATIVE, SEED, VERSION, IntList

RATIOS = IntList("7,2,1")


@main.group()
def split():
    """Train/val/test (or k-fold) splits computed from a dataset's metadata, stored as immutable versions."""


@split.command("create")
@click.argument("dataset")
@click.argument("name")
@click.option("--ratios", type=RATIOS, default=None, metavar="R1,R2,…",
              help="Part ratios as positive integers, e.g. 7,2,1 (default 7,2,1).")
@click.option("--folds", type=NON_NEGATIVE, default=0,
              help="k-fold cross-validation: k equal parts (instead of --ratios).")
@click.option("--names", default="", metavar="N1,N2,…",
              help="Part names (default train,val,test for three ratios, fold0… for folds).")
@click.option("--group-by", "group_by", multiple=True, metavar="COLUMN",
              help="Keep all samples sharing these values in one part, e.g. patient_id (repeatable).")
@click.option("--balance", default="natural", show_default=True,
              help="natural (the data's class ratio), equal, or weights per label: 0=1,1=1 or normal=1,tumor=2.")
@click.option("--max-samples", type=NON_NEGATIVE, default=0, help="Cap on the total number of samples (0: none).")
@click.option("--max-per-part", default="", metavar="PART=N,…", help="Caps per part, e.g. val=5000,test=5000.")
@click.option("--where", "filters", multiple=True, metavar="FILTER",
              help="Metadata filter (repeatable, all must hold): 'slide_num < 5', \"scanner == 'aperio'\", "
                   "'label in (0, 1)'.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Another seed gives another assignment.")
@click.option("--spec-json", default=None, metavar="JSON",
              help="All of the above as one JSON object, the \"spec\" of `split show --json` (the operator's split "
                   "Jobs pass this: any label or value survives it unchanged). Not with the other options.")
@click.pass_context
def split_create(ctx, dataset, name, ratios, folds, names, group_by, balance, max_samples, max_per_part, filters,
                 seed, spec_json):
    """Compute split NAME of DATASET and store it.

    Groups never straddle parts; classes follow --balance within every part; rows are drawn round-robin across
    a part's groups when caps or balance need fewer than the groups hold. The same data, parameters and seed give
    the same split (same content hash); running it again stores nothing new.

    \b
    Examples:
      ringfeed split create slides by-patient --ratios 7,2,1 --group-by patient_id --seed 42
      ringfeed split create slides cv5 --folds 5 --group-by patient_id --balance equal
      ringfeed split create slides small --ratios 8,1,1 --max-samples 10000 --where 'slide_num < 5'
    """
    from ringfeed.splits import create_split

    spec = (spec_from_json(ctx, spec_json) if spec_json is not None else
            spec_from_options(ratios, folds, names, group_by, balance, max_samples, max_per_part, filters, seed))
    with open_store(ctx) as store:
        check_text_filters(spec.filters, store.schema(dataset))
        expected = store.info(dataset).samples
        with progress_bar() as progress:
            task = progress.add_task("scan metadata", total=expected or None)
            stored, created = create_split(store, dataset, name, spec,
                                           lambda rows: progress.update(task, completed=rows))
    print_split(stored)
    console.print(f"[bold green]stored[/] as version {stored.version}" if created else
                  f"identical to version {stored.version} (same parameters and content): nothing stored")


def spec_from_json(ctx: click.Context, text: str):
    """The SplitSpec of --spec-json, which stands for every other option of `split create`."""
    import json

    from ringfeed.splits import SplitSpec

    given = [f"--{param.name.replace('_', '-')}" for param in ctx.command.params
             if isinstance(param, click.Option) and param.name != "spec_json"
             and ctx.get_parameter_source(param.name) == click.core.ParameterSource.COMMANDLINE]
    if given:
        raise click.UsageError(f"--spec-json stands for the other options: leave out {', '.join(given)}")
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        return SplitSpec.from_dict(raw)
    except (ValueError, KeyError, TypeError) as error:
        raise click.BadParameter(f"not a split spec: {error}", param_hint="--spec-json") from error


def spec_from_options(ratios, folds, names, group_by, balance, max_samples, max_per_part, filters, seed):
    """The SplitSpec that `split create`'s options describe."""
    from ringfeed.splits import Filter, SplitSpec, parse_weights

    if ratios and folds:
        raise click.UsageError("give --ratios or --folds, not both")
    return SplitSpec(
        ratios=() if folds else RATIOS.convert(ratios or "7,2,1", None, None), folds=folds,
        names=tuple(n.strip() for n in names.split(",") if n.strip()), group_by=tuple(group_by),
        balance=balance if balance in ("natural", "equal") else parse_weights(balance, "balance weight"),
        max_samples=max_samples, max_per_part=parse_weights(max_per_part, "max per part") if max_per_part else (),
        filters=tuple(Filter.parse(f) for f in filters), seed=seed,
    )


def check_text_filters(filters, schema) -> None:
    """A number or boolean written unquoted against a text column is refused with the message the engine gives for
    every other column type ("filter F: COLUMN is KIND, VALUE is not"), instead of being compared as text: 007
    would read as 7 and match nothing."""
    from ringfeed.splits import SplitError

    text_columns = {c.name for c in schema.columns if c.type == "text"}
    for f in filters:
        if f.column in text_columns:
            for value in f.values:
                if not isinstance(value, str):
                    raise SplitError(f"filter {f}: {f.column} is text, {value!r} is not (quote it: "
                                     f"{f.column} {f.op} '{_as_written(value)}')")


def _as_written(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@split.command("list")
@click.argument("dataset", required=False)
@JSON_OPTION
@click.pass_context
def split_list(ctx, dataset, as_json):
    """Splits of DATASET (or of every dataset), newest version first."""
    from ringfeed.splits import list_splits

    with open_store(ctx) as store:
        splits = list_splits(store, dataset)
    if as_json:
        print_json([split_json(s, detail=False) for s in splits])
        return
    if not splits:
        console.print("no splits yet: create one with `ringfeed split create`")
        return
    table = Table("dataset", "split", "version", "parts", "samples", "hash", "created")
    for s in splits:
        table.add_row(s.dataset, s.name, str(s.version),
                      " · ".join(f"{part} {size:,}" for part, size in s.part_sizes.items()), f"{s.samples:,}",
                      s.content_hash.removeprefix("sha256:")[:12],
                      s.created_at.strftime("%Y-%m-%d %H:%M") if s.created_at else "-")
    print_table(table)


@split.command("show")
@click.argument("dataset")
@click.argument("name")
@click.option("--version", type=VERSION, default=None, help="Default: the latest.")
@JSON_OPTION
@click.pass_context
def split_show(ctx, dataset, name, version, as_json):
    """Parameters and statistics of a split: achieved vs target per part, and per part × class (with what the
    part's groups held), groups per part."""
    from ringfeed.splits import get_split

    with open_store(ctx) as store:
        stored = get_split(store, dataset, name, version)
    if as_json:
        print_json(split_json(stored, detail=True))
        return
    print_split(stored)


@split.command("export")
@click.argument("dataset")
@click.argument("name")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--version", type=VERSION, default=None, help="Default: the latest.")
@click.pass_context
def split_export(ctx, dataset, name, file, version):
    """Write a split's UUIDs to FILE (.parquet: columns part, uuid; .npz: one (n, 16) uint8 array per part),
    with its parameters, statistics and content hash."""
    from ringfeed.splits import export_split, load_split

    with open_store(ctx) as store:
        stored = load_split(store, dataset, name, version)
    export_split(stored, file)
    console.print(f"{file}: {stored.samples:,} UUIDs of {dataset}/{name} v{stored.version} "
                  f"({', '.join(f'{p} {n:,}' for p, n in stored.part_sizes.items())})")


@split.command("import")
@click.argument("dataset")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--name", default=None, help="Split name (default: the name recorded in the file).")
@click.pass_context
def split_import(ctx, dataset, file, name):
    """Store the split in FILE (from `split export`) under DATASET, the dataset it was made from; its content must
    match its recorded hash."""
    from ringfeed.splits import import_split

    with open_store(ctx) as store:
        stored, created = import_split(store, dataset, file, name)
    print_split(stored)
    console.print(f"[bold green]imported[/] as version {stored.version}" if created else
                  f"identical to version {stored.version}: nothing stored")


@split.command("delete")
@click.argument("dataset")
@click.argument("name")
@click.option("--version", type=VERSION, default=None, help="Delete only this version (default: all of them).")
@click.confirmation_option(prompt="Delete the split?")
@click.pass_context
def split_delete(ctx, dataset, name, version):
    """Delete a split (every version, or one)."""
    from ringfeed.splits import delete_split

    with open_store(ctx) as store:
        deleted = delete_split(store, dataset, name, version)
    console.print(f"deleted {dataset}/{name} version{'s' if len(deleted) > 1 else ''} "
                  + ", ".join(map(str, deleted)))


def print_split(stored) -> None:
    stats = stored.stats
    console.print(f"split [bold]{stored.dataset}/{stored.name}[/] v{stored.version} · {stored.content_hash[:19]}…")
    console.print(stored.spec.describe(), highlight=False)
    console.print(f"{stats['scanned']:,} samples scanned · {stats['selected']:,} selected · "
                  f"{stats['samples']:,} used · {stats['groups']:,} groups"
                  + (f" · {stats['placement']} placement" if "placement" in stats else ""), highlight=False)
    parts = Table("part", "ratio", "samples\n[dim]got/target", "share", "groups", "size")
    for part in stats["parts"]:
        parts.add_row(part["name"], str(part["ratio"]), f"{part['samples']:,}/{part['target']:,}",
                      f"{part['share']:.1%}", f"{part['groups']:,}", human_bytes(part["bytes"]))
    print_table(parts)
    print_table(class_table(stats))


def class_table(stats: dict) -> Table:
    """Achieved vs target per part × class: a row per class, a column per part, each cell
    ``got/target`` and, in brackets, what the part's groups held of the class."""
    names = stats.get("label_names", {})
    labels = list(stats["parts"][0]["labels"]) if stats["parts"] else []
    table = Table("class", *(f"{part['name']}\n[dim]got/target (held)" for part in stats["parts"]))
    for label in labels:
        cells = []
        for part in stats["parts"]:
            cell = part["labels"][label]
            cells.append(f"{cell['samples']:,}/{cell['target']:,} ({cell['available']:,})")
        table.add_row(f"{label} {names[label]}" if label in names else label, *cells)
    return table
