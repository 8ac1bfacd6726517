"""make bench-split: the splits engine on ImageNet-shaped metadata, against the paper's algorithm, same data, same run.

Engine: synthetic metadata as the native scan returns it (uuid, label int64, sample_bytes int64, patient as a
dictionary-encoded text column): 1,000 labels, ~12.8 rows per patient on average (log-normal group sizes), each
patient with a dominant label (80 % of its rows), so label ratios differ from patient to patient. Every case runs
in a fresh process and reports its data-generation time, engine time (``compute_split``) and peak RSS
(``ru_maxrss`` of that process; the high-water mark is reset once the data are generated, so the peak is that of a
process holding the metadata and computing the split; the peak including data generation is printed too).

Reference, in the same run and on the same 1.28M rows: the algorithm of Versaci & Busonera (2021, §4.1), targets
per split, groups dealt round-robin to the splits while they do not overflow their split's target, the remaining
groups assigned at random. Both are scored the same way: size error per split (% of its target) and mean
|per-class error| (% of the per-class target), and the ratio reference / Ringfeed.

Scan (separately, on a dedicated node at 127.0.30.1): ``Store.scan`` of the split's columns against a plain Python
cassandra-driver token-range scan of the same columns, best of two alternating rounds each; then
``create_split`` end to end (scan + engine + store) and ``load_split``. Ends with one BAR line per bar.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench_node import dedicated_node

REPO = Path(__file__).resolve().parents[1]
LABELS = 1000
ROWS_PER_GROUP = 12.8
DOMINANT_SHARE = 0.8
MEAN_SAMPLE_BYTES = 110_000
RATIOS = (8, 1, 1)
SEED = 1
DATA_SEED = 2021
BAR_1M_S, BAR_1M_RSS_MB, BAR_10M_S = 10, 1024, 90


# -- synthetic metadata -----------------------------------------------------------------------------------------------

def synthetic_columns(rows: int, seed: int = DATA_SEED) -> dict:
    """Columns shaped like ImageNet's metadata with patients: uuid (rows, 16) uint8, label int64, sample_bytes int64,
    group int64 (0..groups-1, every group non-empty), group_names (str per group, in a random order, as the
    scan's dictionary comes in token order)."""
    rng = np.random.default_rng(seed)
    drawn = max(1, round(rows / ROWS_PER_GROUP))
    weights = rng.lognormal(-0.5, 1.0, drawn)  # mean 1: most patients 3-40 rows, a few hundred at most
    raw_group = rng.choice(drawn, size=rows, p=weights / weights.sum())
    present, group = np.unique(raw_group, return_inverse=True)
    del raw_group
    dominant = rng.integers(0, LABELS, drawn)[present]
    label = np.where(rng.random(rows) < DOMINANT_SHARE, dominant[group], rng.integers(0, LABELS, rows))
    sigma = 0.5
    sample_bytes = rng.lognormal(math.log(MEAN_SAMPLE_BYTES) - sigma**2 / 2, sigma, rows).astype(np.int64)
    uuid = np.frombuffer(rng.bytes(16 * rows), dtype=np.uint8).reshape(rows, 16)
    names = [f"P{i:07d}" for i in rng.permutation(present.size)]
    return {"uuid": uuid, "label": label.astype(np.int64), "sample_bytes": sample_bytes,
            "group": group.astype(np.int64), "group_names": names}


def synthetic_table(rows: int):
    from ringfeed.table import ColumnarTable, TextColumn

    c = synthetic_columns(rows)
    return ColumnarTable({"uuid": c["uuid"], "label": c["label"], "sample_bytes": c["sample_bytes"],
                          "patient": TextColumn(c["group"].astype(np.int32), tuple(c["group_names"]))})


# -- the paper's algorithm (reference) ------------------------------------------------------------------------------

def paper_split(group: np.ndarray, ratios: tuple[int, ...], seed: int) -> np.ndarray:
    """Versaci & Busonera (2021, §4.1), natural class balance: a target size per split; groups, in random order,
    dealt round-robin to the splits while they fit (a group that would overflow a split closes it and is offered to
    the next open one); groups left when every split is closed go to a random split (weighted by the ratios).
    Returns the split index of every row."""
    rng = np.random.default_rng(seed)
    sizes = np.bincount(group)
    exact = np.asarray(ratios, dtype=np.float64) / sum(ratios) * group.size
    targets = np.floor(exact).astype(np.int64)
    targets[np.argsort(targets - exact, kind="stable")[: group.size - int(targets.sum())]] += 1
    order = rng.permutation(np.flatnonzero(sizes))
    assignment = np.full(sizes.size, -1, dtype=np.int64)
    filled, goal = [0] * len(ratios), targets.tolist()
    open_parts, position, chosen, left = list(range(len(ratios))), 0, assignment.tolist(), []
    for g, size in zip(order.tolist(), sizes[order].tolist(), strict=True):
        while open_parts:
            part = open_parts[position]
            if filled[part] + size <= goal[part]:
                filled[part] += size
                chosen[g] = part
                position = (position + 1) % len(open_parts)
                break
            open_parts.pop(position)
            position = position if position < len(open_parts) else 0
        else:
            left.append(g)
    assignment[:] = chosen
    if left:
        weights = np.asarray(ratios, dtype=np.float64)
        assignment[left] = rng.choice(len(ratios), size=len(left), p=weights / weights.sum())
    return assignment[group]


# -- scoring (same for both) ----------------------------------------------------------------------------------------

def quality(part: np.ndarray, label: np.ndarray, ratios: tuple[int, ...]) -> dict:
    """Size error per split (% of n·r/R) and mean |per-class error| per split (% of n_c·r/R)."""
    _, cls, class_counts = np.unique(label, return_inverse=True, return_counts=True)
    k, classes = len(ratios), class_counts.size
    counts = np.bincount(part * classes + cls, minlength=k * classes).reshape(k, classes)
    share = np.asarray(ratios, dtype=np.float64) / sum(ratios)
    total_target = share * part.size
    class_target = np.outer(share, class_counts)
    return {
        "sizes": counts.sum(axis=1).tolist(),
        "targets": total_target.tolist(),
        "size_error_pct": ((counts.sum(axis=1) - total_target) / total_target * 100).tolist(),
        "class_error_pct": (np.abs(counts - class_target) / class_target * 100).mean(axis=1).tolist(),
    }


def part_of_rows(uuids: np.ndarray, parts: dict[str, np.ndarray]) -> np.ndarray:
    """Index of the part holding each row (-1: none), matched by UUID."""
    words = np.ascontiguousarray(uuids).view(">u8")
    order = np.lexsort((words[:, 1], words[:, 0]))
    hi, lo = words[order, 0], words[order, 1]
    result = np.full(len(uuids), -1, dtype=np.int64)
    for index, members in enumerate(parts.values()):
        member_words = np.ascontiguousarray(members).view(">u8")
        at = np.minimum(np.searchsorted(hi, member_words[:, 0]), hi.size - 1)
        if not ((hi[at] == member_words[:, 0]) & (lo[at] == member_words[:, 1])).all():
            raise RuntimeError(f"part {index}: UUIDs not found in the table")
        result[order[at]] = index
    return result


# -- child processes ------------------------------------------------------------------------------------------------

def _rss_mb() -> dict:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {"now": int(status["VmRSS"].split()[0]) / 1024, "hwm": int(status["VmHWM"].split()[0]) / 1024,
            "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets the RSS high-water mark (Linux ≥ 4.0)
        return True
    except OSError:
        return False


def child(case: dict) -> dict:
    started = time.perf_counter()
    if case["kind"] == "engine":
        from ringfeed.splits import SplitSpec, compute_split

        table = synthetic_table(case["rows"])
    else:
        columns = synthetic_columns(case["rows"])
    data_s = time.perf_counter() - started
    gc.collect()
    before = _rss_mb()
    reset = _reset_peak()
    holding = _rss_mb()["now"]
    started = time.perf_counter()
    if case["kind"] == "engine":
        spec = SplitSpec(ratios=RATIOS, group_by=("patient",), balance=case["balance"], seed=SEED)
        result = compute_split(table, spec)
    else:
        part = paper_split(columns["group"], RATIOS, SEED)
    seconds = time.perf_counter() - started
    after = _rss_mb()
    out = {"rows": case["rows"], "data_s": data_s, "seconds": seconds, "peak_mb": after["maxrss"],
           "peak_hwm_mb": after["hwm"], "peak_with_data_mb": max(before["hwm"], after["hwm"]),
           "holding_mb": holding, "reset": reset}
    if case["kind"] == "engine":
        out["groups"] = len(table["patient"].values)
        out["sizes"] = [len(u) for u in result.parts.values()]
        if case.get("quality"):
            part = part_of_rows(table["uuid"], result.parts)
            if (part < 0).any():
                raise RuntimeError("a row is in no part of a natural-balance split")
            out["quality"] = quality(part, np.asarray(table["label"]), RATIOS)
    else:
        out["groups"] = len(columns["group_names"])
        out["sizes"] = np.bincount(part, minlength=len(RATIOS)).tolist()
        out["quality"] = quality(part, columns["label"], RATIOS)
    return out


def run_child(case: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(case)], stdout=subprocess.PIPE,
                          text=True, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"case {case} failed (exit {proc.returncode}); see the error above")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- scan, create_split, load_split on a dedicated node ---------------------------------------------------------------

def driver_scan(store, keyspace: str, partition_key: list[str], columns: list[str], slices: int = 64,
                workers: int = 8) -> list[tuple]:
    """The reference: the Python cassandra-driver, token ranges read by a thread pool, tuple rows."""
    from concurrent.futures import ThreadPoolExecutor

    token = f"token({', '.join(partition_key)})"
    statement = store.session.prepare(f"SELECT {', '.join(columns)} FROM {keyspace}.metadata_by_nat "
                                      f"WHERE {token} >= ? AND {token} <= ?")
    low, span = -(2**63), 2**64
    starts = [low + span * i // slices for i in range(slices)]
    ranges = [(start, end - 1) for start, end in zip(starts, [*starts[1:], low + span], strict=True)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pieces = list(pool.map(lambda bounds: list(store.session.execute(statement, bounds)), ranges))
    return [row for piece in pieces for row in piece]


def scan_benchmark(rows: int, rounds: int) -> dict:
    from ringfeed.connection import ClusterAddress
    from ringfeed.schema import Column, DatasetSchema, Encoding
    from ringfeed.splits import SplitSpec, compute_split, create_split, load_split
    from ringfeed.store import Store

    out: dict = {"rows": rows}
    print()
    with dedicated_node("bench-split", jmx_base=7510) as ring:
        with Store(ClusterAddress(tuple(ring.hosts))) as store:
            schema = DatasetSchema("bench_split", (Column("patient", "text"), Column("slide", "int"),
                                                   Column("x", "int")), Encoding("jpeg"),
                                   label_names=tuple(f"class{i:04d}" for i in range(LABELS)),
                                   with_metadata_by_uuid=False)
            store.create_dataset(schema)
            data = synthetic_columns(rows)
            rng = np.random.default_rng(DATA_SEED + 1)
            names = np.array(data["group_names"], dtype=object)[data["group"]].tolist()
            blob = data["uuid"].tobytes()
            values = list(zip(names, rng.integers(0, 4, rows).tolist(), rng.integers(0, 2**31 - 1, rows).tolist(),
                              data["label"].tolist(), [blob[16 * i: 16 * i + 16] for i in range(rows)],
                              data["sample_bytes"].tolist(), strict=True))
            del names, blob
            insert = store.native.prepare(schema.insert_statements()["metadata_by_nat"])
            writer = store.native.writer(concurrency=64)
            started = time.perf_counter()
            for start in range(0, rows, 10_000):
                writer.submit(insert, values[start: start + 10_000])
            written = writer.flush()
            out["write_s"] = time.perf_counter() - started
            del values
            if written != rows:
                raise RuntimeError(f"wrote {written:,} of {rows:,} rows")
            ring.nodetool(1, "flush", schema.keyspace)  # scan SSTables, as for a dataset ingested earlier
            print(f"wrote {rows:,} metadata rows in {out['write_s']:.1f} s ({rows / out['write_s']:,.0f} rows/s), "
                  "flushed to SSTables", flush=True)

            columns = ["uuid", "label", "sample_bytes", "patient"]
            expected_bytes = int(data["sample_bytes"].sum())
            best = {"reference": math.inf, "ringfeed": math.inf}
            print(f"{'scan':>10} {'round':>5} {'rows':>9} {'seconds':>8} {'rows/s':>9}")
            for round_ in range(1, rounds + 1):
                for side in ("reference", "ringfeed"):
                    gc.collect()
                    started = time.perf_counter()
                    if side == "reference":
                        result = driver_scan(store, schema.keyspace, schema.partition_key("metadata_by_nat"),
                                             columns)
                        seconds = time.perf_counter() - started
                        count, total_bytes = len(result), sum(row[2] for row in result)
                    else:
                        result = store.scan(schema.name, "metadata_by_nat", columns)
                        seconds = time.perf_counter() - started
                        count, total_bytes = len(result), int(np.asarray(result["sample_bytes"]).sum())
                    del result
                    if (count, total_bytes) != (rows, expected_bytes):
                        raise RuntimeError(f"{side} scan read {count:,} rows / {total_bytes:,} bytes, expected "
                                           f"{rows:,} / {expected_bytes:,}")
                    best[side] = min(best[side], seconds)
                    print(f"{side:>10} {round_:>5} {count:>9,} {seconds:>8.2f} {count / seconds:>9,.0f}", flush=True)
            out["scan_reference_s"], out["scan_ringfeed_s"] = best["reference"], best["ringfeed"]

            spec = SplitSpec(ratios=RATIOS, group_by=("patient",), seed=SEED)
            table = store.scan(schema.name, "metadata_by_nat", columns)
            started = time.perf_counter()
            compute_split(table, spec, schema.label_names)
            out["engine_s"] = time.perf_counter() - started
            del table
            started = time.perf_counter()
            split, created = create_split(store, schema.name, "bench", spec)
            out["create_s"] = time.perf_counter() - started
            if not created:
                raise RuntimeError("create_split found an existing split on a fresh node")
            started = time.perf_counter()
            loaded = load_split(store, schema.name, "bench")
            out["load_s"] = time.perf_counter() - started
            if loaded.content_hash != split.content_hash or sum(len(u) for u in loaded.parts.values()) != rows:
                raise RuntimeError("the loaded split differs from the one created")
            out["sizes"] = [len(u) for u in loaded.parts.values()]
    return out


# -- report -----------------------------------------------------------------------------------------------------------

def _millions(rows: int) -> str:
    return f"{rows / 1e6:.3g}M" if rows >= 1_000_000 else f"{rows / 1e3:.3g}k"


def _ratio(reference: float, ringfeed: float) -> str:
    return f"{reference / ringfeed:.2g}" if ringfeed > 0 else "inf"


def print_quality_by_scale(sizes: tuple[int, ...] = (5_000, 20_000, 100_000, 300_000)) -> None:
    """Fewer rows, same 1,000 labels: classes get too sparse to stratify, and the engine switches to size-first
    placement to hold the ratios (the paper's method is size-first by construction)."""
    from ringfeed.splits import SplitSpec, compute_split

    print("\nSmaller datasets, same shape (max |size error| %, mean class error %):")
    print(f"{'rows':>9} {'Ringfeed placement':>19} {'size':>6} {'class':>6}   {'paper size':>10} {'class':>6}")
    for rows in sizes:
        table = synthetic_table(rows)
        result = compute_split(table, SplitSpec(ratios=RATIOS, group_by=("patient",), seed=SEED))
        ours = quality(part_of_rows(table["uuid"], result.parts), table["label"], RATIOS)
        paper = quality(paper_split(table["patient"].codes.astype(np.int64), RATIOS, SEED), table["label"], RATIOS)
        print(f"{rows:>9,} {result.stats['placement']:>19} {max(map(abs, ours['size_error_pct'])):>6.2f} "
              f"{np.mean(ours['class_error_pct']):>6.1f}   {max(map(abs, paper['size_error_pct'])):>10.2f} "
              f"{np.mean(paper['class_error_pct']):>6.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_280_000, help="Rows of the ImageNet-sized case.")
    parser.add_argument("--rows-large", type=int, default=10_000_000, help="Rows of the large case.")
    parser.add_argument("--scan-rows", type=int, default=300_000, help="Metadata rows written for the scan.")
    parser.add_argument("--rounds", type=int, default=2, help="Scan rounds per side (best kept).")
    parser.add_argument("--skip-scan", action="store_true", help="Engine only: no Cassandra node.")
    parser.add_argument("--skip-10m", action="store_true", help="Leave out the large case.")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    small, large = _millions(args.rows), _millions(args.rows_large)
    print(f"Synthetic ImageNet-shaped metadata: {LABELS} labels, ~{ROWS_PER_GROUP} rows per patient "
          f"(log-normal), {DOMINANT_SHARE:.0%} of a patient's rows in its dominant label, ~{MEAN_SAMPLE_BYTES // 1000}"
          f" kB per sample. Split {':'.join(map(str, RATIOS))} grouped by patient, seed {SEED}.")
    print("Each case runs in a fresh process; peak RSS = ru_maxrss of that process, reset after data generation.\n")
    cases = [(f"{small} natural", {"kind": "engine", "rows": args.rows, "balance": "natural", "quality": True}),
             (f"{small} equal", {"kind": "engine", "rows": args.rows, "balance": "equal"}),
             (f"{small} paper §4.1", {"kind": "reference", "rows": args.rows})]
    if not args.skip_10m:
        cases.append((f"{large} natural", {"kind": "engine", "rows": args.rows_large, "balance": "natural"}))
    print(f"{'case':<18} {'rows':>11} {'groups':>8} {'data s':>7} {'split s':>8} {'peak MB':>8} "
          f"{'(with data)':>11}  parts")
    results = {}
    for name, case in cases:
        r = results[name] = run_child(case)
        print(f"{name:<18} {r['rows']:>11,} {r['groups']:>8,} {r['data_s']:>7.2f} {r['seconds']:>8.2f} "
              f"{r['peak_mb']:>8.0f} {r['peak_with_data_mb']:>11.0f}  {' / '.join(f'{s:,}' for s in r['sizes'])}",
              flush=True)
        if not r["reset"]:
            print("  (could not reset the RSS high-water mark: the peak includes data generation)")
        elif abs(r["peak_mb"] - r["peak_hwm_mb"]) > 0.05 * r["peak_hwm_mb"]:
            print(f"  (ru_maxrss {r['peak_mb']:.0f} MB differs from VmHWM {r['peak_hwm_mb']:.0f} MB)")

    ours, paper = results[f"{small} natural"], results[f"{small} paper §4.1"]
    q_ours, q_paper = ours["quality"], paper["quality"]
    names = ("train", "val", "test")
    print(f"\nQuality on the same {small} rows, natural balance (error = (size - target) / target; class error = "
          "mean over the 1,000 labels of |size - target| / target):")
    print(f"{'part':<6} {'target':>11} {'Ringfeed':>11} {'size err%':>9} {'class err%':>10}   "
          f"{'paper':>11} {'size err%':>9} {'class err%':>10}")
    def cells(q: dict, i: int) -> str:
        return f"{q['sizes'][i]:>11,} {q['size_error_pct'][i]:>+9.3f} {q['class_error_pct'][i]:>10.2f}"

    for i, part in enumerate(names):
        print(f"{part:<6} {q_ours['targets'][i]:>11,.0f} {cells(q_ours, i)}   {cells(q_paper, i)}")
    size_ours = float(np.mean(np.abs(q_ours["size_error_pct"])))
    size_paper = float(np.mean(np.abs(q_paper["size_error_pct"])))
    class_ours, class_paper = float(np.mean(q_ours["class_error_pct"])), float(np.mean(q_paper["class_error_pct"]))
    print(f"mean |size error|:  Ringfeed {size_ours:.3f} %, paper {size_paper:.3f} %, "
          f"ratio paper/Ringfeed {_ratio(size_paper, size_ours)}")
    print(f"mean class error:   Ringfeed {class_ours:.2f} %, paper {class_paper:.2f} %, "
          f"ratio paper/Ringfeed {_ratio(class_paper, class_ours)}")
    print(f"time:               Ringfeed {ours['seconds']:.2f} s, paper {paper['seconds']:.2f} s "
          f"(Ringfeed also sorts the UUID lists and computes the statistics), "
          f"ratio Ringfeed/paper {ours['seconds'] / paper['seconds']:.1f}")
    print_quality_by_scale()

    if not args.skip_scan:
        s = scan_benchmark(args.scan_rows, args.rounds)
        rate_ours, rate_ref = s["rows"] / s["scan_ringfeed_s"], s["rows"] / s["scan_reference_s"]
        print(f"scan of {s['rows']:,} rows (uuid, label, sample_bytes, patient), best of {args.rounds}: "
              f"Ringfeed {s['scan_ringfeed_s']:.2f} s ({rate_ours:,.0f} rows/s), Python driver "
              f"{s['scan_reference_s']:.2f} s ({rate_ref:,.0f} rows/s), ratio {rate_ours / rate_ref:.1f}")
        print(f"create_split end to end (scan + engine + store): {s['create_s']:.2f} s "
              f"(engine alone {s['engine_s']:.2f} s); parts {' / '.join(f'{n:,}' for n in s['sizes'])}")
        print(f"load_split (verify the hash): {s['load_s'] * 1000:.0f} ms")

    bars = [(f"split_engine_{small}_s", max(results[f"{small} natural"]["seconds"],
                                            results[f"{small} equal"]["seconds"]), BAR_1M_S, ".2f"),
            (f"split_engine_{small}_rss_MB", max(results[f"{small} natural"]["peak_mb"],
                                                 results[f"{small} equal"]["peak_mb"]), BAR_1M_RSS_MB, ".0f")]
    if not args.skip_10m:
        bars.append((f"split_engine_{large}_s", results[f"{large} natural"]["seconds"], BAR_10M_S, ".2f"))
    else:
        print("(large case skipped: no split_engine_10M_s bar)")
    print()
    for name, value, target, fmt in bars:
        print(f"BAR {name} {value:{fmt}} {target} {'PASS' if value <= target else 'FAIL'}")
    return 0 if all(value <= target for _, value, target, _ in bars) else 1


if __name__ == "__main__":
    sys.exit(main())
