"""make bench-loader: the loader against a minimal Rust reader, a stock Python driver loop, and files on disk.

One dedicated local node; the paper's Table 1 grid (batch sizes 32..512, samples of 20 kB and 150 kB):
  (a) reference: a minimal Rust `scylla` reader, same UUIDs in the same order, same requests in flight, copying
      each sample into a batch buffer as it arrives (the least a loader must do);
  (b) Ringfeed's Loader, stored bytes (no decoding);
  (c) a stock Python cassandra-driver loop (execute_concurrent per batch, same requests in flight).
  (e) Ringfeed's Loader over TLS (the node's certificate checked against its CA and the ring's server name, as on a
      Ring) vs the same Loader in plain text, 20 kB samples, each batch size of the grid.
And decoded 224×224 JPEG batches:
  (d) Ringfeed's Loader decoding on W native threads vs a PyTorch ImageFolder-style loader over the same images as
      files on local disk (torch DataLoader, W worker processes, default collate), with the same decoder (the loader's
      own, `ringfeed._native.decode_image`, bilinear resize after a centre crop).
Each dataset is flushed and compacted after ingest and read three times untimed (the node's caches and JIT warm
up; for (d) by both sides); then every case runs `--rounds` times (`--decoded-rounds` for (d)), alternating sides.
Rates shown are each side's best; ratios are the median over rounds of the two sides measured back to back (the
node drifts between rounds on 2 shared cores).
For (d) the CPU time per image of the loader process (with its workers) and of the Cassandra node is printed too.
Ends with one BAR line per bar.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from ringfeed.connection import ClusterAddress
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.loader import Decode, Loader, LoaderSource
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

from bench_ingest import make_source, schema_for
from bench_node import dedicated_node

BATCH_SIZES = (32, 64, 128, 256, 512)
WARM_UP_PASSES = 3  # untimed reads of each dataset first: the node's JIT and caches settle
# (d) reads by multi-row requests that the raw grid's warm-up never ran: measured, the node's CPU per image falls
# from 0.79 ms (first pass) to a level ~0.16 ms only after ~7 passes.
DECODED_WARM_UP_PASSES = 8
BARS = {"raw_vs_reference": 0.9, "raw_vs_python_driver": 3.0, "decoded_vs_imagefolder": 1.0, "tls_vs_plain": 0.9}
# TLS may cost at most 10 % of the plain loader's rate (issue 28); the bar's line is `BAR loader_tls_vs_plain`.
BAR_NAMES = {"tls_vs_plain": "loader_tls_vs_plain"}


def settle(ring, keyspace: str) -> None:
    """Flush and compact what was just ingested, so that background compactions do not share the cores with the
    measurements (on 2 cores they otherwise slow down whichever case runs first)."""
    ring.nodetool(1, "flush", keyspace)
    ring.nodetool(1, "compact", keyspace)


def make_raw_dataset(store: Store, folder: Path, rows: int, size: int) -> LoaderSource:
    """The ingest benchmark's raw samples (files + manifest, same schema), ingested, as one split part."""
    name = f"bench_raw_{size // 1000}k"
    store.create_dataset(schema_for(name, size))
    ingest(store, name, str(make_source(folder, rows, size, labels=10)), IngestOptions(concurrency=64))
    create_split(store, name, "all", SplitSpec(ratios=(1,), names=("train",)))
    return LoaderSource.from_split(name, "all", "train", store=store)


