"""`make bench-ring-scale`: a loader's throughput while its Ring grows by a node and shrinks back, against its own
steady throughput before the first step, in the same run.

The scenario runs on the local cluster (e2e/tests/test_ring.py::test_bench_ring_scale, with RINGFEED_BENCH_RING_SCALE
naming its output): a one-node Ring provisioned through cass-operator, the demo slide dataset ingested into it, one
unthrottled native loader reading the train part epoch after epoch as the Ring's read-only role, then
`kubectl scale` to 2 nodes (join, bootstrap streaming, cleanup) and back to 1 (decommission). This script reads
those measurements, prints samples/s before, during and after each step, writes docs/bench-ring-scale.svg (samples/s
over time, the steps marked) and ends with one BAR line per bar:

  ring_scale_throughput   the lower of the two steps' mean samples/s ÷ the steady mean   (target ≥ 0.70)
  ring_scale_failed_reads reads that failed during the whole run                          (target 0)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLOT = REPO / "docs" / "bench-ring-scale.svg"
THROUGHPUT_BAR = 0.70
WARM_UP_S = 10  # the loader's first seconds (connections, first epoch) are left out of the steady figure


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


def write_plot(series: list[int], marks: list[tuple[str, float]], steady: float, path: Path) -> None:
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
    bar = steady * THROUGHPUT_BAR
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(bar):.1f}" y2="{y(bar):.1f}" stroke="#c33" '
                 'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{width - right - 4}" y="{y(bar) - 4:.1f}" text-anchor="end" fill="#c33">'
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
    origin = timeline[0][0]
    steady = rate(timeline, origin + WARM_UP_S, marks["scale to 2"])
    up = rate(timeline, marks["scale to 2"], marks["settled at 2"])
    at_two = rate(timeline, marks["settled at 2"], marks["scale to 1"])
    down = rate(timeline, marks["scale to 1"], marks["settled at 1"])
    after = rate(timeline, marks["settled at 1"], timeline[-1][0])
    rows = [("steady, 1 node", marks["scale to 2"] - origin - WARM_UP_S, steady),
            ("scale-up 1 → 2 (join, cleanup)", marks["settled at 2"] - marks["scale to 2"], up),
            ("2 nodes", marks["scale to 1"] - marks["settled at 2"], at_two),
            ("scale-down 2 → 1 (decommission)", marks["settled at 1"] - marks["scale to 1"], down),
            ("after, 1 node", timeline[-1][0] - marks["settled at 1"], after)]
    print(f"{'phase':<34}{'seconds':>9}{'samples/s':>11}{'÷ steady':>10}")
    for phase, seconds, samples_per_s in rows:
        print(f"{phase:<34}{seconds:>9.0f}{samples_per_s:>11.0f}{samples_per_s / steady:>10.2f}")
    failures = run["failures"]
    print(f"epochs {run['epochs']}, samples {run['samples']}, failed reads {len(failures)}")
    for failure in failures[:5]:
        print(f"  {failure}")
    write_plot(per_second(timeline, origin), [(label, at - origin) for label, at in run["marks"]], steady,
               args.plot)
    print(f"plot: {args.plot}")
    ratio = min(up, down) / steady
    print(f"BAR ring_scale_throughput {ratio:.2f} {THROUGHPUT_BAR:.2f} {'PASS' if ratio >= THROUGHPUT_BAR else 'FAIL'}")
    print(f"BAR ring_scale_failed_reads {len(failures)} 0 {'PASS' if not failures else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
