"""`make bench-ring-scale`: a loader's throughput while its Ring grows by a node and shrinks back, each step against
the steady throughput of the ring it started from, in the same run.

The scenario runs on the local cluster (e2e/tests/test_ring.py::test_bench_ring_scale, with RINGFEED_BENCH_RING_SCALE
naming its output and RINGFEED_BENCH_RING_RF the replication factor R): a Ring of R nodes provisioned through
cass-operator, the demo slide dataset ingested into it at RF R, one unthrottled native loader reading the train part
epoch after epoch as the Ring's read-only role, then `kubectl scale` to R + 1 nodes (join, bootstrap streaming,
cleanup), a steady phase, and back to R (decommission). This script reads those measurements, prints samples/s in
each phase, writes the plot (samples/s over time, the steps marked) and ends with one BAR line per bar:

  ring_scale_throughput   the lower of the two steps' ratios: mean samples/s during a step ÷ the steady mean of the
                          ring size it started from (R nodes before the scale-up, R + 1 before the scale-down)
                          (target ≥ 0.70)
  ring_scale_failed_reads reads that failed during the whole run                          (target 0)

A step's cost is what it takes from the throughput the ring had before it; the steady throughput of R + 1 nodes
against R (on shared cores it can be lower) is printed too, not part of the bar.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLOT = REPO / "docs" / "bench-ring-scale.svg"
THROUGHPUT_BAR = 0.70


def rate(timeline: list[tuple[float, int]], start: float, end: float) -> float:
    """Mean samples/s between two times."""
    samples = sum(n for at, n in timeline if start <= at < end)
    return samples / (end - start) if end > start else 0.0


def per_second(timeline: list[tuple[float, int]], origin: float) -> list[int]:
    buckets: dict[int, int] = {}
    for at, n in timeline:
        second = int(at - origin)
        buckets[second] = buckets.get(second, 0) + n
    return [buckets.get(s, 0) for s in range(max(buckets) + 1)] if buckets else []


def write_plot(series: list[int], marks: list[tuple[str, float]], steady: list[tuple[float, float, float]],
               path: Path) -> None:
    """Samples/s against seconds since the loader started, each step's start and end marked (a small SVG)."""
    width, height, left, bottom, top, right = 640, 300, 60, 40, 20, 20
    top_rate = max([*series, 1]) * 1.1
    x = lambda s: left + (width - left - right) * s / max(len(series), 1)  # noqa: E731
    y = lambda r: top + (height - top - bottom) * (1 - r / top_rate)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for fraction in (0.0, 0.25, 0.5, 0.75, 1.0):
        value = top_rate * fraction
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.0f}</text>')
    for start, end, reference in steady:  # the bar under each step: 0.70 × the steady rate before it
        bar = reference * THROUGHPUT_BAR
        parts.append(f'<line x1="{x(start):.1f}" x2="{x(end):.1f}" y1="{y(bar):.1f}" y2="{y(bar):.1f}" stroke="#c33" '
                     'stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x(end) - 4:.1f}" y="{y(bar) - 4:.1f}" text-anchor="end" fill="#c33" font-size="10">'
                     f'{THROUGHPUT_BAR:.2f} × steady</text>')
    for label, second in marks:
        parts.append(f'<line x1="{x(second):.1f}" x2="{x(second):.1f}" y1="{top}" y2="{height - bottom}" '
                     'stroke="#888" stroke-dasharray="2 2"/>')
        parts.append(f'<text x="{x(second) + 3:.1f}" y="{top + 12}" fill="#555" font-size="10">{label}</text>')
    points = " ".join(f"{x(s):.1f},{y(r):.1f}" for s, r in enumerate(series))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">seconds</text>')
    parts.append(f'<text x="14" y="{top + 110}" transform="rotate(-90 14 {top + 110})" text-anchor="middle">'
                 'samples/s</text>')
    path.write_text("\n".join(parts + ["</svg>"]) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurements", type=Path, help="the JSON the scenario wrote")
    parser.add_argument("--plot", type=Path, default=PLOT, help=f"where the SVG goes (default: {PLOT})")
    args = parser.parse_args()
    run = json.loads(args.measurements.read_text())
    timeline = [tuple(point) for point in run["timeline"]]
    marks = {label: at for label, at in run["marks"]}
    base = run["replication_factor"]
    top = base + 1
    origin = timeline[0][0]
    edges = [marks["warm"], marks[f"scale to {top}"], marks[f"settled at {top}"], marks[f"scale to {base}"],
             marks[f"settled at {base}"], timeline[-1][0]]
    steady_base, up, steady_top, down, after = (rate(timeline, a, b) for a, b in pairwise(edges))
    rows = [(f"steady, {base} node(s)", steady_base, None),
            (f"scale-up {base} → {top} (join, cleanup)", up, steady_base),
            (f"steady, {top} nodes", steady_top, steady_base),
            (f"scale-down {top} → {base} (decommission)", down, steady_top),
            (f"after, {base} node(s)", after, steady_base)]
    print(f"replication factor {base}")
    print(f"{'phase':<36}{'seconds':>9}{'samples/s':>11}{'÷ the steady phase before':>27}")
    for (phase, samples_per_s, reference), (start, end) in zip(rows, pairwise(edges), strict=True):
        ratio = f"{samples_per_s / reference:.2f}" if reference else "-"
        print(f"{phase:<36}{end - start:>9.0f}{samples_per_s:>11.0f}{ratio:>27}")
    failures = run["failures"]
    print(f"epochs {run['epochs']}, samples {run['samples']}, failed reads {len(failures)}")
    for failure in failures[:5]:
        print(f"  {failure}")
    write_plot(per_second(timeline, origin), [(label, at - origin) for label, at in run["marks"] if label != "warm"],
               [(edges[1] - origin, edges[2] - origin, steady_base), (edges[3] - origin, edges[4] - origin,
                                                                       steady_top)], args.plot)
    print(f"plot: {args.plot}")
    ratio = min(up / steady_base, down / steady_top)
    print(f"BAR ring_scale_throughput {ratio:.2f} {THROUGHPUT_BAR:.2f} {'PASS' if ratio >= THROUGHPUT_BAR else 'FAIL'}")
    print(f"BAR ring_scale_failed_reads {len(failures)} 0 {'PASS' if not failures else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