def make_jpeg_folder(root: Path, images: int, *, width: int = 320, height: int = 240, noise: float = 12,
                     quality: int = 85, seed: int = 7) -> int:
    """An ImageFolder tree of JPEGs (smooth colour fields with noise), 10 classes; returns the bytes written. The
    defaults make ~20 kB images."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    written = 0
    for i in range(images):
        folder = root / f"class{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        base = rng.integers(0, 256, 3)
        pixels = (base + 60 * np.sin(xx[..., None] / rng.uniform(8, 40) + rng.uniform(0, 6, 3))
                  + 40 * np.cos(yy[..., None] / rng.uniform(8, 40)) + rng.normal(0, noise, (height, width, 3)))
        path = folder / f"{i}.jpg"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(path, quality=quality)
        written += path.stat().st_size
    return written


def run_reference(refreader: str, host: str, source: LoaderSource, order: np.ndarray, batch: int, concurrency: int,
                  tmp: Path) -> tuple[int, float, int]:
    uuids_file = tmp / "uuids.bin"
    uuids_file.write_bytes(source.uuids[order].tobytes())
    out = subprocess.run([refreader, "--hosts", host, "--keyspace", source.keyspace, "--uuids", str(uuids_file),
                          "--batch", str(batch), "--concurrency", str(concurrency)],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["rows"], result["seconds"], int(result["mb_per_s"] * 1e6 * result["seconds"])


def run_loader(source: LoaderSource, batch: int, concurrency: int, **options) -> tuple[int, float, int]:
    # Connected before the clock starts, as the reference and the Python driver are.
    loader = Loader.from_source(source, batch_size=batch, concurrency=concurrency, seed=1, **options).open()
    started = time.perf_counter()
    rows = 0
    for _, y in loader:
        rows += len(y)
    return rows, time.perf_counter() - started, loader.stats.bytes


def run_python_driver(session, source: LoaderSource, order: np.ndarray, batch: int,
                      concurrency: int) -> tuple[int, float, int]:
    import uuid

    from cassandra.concurrent import execute_concurrent_with_args

    select = session.prepare(f"SELECT label, data FROM {source.keyspace}.data_by_uuid WHERE uuid = ?")
    ids = [uuid.UUID(bytes=u.tobytes()) for u in source.uuids[order]]
    started = time.perf_counter()
    rows = size = 0
    for start in range(0, len(ids), batch):
        results = execute_concurrent_with_args(session, select, [(u,) for u in ids[start:start + batch]],
                                               concurrency=concurrency, raise_on_first_error=True)
        for _, result in results:
            label, data = result.one()
            rows += 1
            size += len(data)
    return rows, time.perf_counter() - started, size


class ImageFolderFiles:
    """torchvision.datasets.ImageFolder's shape: (path, class) pairs; the loader's decoder on each file."""

    def __init__(self, root: Path, size: int):
        self.items = sorted((p, int(p.parent.name[5:])) for p in root.glob("class*/*.jpg"))
        self.size = size

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        import torch

        from ringfeed import _native

        path, label = self.items[index]
        pixels = _native.decode_image(path.read_bytes(), self.size, self.size)
        return torch.from_numpy(np.frombuffer(pixels, np.uint8).reshape(self.size, self.size, 3)), label


def run_imagefolder(root: Path, batch: int, workers: int) -> tuple[int, float, int]:
    import torch.utils.data

    loader = torch.utils.data.DataLoader(ImageFolderFiles(root, 224), batch_size=batch, shuffle=True,
                                         num_workers=workers)
    started = time.perf_counter()
    rows = 0
    for x, _ in loader:
        rows += len(x)
    return rows, time.perf_counter() - started, rows * 224 * 224 * 3


def best_of(rounds: int, runs: dict) -> tuple[dict, list[dict]]:
    """Runs every side `rounds` times, alternating, the order reversed every other round (A B, B A, …: no side
    always goes first); returns each side's fastest (rows, seconds, bytes) and the rates of every round (for ratios
    paired within a round, which cancel the node's drift between rounds)."""
    best, per_round = {}, []
    for round_index in range(rounds):
        rates = {}
        order = list(runs.items())
        for side, run in order[::-1] if round_index % 2 else order:
            rows, seconds, size = run()
            rates[side] = rows / seconds
            if side not in best or rows / seconds > best[side][0] / best[side][1]:
                best[side] = (rows, seconds, size)
        per_round.append(rates)
    return best, per_round


def paired_ratio(per_round: list[dict], side: str, reference: str) -> float:
    """Median over rounds of side/reference measured back to back."""
    return float(np.median([rates[side] / rates[reference] for rates in per_round]))


