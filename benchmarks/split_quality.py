"""Split quality by group-size distribution: the engine as it is against the engine of an earlier commit (before
the local search), same metadata, same parameters. Pure computation, no Cassandra node; the figures of
docs/splits.md come from ``.venv/bin/python benchmarks/split_quality.py``.

Data: 3 classes at 60 / 30 / 10 %; every group leans to one class (70 % of its rows, drawn at the same
frequencies), the rest of its rows follow the overall frequencies. Split 7:2:1 grouped by group, each case over
several data seeds; the figures are the mean and the worst over the seeds.

- natural balance: "mix" is the largest gap, over parts and classes, between a class's share of a part and its
  share of the data, in percentage points; "size" the largest |samples − target| / target of a part, in %.
- equal balance: "used" is the samples drawn as a % of the balanced maximum (the scarcest class × 3);
  "short" the largest shortfall of a part against its target, in %.
"after, s" is the slowest compute_split of the current engine over the seeds.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ringfeed.splits import SplitSpec
from ringfeed.table import ColumnarTable

REPO = Path(__file__).resolve().parents[1]
CLASS_FREQUENCIES = np.array([0.6, 0.3, 0.1])
LEAN = 0.7
RATIOS = (7, 2, 1)


def group_sizes(distribution: str, rng: np.random.Generator) -> np.ndarray:
    """Rows per group."""
    if distribution == "many small groups":
        return np.maximum(1, rng.lognormal(2.0, 0.8, 2000).round()).astype(np.int64)
    if distribution == "few large groups":
        return np.maximum(1, rng.lognormal(4.0, 1.2, 30).round()).astype(np.int64)
    if distribution == "one dominant group":
        rest = np.maximum(1, rng.lognormal(3.0, 0.5, 39).round()).astype(np.int64)
        return np.append(rest.sum(), rest)  # half of the rows in one group
    if distribution == "Zipf-like":
        return np.maximum(1, (3000 / np.arange(1, 301)).round()).astype(np.int64)
    raise ValueError(distribution)


DISTRIBUTIONS = ("many small groups", "few large groups", "one dominant group", "Zipf-like")


def make_table(distribution: str, seed: int) -> ColumnarTable:
    rng = np.random.default_rng(seed)
    sizes = group_sizes(distribution, rng)
    group = np.repeat(np.arange(sizes.size), sizes)
    lean = rng.choice(CLASS_FREQUENCIES.size, sizes.size, p=CLASS_FREQUENCIES)
    label = np.where(rng.random(group.size) < LEAN, lean[group],
                     rng.choice(CLASS_FREQUENCIES.size, group.size, p=CLASS_FREQUENCIES))
    uuid = np.frombuffer(rng.bytes(16 * group.size), dtype=np.uint8).reshape(-1, 16)
    return ColumnarTable({"uuid": uuid, "label": label.astype(np.int64), "patient": group.astype(np.int64)})


def scores(stats: dict, balance: str) -> tuple[float, float]:
    parts = stats["parts"]
    if balance == "natural":
        counts = np.array([[c["samples"] for c in p["labels"].values()] for p in parts], dtype=np.float64)
        mix = np.abs(counts / counts.sum(axis=1, keepdims=True) - counts.sum(axis=0) / counts.sum()).max() * 100
        size = max(abs(p["samples"] - p["target"]) / p["target"] for p in parts) * 100
        return float(mix), float(size)
    used = sum(p["samples"] for p in parts) / sum(p["target"] for p in parts) * 100
    short = max(max(0, p["target"] - p["samples"]) / p["target"] for p in parts) * 100
    return float(used), float(short)


def engine_at(commit: str):
    """The splits engine as it was at ``commit``, loaded beside the current one."""
    source = subprocess.run(["git", "show", f"{commit}:dataplane/ringfeed/splits/engine.py"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout
    spec = importlib.util.spec_from_loader(f"engine_{commit}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, f"engine@{commit}", "exec"), module.__dict__)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="3e41307", help="Commit of the engine to compare with.")
    parser.add_argument("--seeds", type=int, default=5, help="Data seeds per case.")
    args = parser.parse_args()
    from ringfeed.splits import engine as after

    before = engine_at(args.before)
    print(f"Split {':'.join(map(str, RATIOS))} grouped, {args.seeds} data seeds per case, mean (worst); "
          f"before = engine at {args.before}, after = this tree.\n")
    print("| groups | rows / groups | balance | metric | before | after | after, s |")
    print("|---|---|---|---|---|---|---|")
    for distribution in DISTRIBUTIONS:
        tables = [make_table(distribution, seed) for seed in range(args.seeds)]
        rows = int(np.mean([len(t) for t in tables]))
        groups = int(np.mean([t["patient"].max() + 1 for t in tables]))
        for balance, metrics, worse in (("natural", ("mix (pts)", "size (%)"), (max, max)),
                                        ("equal", ("used (%)", "short (%)"), (min, max))):
            spec = SplitSpec(ratios=RATIOS, group_by=("patient",), balance=balance, seed=1)
            results = {"before": [], "after": []}
            seconds = []
            for table in tables:
                results["before"].append(scores(before.compute_split(table, spec).stats, balance))
                started = time.perf_counter()
                results["after"].append(scores(after.compute_split(table, spec).stats, balance))
                seconds.append(time.perf_counter() - started)
            for index, metric in enumerate(metrics):
                cells = []
                for side in ("before", "after"):
                    values = [r[index] for r in results[side]]
                    cells.append(f"{np.mean(values):.2f} ({worse[index](values):.2f})")
                print(f"| {distribution} | {rows:,} / {groups:,} | {balance} | {metric} | {cells[0]} | {cells[1]} "
                      f"| {max(seconds):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
