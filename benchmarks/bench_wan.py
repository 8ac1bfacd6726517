"""make bench-wan: the loader with its DEFAULT settings over a long link, 0 to 100 ms of round trip.

One dedicated local node; the link is `wanproxy` (benchmarks/wanproxy, Rust), a TCP proxy on the node's own address
that delays every byte by half the round trip each way and changes nothing else (this kernel has no netem). The
driver reaches every node at its own address on the contact point's port, so the proxy listens on the node's
address and the loader's native session connects there; the control path (catalog, splits) goes direct.

For each sample size (20 kB and 150 kB raw samples), in one run, after 2 × `--seconds` of untimed reading:
  - the proxy's cost: the loader through the proxy at 0 ms (P) and straight to the node (D), `--seconds` / 2 each,
    in the order P D D P D P P D; the mean of the P points ÷ the mean of the D points (bar: ≥ 0.95);
  - through the proxy at 0, 100, 10, 50, 100 and 0 ms of round trip: samples/s, time to the first batch, the
    window and the bytes in flight at their peak (bar: the mean of the 100 ms points ≥ 0.80 × the mean of the 0 ms
    points).
Both orders are symmetric in time, so that a steady drift of the node's own speed (its JIT and page cache keep
warming for minutes on 2 cores) adds the same to both sides of a ratio.
Each point is a fresh loader (a new user's process), reading epochs until `--seconds` have passed (at least two):
the start-up of its window is inside the measurement. Writes docs/bench-wan.svg and ends with one BAR line per bar.

The proxy stands for the network, which costs the two ends no CPU: it runs on CPUs of its own (the last quarter of
this process's CPUs, at least one; an eighth of 16 was too few for 150 kB at 3.5 GB/s), the node and the loader on
the others, in every point (direct ones too), so that a point through the proxy differs from a direct one by the
link alone. On a machine of 1 CPU nothing is pinned.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench_loader import make_raw_dataset, settle
from ringfeed.connection import ClusterAddress
from ringfeed.loader import Loader, LoaderSource
from ringfeed.store import Store

from bench_node import REPO, dedicated_node

RTTS_MS = (0, 10, 50, 100)
SWEEP_ORDER = (0, 100, 10, 50, 100, 0)  # 0 and 100 ms both centred on the middle of the sweep
SIZES = (("20kB", 20_000), ("150kB", 150_000))
BARS = {"wan_proxy_0ms_vs_direct": 0.95, "wan_100ms_vs_0ms": 0.80}
PLOT = REPO / "docs" / "bench-wan.svg"


def split_cores() -> tuple[set[int], set[int]]:
    """(the node's and the loader's CPUs, the proxy's CPUs) out of this process's; the same set twice on 1 CPU."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return set(cpus), set(cpus)
    proxy = max(1, len(cpus) // 4)
    return set(cpus[:-proxy]), set(cpus[-proxy:])


@contextmanager
def wan_proxy(binary: str, host: str, port: int, rtt_ms: float, cpus: set[int]) -> Iterator[int]:
    """A wanproxy on `host` (a free port) in front of host:port, on `cpus`; yields its port."""
    proxy = subprocess.Popen([binary, "--listen", f"{host}:0", "--upstream", f"{host}:{port}", "--rtt-ms",
                              str(rtt_ms)], stdout=subprocess.PIPE, text=True,
                             preexec_fn=lambda: os.sched_setaffinity(0, cpus))
    try:
        line = proxy.stdout.readline() if proxy.stdout else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"wanproxy did not start: {line!r}")
        yield int(line.rsplit(":", 1)[1])
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


@dataclasses.dataclass
class Point:
    samples: int
    seconds: float
    epochs: int
    first_batch_s: float
    """From asking for the first batch of the run (connected already) to having it."""
    later_first_batch_s: float
    """The same for the later epochs (the fetcher and its window carry over), their mean."""
    peak_in_flight_bytes: int
    window_bytes: int
    min_rtt_ms: float

    @property
    def rate(self) -> float:
        return self.samples / self.seconds


def run_point(source: LoaderSource, seconds: float) -> Point:
    """A fresh loader, defaults only, reading whole epochs until `seconds` have passed (two epochs at least)."""
    loader = Loader.from_source(source, seed=1).open()  # connected before the clock starts
    samples = epochs = 0
    first_batches: list[float] = []
    started = time.perf_counter()
    while epochs < 2 or time.perf_counter() - started < seconds:
        asked = time.perf_counter()
        for index, (_, y) in enumerate(loader):
            if index == 0:
                first_batches.append(time.perf_counter() - asked)
            samples += len(y)
        epochs += 1
    elapsed = time.perf_counter() - started
    window = loader.window_stats()
    loader.close()
    assert window is not None, "the loader has read"
    return Point(samples, elapsed, epochs, first_batches[0], sum(first_batches[1:]) / len(first_batches[1:]),
                 window["peak_in_flight_bytes"], window["window_bytes"], window["min_rtt_ms"] or 0.0)


def write_plot(rates: dict[str, dict[int, float]], path: Path) -> None:
    """Samples/s relative to 0 ms against the round trip, one line per sample size (a small SVG, no plotting
    library needed)."""
    width, height, left, bottom, top, right = 520, 300, 60, 40, 20, 110
    x = lambda rtt: left + (width - left - right) * rtt / max(RTTS_MS)  # noqa: E731
    y = lambda ratio: top + (height - top - bottom) * (1.2 - ratio) / 1.2  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for ratio in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(ratio):.1f}" y2="{y(ratio):.1f}" '
                     f'stroke="{"#c33" if ratio == 0.8 else "#ddd"}"/>')
        parts.append(f'<text x="{left - 8}" y="{y(ratio) + 4:.1f}" text-anchor="end">{ratio:.1f}</text>')
    for rtt in RTTS_MS:
        parts.append(f'<text x="{x(rtt):.1f}" y="{height - bottom + 18}" text-anchor="middle">{rtt}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 6}" text-anchor="middle">round trip (ms)'
                 '</text>')
    parts.append(f'<text x="14" y="{top + 90}" transform="rotate(-90 14 {top + 90})" text-anchor="middle">'
                 'samples/s ÷ samples/s at 0 ms</text>')
    for (name, by_rtt), colour in zip(rates.items(), ("#1f77b4", "#ff7f0e"), strict=False):
        points = " ".join(f"{x(rtt):.1f},{y(by_rtt[rtt] / by_rtt[0]):.1f}" for rtt in RTTS_MS)
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        last = y(by_rtt[RTTS_MS[-1]] / by_rtt[0])
        parts.append(f'<text x="{x(RTTS_MS[-1]) + 8}" y="{last + 4:.1f}" fill="{colour}">{name} samples</text>')
    parts.append(f'<text x="{width - right + 8}" y="{y(0.8) + 4:.1f}" fill="#c33">bar 0.8</text>')
    path.write_text("\n".join(parts + ["</svg>"]) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wanproxy", required=True, help="Path of the wanproxy binary.")
    parser.add_argument("--rows-20k", type=int, default=40_000)
    parser.add_argument("--rows-150k", type=int, default=8_000)
    parser.add_argument("--seconds", type=float, default=30.0, help="Least time per point (two epochs at least).")
    parser.add_argument("--proxy-cost-only", action="store_true",
                        help="Measure only the proxy's cost at 0 ms (no sweep, no plot): for a machine where the "
                             "proxy has cores of its own.")
    args = parser.parse_args()

    ends_cpus, proxy_cpus = split_cores()
    os.sched_setaffinity(0, ends_cpus)  # the node (a child process) and the loader's threads inherit it
    print(f"node and loader on CPUs {sorted(ends_cpus)}, the proxy on {sorted(proxy_cpus)}")
    bars: list[tuple[str, float, float]] = []
    rates: dict[str, dict[int, float]] = {}
    rows = {"20kB": args.rows_20k, "150kB": args.rows_150k}
    with dedicated_node("bench-wan", jmx_base=7560, address_prefix="127.0.33.") as ring, \
            tempfile.TemporaryDirectory() as tmp:
        host = ring.hosts[0]
        with Store(ClusterAddress((host,))) as store:
            print(f"\n{'size':>6} {'link':>12} {'samples/s':>10} {'epochs':>6} {'1st batch':>10} {'later 1st':>10} "
                  f"{'peak in flight':>15} {'window':>9} {'min rtt':>8}")
            for name, size in SIZES:
                print(f"writing {rows[name]:,} samples of {name} …", flush=True)
                direct = make_raw_dataset(store, Path(tmp) / name, rows[name], size)
                settle(ring, direct.keyspace)
                run_point(direct, 2 * args.seconds)  # untimed: the node's JIT and the page cache settle

                def show(link: str, point: Point) -> None:
                    print(f"{name:>6} {link:>12} {point.rate:>10,.0f} {point.epochs:>6} "  # noqa: B023
                          f"{point.first_batch_s * 1e3:>8.0f}ms {point.later_first_batch_s * 1e3:>8.0f}ms "
                          f"{point.peak_in_flight_bytes / 2**20:>11.1f} MiB {point.window_bytes / 2**20:>5.1f} MiB "
                          f"{point.min_rtt_ms:>6.1f}ms", flush=True)

                def measure(rtt: int | None, seconds: float) -> float:
                    """One point: direct (None) or through the proxy at `rtt` ms; its samples/s."""
                    if rtt is None:
                        point = run_point(direct, seconds)  # noqa: B023
                    else:
                        with wan_proxy(args.wanproxy, host, 9042, rtt, proxy_cpus) as port:
                            point = run_point(dataclasses.replace(direct, address=ClusterAddress((host,), port)),  # noqa: B023
                                              seconds)
                    show("direct" if rtt is None else f"proxy {rtt} ms", point)
                    return point.rate

                # The proxy's cost, in an order symmetric in time (see the module documentation).
                points: dict[int | None, list[float]] = {0: [], None: []}
                for rtt in (0, None, None, 0, None, 0, 0, None):
                    points[rtt].append(measure(rtt, args.seconds / 2))
                proxy_cost = statistics.mean(points[0]) / statistics.mean(points[None])
                bars.append((f"wan_proxy_0ms_vs_direct_{name}", proxy_cost, BARS["wan_proxy_0ms_vs_direct"]))
                if args.proxy_cost_only:
                    continue
                sweep: dict[int, list[float]] = {rtt: [] for rtt in RTTS_MS}
                for rtt in SWEEP_ORDER:
                    sweep[rtt].append(measure(rtt, args.seconds))
                by_rtt = {rtt: statistics.mean(rates_at) for rtt, rates_at in sweep.items()}
                rates[name] = by_rtt
                bars.append((f"wan_100ms_vs_0ms_{name}", by_rtt[100] / by_rtt[0], BARS["wan_100ms_vs_0ms"]))
    if rates:
        write_plot(rates, PLOT)
        print(f"\nplot: {PLOT.relative_to(REPO)}\n")
    failed = False
    for bar, value, target in bars:
        failed |= value < target
        print(f"BAR {bar} {value:.2f} {target} {'PASS' if value >= target else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
