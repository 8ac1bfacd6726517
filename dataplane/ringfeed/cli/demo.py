"""``ringfeed demo``: the whole path on one local node, from images to a split streamed by the loader."""

from __future__ import annotations

from pathlib import Path

import click

from ringfeed.cli.app import console, default_local_dir, err_console, main
from ringfeed.cli.datasets import RichIngestProgress, print_ingest_summary
from ringfeed.cli.load import print_throughput, run_epochs
from ringfeed.cli.local import print_ring
from ringfeed.cli.render import progress_bar
from ringfeed.cli.splits import print_split
from ringfeed.cli.types import COUNT
from ringfeed.connection import ClusterAddress

DEMO_DATASET = "demo_slides"
DEMO_SPLIT = "by-patient"


@main.command()
@click.option("--workdir", type=click.Path(path_type=Path), default=Path(".state/demo"), show_default=True,
              help="Where the demo images and manifest are written.")
@click.option("--patients", default=24, show_default=True, type=COUNT)
@click.pass_context
def demo(ctx, workdir, patients):
    """Start a local node, make a patient → slide → patch image set, ingest it, split it by patient, load it."""
    from ringfeed.demo import LABEL_NAMES, make_demo_set
    from ringfeed.ingest import IngestOptions, ingest
    from ringfeed.loader import Decode, Loader
    from ringfeed.local import LocalRing
    from ringfeed.schema import Column, DatasetSchema, Encoding
    from ringfeed.splits import SplitSpec, create_split

    console.rule("[bold]1 · a real Cassandra node on 127.0.0.1")
    ring = LocalRing(default_local_dir())
    with err_console.status("starting Cassandra 5.0.9 (first run fetches its jars with Maven)…"):
        ring.up(1)
    print_ring(ring)

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
        console.print(describe_tables(schema), highlight=False)
        console.rule("[bold]4 · ingest")
        with progress_bar() as progress:
            summary = ingest(store, DEMO_DATASET, str(demo_set.manifest), IngestOptions(),
                             RichIngestProgress(progress))
        info = store.refresh_stats(DEMO_DATASET)
        print_ingest_summary(summary, info)

        console.rule(f"[bold]5 · split {DEMO_SPLIT}: 7:2:1, no patient in two parts")
        spec = SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=42)
        stored, _ = create_split(store, DEMO_DATASET, DEMO_SPLIT, spec)
        print_split(stored)

        console.rule("[bold]6 · two epochs of the train part through the loader, decoded to 224×224")
        loader = Loader(DEMO_DATASET, DEMO_SPLIT, "train", batch_size=64, store=store, decode=Decode(224, 224), seed=42)
    print_throughput(loader, run_epochs(loader, 2))
    console.rule("[bold]done")
    console.print(f"the node keeps running: try [bold]ringfeed inspect {DEMO_DATASET}[/], "
                  f"[bold]ringfeed split show {DEMO_DATASET} {DEMO_SPLIT}[/] or [bold]ringfeed split create "
                  f"{DEMO_DATASET} balanced --group-by patient_id --balance equal[/]; "
                  "stop it with [bold]ringfeed local down[/] (or make local-down)")


def describe_tables(schema) -> str:
    """The dataset's tables, with the partition key of ``metadata_by_nat`` as the schema makes it."""
    from ringfeed.schema import METADATA_BY_NAT

    tables = [f"{METADATA_BY_NAT} (partition: {', '.join(schema.partition_key(METADATA_BY_NAT))})", "data_by_uuid"]
    if schema.with_metadata_by_uuid:
        tables.append("metadata_by_uuid")
    return "tables: " + ", ".join(tables)
