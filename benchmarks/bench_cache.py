"""make bench-cache: a standard torchvision ImageFolder + DataLoader reading a split part through the Alluxio FUSE
cache tier, against the same files on local disk, in one run.

One dedicated Cassandra node; an ImageFolder of JPEGs of about ImageNet's mean size (~110 kB, 500×375, 10 classes),
ingested and split into one part. Each epoch is the ImageNet training input pipeline (RandomResizedCrop(224),
RandomHorizontalFlip, ToTensor) with `--workers` DataLoader processes and batches of 64, timed from the first batch
to the last: decoded 224² batches per second.
  - tuned tier (the preset): epoch 1 cold (every file read from the ring into the worker's memory), then warm epochs
    and local-disk epochs in the order W L L W (symmetric in time); the ring's reads of data_by_uuid are counted in
    each FUSE epoch (nodetool tablestats);
  - the same on a tier with Alluxio's defaults (cold, warm), for the preset's effect;
  - a fresh tuned tier preloaded (`ringfeed cache preload`: every file read once through the mount, 32 at once;
    timed: files/s and MB/s from the ring into the tier), then its first epoch and two warm ones.
The local files are read once before any timing, so both sides read from memory (the page cache, the worker's
memory tier). Ends with BAR cache_warm_vs_local (mean warm ÷ mean local, bar ≥ 0.90) and
BAR cache_first_epoch_after_preload_vs_warm (the preloaded tier's first epoch ÷ the mean of its warm ones, ≥ 0.90).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_loader import make_jpeg_folder, settle
from ringfeed.cache import LocalCache
from ringfeed.cache.preload import Preloader
from ringfeed.connection import ClusterAddress
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

from bench_node import dedicated_node

DATASET = "bench_cache"
BAR = 0.90
PRELOAD_BAR = 0.90


def epoch(root: Path, workers: int, seed: int) -> tuple[float, int]:
    """One epoch of the ImageNet training input pipeline over an ImageFolder: (decoded samples/s, samples)."""
    import torch
    from torchvision import datasets, transforms

    pipeline = transforms.Compose([transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
                                   transforms.ToTensor()])
    folder = datasets.ImageFolder(str(root), transform=pipeline)
    loader = torch.utils.data.DataLoader(folder, batch_size=64, shuffle=True, num_workers=workers,
                                         generator=torch.Generator().manual_seed(seed), persistent_workers=False)
    samples = 0
    started = None
    for images, _ in loader:
        if started is None:  # the workers' start-up is no part of the data path
            started, samples = time.perf_counter(), 0
        samples += len(images)
    elapsed = time.perf_counter() - started
    return samples / elapsed, len(folder)


def ring_reads(ring, keyspace: str) -> int:
    """data_by_uuid's local read count on the node (what the tier took from the ring)."""
    out = ring.nodetool(1, "tablestats", f"{keyspace}.data_by_uuid")
    return int(re.search(r"Local read count: (\d+)", out)[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes.")
    args = parser.parse_args()

    rows: list[tuple[str, str, float, int]] = []
    warm: list[float] = []
    local: list[float] = []
    preloaded_warm: list[float] = []
    with dedicated_node("bench-cache", jmx_base=7580, address_prefix="127.0.34.") as ring, \
            tempfile.TemporaryDirectory() as tmp:
        host = ring.hosts[0]
        source = Path(tmp) / "imagefolder"
        # ImageNet-like: 500×375, ~90 kB
        size = make_jpeg_folder(source, args.images, width=500, height=375, noise=18, quality=90, seed=11)
        print(f"{args.images:,} JPEGs of {size / args.images / 1e3:.0f} kB on average, 10 classes", flush=True)
        with Store(ClusterAddress((host,))) as store:
            store.create_dataset(DatasetSchema(DATASET, (Column("path", "text"),), Encoding("jpeg"),
                                               metadata=(Column("class", "text"),)))
            ingest(store, DATASET, str(source), IngestOptions(concurrency=64))
            create_split(store, DATASET, "all", SplitSpec(ratios=(1,), names=("train",)))
        settle(ring, DATASET)
        epoch(source, args.workers, seed=0)  # untimed: the page cache holds the local files from here on

        def show(tier: str, what: str, rate: float, reads: int) -> None:
            rows.append((tier, what, rate, reads))
            print(f"{tier:>9} {what:>14} {rate:>10,.0f} {reads:>11,}", flush=True)

        print(f"\n{'tier':>9} {'epoch':>14} {'samples/s':>10} {'ring reads':>11}")
        for name in ("preset", "defaults", "preloaded"):
            tier = LocalCache(Path(tmp) / f"state-{name}")
            mount = Path(tmp) / f"mount-{name}"
            try:
                tier.up([host], 9042, mount, memory_bytes=1 << 30, host="127.0.40.2", tuned=name != "defaults")
                part = mount / DATASET / "all" / "train"
                if name == "preloaded":
                    reads = ring_reads(ring, DATASET)
                    figures = Preloader(mount).run_pass()
                    if figures.files != args.images or figures.failed:
                        raise SystemExit(f"the preload read {figures.describe()}, not {args.images} files")
                    show(name, "preload", figures.files / figures.seconds, ring_reads(ring, DATASET) - reads)
                    print(f"{'':>9} preload: {figures.describe()}", flush=True)
                epochs = {"preset": ("cold", "warm", "local", "local", "warm"), "defaults": ("cold", "warm"),
                          "preloaded": ("after preload", "warm", "warm")}[name]
                for what in epochs:
                    reads = ring_reads(ring, DATASET)
                    rate, samples = epoch(source if what == "local" else part, args.workers, seed=len(rows))
                    if samples != args.images:
                        raise SystemExit(f"{what} epoch saw {samples} images, not {args.images}")
                    show(name, what, rate, ring_reads(ring, DATASET) - reads if what != "local" else 0)
                    if name == "preset" and what != "cold":
                        (warm if what == "warm" else local).append(rate)
                    if name == "preloaded" and what == "warm":
                        preloaded_warm.append(rate)
            finally:
                tier.down()

    ratio = statistics.mean(warm) / statistics.mean(local)
    by = {(tier, what): rate for tier, what, rate, _ in rows}
    after_preload = by["preloaded", "after preload"] / statistics.mean(preloaded_warm)
    print(f"\nwarm ÷ local {ratio:.2f} · cold ÷ local {by['preset', 'cold'] / statistics.mean(local):.2f} · "
          f"preset ÷ defaults: cold {by['preset', 'cold'] / by['defaults', 'cold']:.2f}, "
          f"warm {statistics.mean(warm) / by['defaults', 'warm']:.2f} · first epoch after a preload ÷ warm "
          f"{after_preload:.2f} (a cold first epoch ÷ warm: {by['preset', 'cold'] / statistics.mean(warm):.2f})\n")
    passed = ratio >= BAR
    print(f"BAR cache_warm_vs_local {ratio:.2f} {BAR} {'PASS' if passed else 'FAIL'}")
    preload_passed = after_preload >= PRELOAD_BAR
    print(f"BAR cache_first_epoch_after_preload_vs_warm {after_preload:.2f} {PRELOAD_BAR} "
          f"{'PASS' if preload_passed else 'FAIL'}")
    return 0 if passed and preload_passed else 1


if __name__ == "__main__":
    sys.exit(main())
