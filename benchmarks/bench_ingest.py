"""make bench-ingest: Ringfeed's ingest path against a minimal Rust `scylla` writer, same node, same rows.

Both sides write the same two rows per sample (data_by_uuid + metadata_by_nat) with the same concurrency and
consistency ONE into identical tables of a dedicated local node. Ringfeed reads its samples from files
(a manifest of raw tensors) as a user's ingest would; the reference writes pre-generated buffers from memory.
Each side runs twice per size, alternating, and keeps its best run. Ends with one BAR line per bar.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ringfeed.connection import ClusterAddress
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.store import Store

from bench_node import dedicated_node

RATIO_TARGET = 0.8


def make_source(folder: Path, rows: int, size: int, labels: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    buffers = [os.urandom(size) for _ in range(64)]
    lines = ["path,sample,label"]
    for i in range(rows):
        (folder / f"{i}.bin").write_bytes(buffers[i % 64][:8] + os.urandom(8) + buffers[i % 64][16:])
        lines.append(f"{i}.bin,{i},{i % labels}")
    manifest = folder / "manifest.csv"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def schema_for(name: str, size: int) -> DatasetSchema:
    return DatasetSchema(name, (Column("sample", "bigint"),), Encoding("raw", "uint8", (size,)),
                         with_metadata_by_uuid=False)


def run_ringfeed(store: Store, manifest: Path, size: int, concurrency: int) -> dict:
    schema = schema_for(f"bench_ringfeed_{size}", size)
    store.create_dataset(schema)
    try:
        summary = ingest(store, schema.name, str(manifest), IngestOptions(concurrency=concurrency))
    finally:
        store.drop_dataset(schema.name)
    return {"rows": summary.written, "seconds": summary.seconds}


def run_reference(store: Store, refwriter: str, host: str, rows: int, size: int, labels: int,
                  concurrency: int) -> dict:
    schema = schema_for(f"bench_reference_{size}", size)
    store.create_dataset(schema)
    try:
        out = subprocess.run([refwriter, "--hosts", host, "--keyspace", schema.keyspace, "--rows", str(rows),
                              "--bytes", str(size), "--concurrency", str(concurrency), "--labels", str(labels)],
                             capture_output=True, text=True, check=True).stdout
    finally:
        store.drop_dataset(schema.name)
    result = json.loads(out.strip().splitlines()[-1])
    return {"rows": result["rows"], "seconds": result["seconds"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--refwriter", required=True, help="Path of the reference writer binary.")
    parser.add_argument("--rows-20k", type=int, default=20_000)
    parser.add_argument("--rows-150k", type=int, default=4_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    bars = []
    with dedicated_node("bench-ingest", jmx_base=7500) as ring:
        with Store(ClusterAddress(tuple(ring.hosts))) as store, tempfile.TemporaryDirectory() as tmp:
            print(f"{'size':>7} {'writer':>10} {'rows':>7} {'seconds':>8} {'rows/s':>9} {'MB/s':>7}")
            for size, rows in ((20_000, args.rows_20k), (150_000, args.rows_150k)):
                manifest = make_source(Path(tmp) / str(size), rows, size, labels=10)
                best = {"reference": None, "ringfeed": None}
                for _ in range(args.rounds):
                    for side in ("reference", "ringfeed"):
                        if side == "reference":
                            result = run_reference(store, args.refwriter, ring.hosts[0], rows, size, 10,
                                                   args.concurrency)
                        else:
                            result = run_ringfeed(store, manifest, size, args.concurrency)
                        rate = result["rows"] / result["seconds"]
                        print(f"{size // 1000:>5}kB {side:>10} {result['rows']:>7} {result['seconds']:>8.2f} "
                              f"{rate:>9.0f} {rate * size / 1e6:>7.1f}", flush=True)
                        best[side] = max(best[side] or 0, rate)
                ratio = best["ringfeed"] / best["reference"]
                print(f"{size // 1000:>5}kB best: ringfeed {best['ringfeed']:.0f} rows/s "
                      f"({best['ringfeed'] * size / 1e6:.1f} MB/s), reference {best['reference']:.0f} rows/s "
                      f"({best['reference'] * size / 1e6:.1f} MB/s), ratio {ratio:.2f}")
                bars.append((f"ingest_{size // 1000}kB_vs_reference", ratio, RATIO_TARGET))
    for name, value, target in bars:
        print(f"BAR {name} {value:.2f} {target} {'PASS' if value >= target else 'FAIL'}")
    return 0 if all(value >= target for _, value, target in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