def cpu_seconds(pid: int | None = None) -> float:
    """CPU time (user + system) of a process: this one and its reaped children when pid is None."""
    if pid is None:
        times = os.times()
        return times.user + times.system + times.children_user + times.children_system
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refreader", required=True, help="Path of the reference reader binary.")
    parser.add_argument("--rows-20k", type=int, default=20_000)
    parser.add_argument("--rows-150k", type=int, default=6_000)
    parser.add_argument("--jpegs", type=int, default=6_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2, help="Decode threads / DataLoader worker processes.")
    parser.add_argument("--rounds", type=int, default=3, help="Rounds per cell of the raw grid.")
    parser.add_argument("--decoded-rounds", type=int, default=5,
                        help="Rounds of (d): its runs are short (~2.5 s) and its ratio the most sensitive to drift.")
    parser.add_argument("--tls-rounds", type=int, default=7,
                        help="Rounds per batch size of (e): ~1 s each, and cores shared by node and loader are noisy.")
    parser.add_argument("--tls-warm-up-seconds", type=float, default=120,
                        help="Untimed reads before (e), alternating plain and TLS.")
    parser.add_argument("--only-tls", action="store_true", help="Run (e) alone (its bar only).")
    args = parser.parse_args()

    bars = {"tls_vs_plain": BARS["tls_vs_plain"]} if args.only_tls else BARS
    ratios: dict[str, list[float]] = {name: [] for name in bars}
    with dedicated_node("bench-loader", jmx_base=7520, tls=True) as ring, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        address = ClusterAddress(tuple(ring.hosts))
        with Store(address) as store:
            ratios["tls_vs_plain"] = tls_cost(ring, store, tmp, args)
            if args.only_tls:
                return report(bars, ratios)
            print(f"\n{'size':>6} {'batch':>5} {'reader':>16} {'rows/s':>8} {'MB/s':>7} {'vs ref':>7} {'vs py':>6}")
            for size, rows in ((20_000, args.rows_20k), (150_000, args.rows_150k)):
                print(f"writing {rows:,} samples of {size // 1000} kB …", flush=True)
                source = make_raw_dataset(store, tmp / f"raw{size}", rows, size)
                settle(ring, source.keyspace)
                for _ in range(WARM_UP_PASSES):
                    run_reference(args.refreader, ring.hosts[0], source, np.arange(rows), 128, args.concurrency, tmp)
                for batch in BATCH_SIZES:
                    order = np.concatenate(Loader.from_source(source, batch_size=batch, seed=1).plan.batches(0))
                    best, per_round = best_of(args.rounds, {
                        "(a) rust reference": partial(run_reference, args.refreader, ring.hosts[0], source, order,
                                                      batch, args.concurrency, tmp),
                        "(b) ringfeed": partial(run_loader, source, batch, args.concurrency),
                        "(c) python driver": partial(run_python_driver, store.session, source, order, batch,
                                                     args.concurrency),
                    })
                    for side, (r, s, b) in best.items():
                        print(f"{size // 1000:>4}kB {batch:>5} {side:>16} {r / s:>8,.0f} {b / s / 1e6:>7.1f} "
                              f"{paired_ratio(per_round, side, '(a) rust reference'):>7.2f} "
                              f"{paired_ratio(per_round, side, '(c) python driver'):>6.2f}", flush=True)
                    ratios["raw_vs_reference"].append(paired_ratio(per_round, "(b) ringfeed", "(a) rust reference"))
                    ratios["raw_vs_python_driver"].append(paired_ratio(per_round, "(b) ringfeed", "(c) python driver"))

            print(f"\nwriting {args.jpegs:,} JPEGs (320×240) as files and into the ring …", flush=True)
            folder = tmp / "jpegs"
            make_jpeg_folder(folder, args.jpegs)
            store.create_dataset(DatasetSchema("bench_jpeg", (Column("path", "text"),), Encoding("jpeg")))
            ingest(store, "bench_jpeg", str(folder), IngestOptions(concurrency=64))
            create_split(store, "bench_jpeg", "all", SplitSpec(ratios=(1,), names=("train",)))
            jpegs = LoaderSource.from_split("bench_jpeg", "all", "train", store=store)
            settle(ring, jpegs.keyspace)
            run_decoded = lambda: run_loader(jpegs, 128, args.concurrency, decode=Decode(224, 224),  # noqa: E731
                                             decode_threads=args.workers)
            run_files = lambda: run_imagefolder(folder, 128, args.workers)  # noqa: E731
            # Untimed passes of both sides: the node's JIT for this table, torch's import and first worker fork.
            for _ in range(DECODED_WARM_UP_PASSES):
                run_decoded()
            run_files()
            mean_kb = sum(p.stat().st_size for p in folder.glob("*/*.jpg")) / args.jpegs / 1000
            print(f"mean JPEG size {mean_kb:.1f} kB; decoded to 224×224×3 with {args.workers} workers, batch 128")
            node_pid = ring.pid(1)
            cpu = {"(d) ringfeed": [0.0, 0.0, 0], "(d) imagefolder": [0.0, 0.0, 0]}  # client s, node s, images

            def measured(side, run):
                client, node = cpu_seconds(), cpu_seconds(node_pid)
                rows, seconds, size = run()
                cpu[side][0] += cpu_seconds() - client
                cpu[side][1] += cpu_seconds(node_pid) - node
                cpu[side][2] += rows
                return rows, seconds, size

            best, per_round = best_of(args.decoded_rounds, {
                "(d) ringfeed": lambda: measured("(d) ringfeed", run_decoded),
                "(d) imagefolder": lambda: measured("(d) imagefolder", run_files),
            })
            for side, (r, s, _) in best.items():
                client, node, images = cpu[side]
                print(f"{side:>16} {r / s:>8,.0f} images/s · CPU per image: loader {client / images * 1e3:.2f} ms, "
                      f"Cassandra node {node / images * 1e3:.2f} ms")
            ratio = paired_ratio(per_round, "(d) ringfeed", "(d) imagefolder")
            print(f"ringfeed / imagefolder: {ratio:.2f}")
            ratios["decoded_vs_imagefolder"].append(ratio)
    return report(bars, ratios)


