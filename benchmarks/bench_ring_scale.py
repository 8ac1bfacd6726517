"""`make bench-ring-scale`: a loader's throughput while its Ring grows by a node and shrinks back, each step against
the steady throughput of the ring on either side of it, in the same run.

The scenario runs on the local cluster (e2e/tests/test_ring.py::test_bench_ring_scale, with RINGFEED_BENCH_RING_SCALE
naming its output and RINGFEED_BENCH_RING_RF the replication factor R): a Ring of R nodes provisioned through
cass-operator, the demo slide dataset ingested into it at RF R, one unthrottled native loader reading the train part
epoch after epoch as the Ring's read-only role, then `kubectl scale` to R + 1 nodes (join, bootstrap streaming,
cleanup), a steady phase, and back to R (decommission). This script reads those measurements, prints samples/s in
each phase, writes the plot (samples/s over time, the steps marked) and ends with one BAR line per bar:

  ring_scale_throughput   the lower of the two steps' ratios: mean samples/s during a step ÷ the lower of the steady
                          means on either side of it (the phases just before and just after) (target ≥ 0.70)
  ring_scale_failed_reads reads that failed during the whole run                          (target 0)

A step moves the ring between two sizes whose steady throughputs differ (on shared cores a larger ring can be slower:
its nodes share the CPU with each other and the loader). What the step itself costs is how far it takes the
throughput below both of the steady regimes it connects; the ratio to the phase before the step is printed too.
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
    for start, end, reference in steady:  # the bar under each step: 0.70 × the lower steady rate beside it
        bar = reference * THROUGHPUT_BAR
        parts.append(f'<line x1="{x(start):.1f}" x2="{x(end):.1f}" y1="{y(bar):.1f}" y2="{y(bar):.1f}" stroke="#c33" '
                     'stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{x(end) - 4:.1f}" y="{y(bar) - 4:.1f}" text-anchor="end" fill="#c33" font-size="10">'
                     f'{THROUGHPUT_BAR:.2f} × lower steady</text>')
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
    # the lower of the steady regimes each step connects
    up_floor, down_floor = min(steady_base, steady_top), min(steady_top, after)
    rows = [(f"steady, {base} node(s)", steady_base, None, None),
            (f"scale-up {base} → {top} (join, cleanup)", up, steady_base, up_floor),
            (f"steady, {top} nodes", steady_top, steady_base, None),
            (f"scale-down {top} → {base} (decommission)", down, steady_top, down_floor),
            (f"after, {base} node(s)", after, steady_base, None)]
    print(f"replication factor {base}")
    print(f"{'phase':<36}{'seconds':>9}{'samples/s':>11}{'÷ phase before':>16}{'÷ lower steady side':>21}")
    for (phase, samples_per_s, before, lower), (start, end) in zip(rows, pairwise(edges), strict=True):
        ratios = [f"{samples_per_s / reference:.2f}" if reference else "-" for reference in (before, lower)]
        print(f"{phase:<36}{end - start:>9.0f}{samples_per_s:>11.0f}{ratios[0]:>16}{ratios[1]:>21}")
    failures = run["failures"]
    print(f"epochs {run['epochs']}, samples {run['samples']}, failed reads {len(failures)}")
    for failure in failures[:5]:
        print(f"  {failure}")
    write_plot(per_second(timeline, origin), [(label, at - origin) for label, at in run["marks"] if label != "warm"],
               [(edges[1] - origin, edges[2] - origin, up_floor), (edges[3] - origin, edges[4] - origin, down_floor)],
               args.plot)
    print(f"plot: {args.plot}")
    ratio = min(up / up_floor, down / down_floor)
    print(f"BAR ring_scale_throughput {ratio:.2f} {THROUGHPUT_BAR:.2f} {'PASS' if ratio >= THROUGHPUT_BAR else 'FAIL'}")
    print(f"BAR ring_scale_failed_reads {len(failures)} 0 {'PASS' if not failures else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