def tls_cost(ring, store: Store, tmp: Path, args) -> list[float]:
    """(e): the Loader over TLS vs in plain text on the same node and data, 20 kB samples, every batch size of the
    grid; → the paired ratio (TLS ÷ plain) of each batch size."""
    source = make_raw_dataset(store, tmp / "raw20000", args.rows_20k, 20_000)
    settle(ring, source.keyspace)
    plain = ClusterAddress(tuple(ring.hosts))
    tls = dataclasses.replace(plain, tls_ca_file=ring.tls_ca_file, tls_server_name=ring.tls_server_name)
    sources = {side: dataclasses.replace(source, address=address) for side, address in (("plain", plain),
                                                                                          ("tls", tls))}
    # Both sides, untimed, until the node's JIT has compiled its TLS path: measured here, the TLS side's rate still
    # climbs (13k → 20k rows/s) for ~45 s of TLS reads while C2 compiles (12 % of the CPU), long after plain settles.
    warm_up_until = time.monotonic() + args.tls_warm_up_seconds
    while time.monotonic() < warm_up_until:
        for side in sources.values():
            run_loader(side, 128, args.concurrency)
    print(f"\n(e) 20 kB samples, TLS vs plain text, {args.tls_rounds} rounds per batch size")
    ratios = []
    for batch in BATCH_SIZES:
        best, per_round = best_of(args.tls_rounds, {
            "(e) plain": partial(run_loader, sources["plain"], batch, args.concurrency),
            "(e) tls": partial(run_loader, sources["tls"], batch, args.concurrency),
        })
        ratio = paired_ratio(per_round, "(e) tls", "(e) plain")
        ratios.append(ratio)
        print(f"  batch {batch:>3}: plain {best['(e) plain'][0] / best['(e) plain'][1]:>8,.0f} rows/s, "
              f"tls {best['(e) tls'][0] / best['(e) tls'][1]:>8,.0f} rows/s, tls/plain {ratio:.2f}", flush=True)
    store.drop_dataset(source.dataset, force=True)
    return ratios


def report(bars: dict[str, float], ratios: dict[str, list[float]]) -> int:
    print()
    failed = False
    for name, target in bars.items():
        value = min(ratios[name])
        failed |= value < target
        line = BAR_NAMES.get(name, f"loader_{name}_min")
        print(f"BAR {line} {value:.2f} {target} {'PASS' if value >= target else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
