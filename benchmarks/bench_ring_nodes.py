"""make bench-ring-nodes: a ring's read throughput against its node count, and a resize under the same load.

A local ring (loopback addresses, as bench-node) holds `--rows` raw samples of `--size` bytes at RF 1. Each node is
pinned to CPUs of its own (`--node-cpus`, a small machine); `--loaders` loader processes, the ranks of one job
reading epoch after epoch, share the remaining CPUs. The load never stops while the ring goes

    1 → 2 → … → N → … → 2 → 1 nodes (N = --max-nodes)

one node at a time (bootstrap, then decommission), with a steady phase of `--steady-seconds` at every size. Every
size but N is measured twice, once growing and once shrinking, so the order of the phases flatters no size; the
steps from 2 to N and back are the resize of the issue. Each steady phase reports samples/s and the p99 of the read
requests (histogram_quantile over the loader's `fetch_latency_seconds` buckets); each step its mean samples/s.
Ends with one BAR line per bar:

  ring_reads_<N>_vs_1_nodes   samples/s of the N-node phase ÷ the higher of the two 1-node phases   (target ≥ N-1)
  ring_resize_failed_reads    reads that failed during the whole run, steps included              (target 0)

Where the machine has fewer than N × node-cpus + 1 CPUs the nodes share CPUs, and the first bar measures sharing,
not scaling: the run says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import queue
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.loader import Loader, LoaderSource
from ringfeed.local import LocalRing, RingSettings
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

from bench_ingest import make_source, schema_for
from bench_ring_scale import rate

REPO = Path(__file__).resolve().parents[1]
DATASET = "bench_ring_nodes"
REPORT_EVERY_S = 0.25
SETTLE_S = 5.0  # after a step, before a steady phase: the loaders' driver learns the new token map


@dataclasses.dataclass
class Phase:
    name: str
    nodes: int
    steady: bool
    start: float = 0.0
    end: float = 0.0
    latency_before: list[int] = dataclasses.field(default_factory=list)
    latency_after: list[int] = dataclasses.field(default_factory=list)


def cpu_plan(max_nodes: int, node_cpus: int) -> tuple[list[set[int]], set[int], bool]:
    """CPUs of each node and of the loaders; whether every node got CPUs of its own with some left for loaders."""
    cpus = sorted(os.sched_getaffinity(0))
    dedicated = len(cpus) > max_nodes * node_cpus
    if dedicated:
        nodes = [set(cpus[i * node_cpus:(i + 1) * node_cpus]) for i in range(max_nodes)]
        return nodes, set(cpus[max_nodes * node_cpus:]), True
    return [set(cpus) for _ in range(max_nodes)], set(cpus), False


def read_forever(source: LoaderSource, rank: int, world: int, batch: int, cpus: set[int],
                 reports: multiprocessing.Queue, stop) -> None:
    """One loader process: epochs of its rank's share until told to stop; every REPORT_EVERY_S it reports samples
    read since its last report, reads that failed, and its request latency histogram (cumulative)."""
    os.sched_setaffinity(0, cpus)
    loader, samples, failures, last = None, 0, 0, time.monotonic()
    while not stop.is_set():
        try:
            if loader is None:
                loader = Loader.from_source(source, batch_size=batch, rank=rank, world_size=world, seed=rank,
                                            remainder="uneven")
            for _, labels in loader:
                samples += len(labels)
                if time.monotonic() - last >= REPORT_EVERY_S:
                    bounds, cumulative, _ = loader.metrics.snapshot()["fetch_latency_seconds"]
                    reports.put((time.time(), rank, samples, failures, (list(bounds), list(cumulative)), None))
                    samples, last = 0, time.monotonic()
                if stop.is_set():
                    break
        except Exception as error:  # noqa: BLE001  (a failed read is what this counts; reading goes on)
            failures += 1
            reports.put((time.time(), rank, 0, failures, None, f"{type(error).__name__}: {error}"))
            loader = None
            time.sleep(0.2)
    reports.put((time.time(), rank, samples, failures, None, None))


class Load:
    """The loader processes and what they reported: per-second samples, failures, latency histograms."""

    def __init__(self, source: LoaderSource, loaders: int, batch: int, cpus: set[int]):
        context = multiprocessing.get_context("spawn")
        self.reports = context.Queue()
        self.stop = context.Event()
        self.processes = [context.Process(target=read_forever, args=(source, rank, loaders, batch, cpus,
                                                                     self.reports, self.stop), daemon=True)
                          for rank in range(loaders)]
        self.timeline: list[tuple[float, int]] = []
        self.failures = [0] * loaders
        self.latency: list[list[int] | None] = [None] * loaders  # cumulative counts, the +Inf bucket last
        self.bounds: list[float] = []
        self.errors: list[str] = []

    def __enter__(self) -> Load:
        for process in self.processes:
            process.start()
        return self

    def drain(self) -> None:
        while True:
            try:
                at, rank, samples, failures, cumulative, error = self.reports.get_nowait()
            except queue.Empty:
                return
            self.timeline.append((at, samples))
            self.failures[rank] = max(self.failures[rank], failures)
            if cumulative is not None:
                self.bounds, self.latency[rank] = cumulative
            if error is not None:
                self.errors.append(f"loader {rank}: {error}")

    def wait(self, seconds: float) -> None:
        until = time.time() + seconds
        while time.time() < until:
            time.sleep(0.1)
            self.drain()

    def histogram(self) -> list[int]:
        self.drain()
        known = [counts for counts in self.latency if counts is not None]
        return [sum(column) for column in zip(*known, strict=True)] if known else []

    def rate(self, start: float, end: float) -> float:
        return rate(self.timeline, start, end)

    def __exit__(self, *_) -> None:
        self.stop.set()
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        self.drain()


def p99(bounds: list[float], before: list[int], after: list[int]) -> float:
    """histogram_quantile(0.99) of the requests between two cumulative snapshots (linear within a bucket)."""
    counts = np.array(after) - (np.array(before) if before else 0)
    total = counts[-1] if len(counts) else 0
    if total == 0:
        return float("nan")
    rank = 0.99 * total
    index = int(np.searchsorted(counts, rank))
    if index >= len(bounds):
        return float(bounds[-1])
    lower = bounds[index - 1] if index else 0.0
    below = counts[index - 1] if index else 0
    return lower + (bounds[index] - lower) * (rank - below) / max(counts[index] - below, 1)


def diagnose(ring: LocalRing, keyspace: str, errors: list[str]) -> None:
    """What a failed read looked like: the first errors, the ring's view, and for a sample the loader found missing,
    its replicas and whether a read coordinated by each node finds it."""
    print("reads failed; the first errors:", *errors[:4], sep="\n  ", flush=True)
    print(ring.nodetool(1, "status"), flush=True)
    for index in ring.members:  # a bootstrap whose streaming failed says so here, and the node joins regardless
        log = ring.state_dir / "nodes" / f"n{index}" / "logs" / "system.log"
        lines = [line for line in log.read_text(errors="replace").splitlines()
                 if re.search(r"ERROR|stream(ing)? failed|Bootstrap completed|JOINING|NORMAL", line)]
        print(f"node {index}'s log:", *lines[-12:], sep="\n  ", flush=True)
    missing = re.search(r"first: ([0-9a-f-]{36})", " ".join(errors))
    if missing is None:
        return
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.policies import WhiteListRoundRobinPolicy

    sample = uuid.UUID(missing.group(1))
    print(f"sample {sample}: replicas "
          f"{ring.nodetool(1, 'getendpoints', keyspace, 'data_by_uuid', str(sample)).split()}")
    for host in ring.hosts:
        profile = ExecutionProfile(load_balancing_policy=WhiteListRoundRobinPolicy([host]))
        with Cluster([host], execution_profiles={EXEC_PROFILE_DEFAULT: profile}) as cluster:
            found = cluster.connect().execute(f"SELECT uuid FROM {keyspace}.data_by_uuid WHERE uuid = %s",
                                              (sample,)).one()
        print(f"  read coordinated by {host}: {'found' if found else 'NOT FOUND'}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-nodes", type=int, default=4)
    parser.add_argument("--loaders", type=int, default=4)
    parser.add_argument("--node-cpus", type=int, default=2, help="CPUs of each node's own.")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=20_000, help="Bytes per sample.")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steady-seconds", type=float, default=15)
    parser.add_argument("--heap", default="2G")
    parser.add_argument("--json", type=Path, help="Write the phases' figures here.")
    args = parser.parse_args()
    if args.max_nodes < 2:
        parser.error("--max-nodes must be at least 2")

    node_cpus, loader_cpus, dedicated = cpu_plan(args.max_nodes, args.node_cpus)
    print(f"{len(os.sched_getaffinity(0))} CPUs: " + (
        f"each node on {args.node_cpus} of its own, {args.loaders} loaders on the other {len(loader_cpus)}"
        if dedicated else "too few to give every node its own; nodes and loaders share them all (the scaling bar "
                          "then measures sharing, not scaling)"), flush=True)
    settings = RingSettings(cluster_name="ringfeed-bench-ring-nodes", address_prefix="127.0.40.", jmx_base=7640,
                            heap=args.heap, ring_delay_ms=1000)
    state = REPO / ".state" / "bench-ring-nodes"
    LocalRing(state, settings).down(purge=True)
    ring = LocalRing(state, settings)
    everything = os.sched_getaffinity(0)

    def on_cpus_of(index: int, step) -> None:
        """A node started from here inherits this thread's CPUs (and nodetool runs briefly on them too)."""
        os.sched_setaffinity(0, node_cpus[index - 1])
        try:
            step()
        finally:
            os.sched_setaffinity(0, everything)

    phases: list[Phase] = []
    try:
        on_cpus_of(1, lambda: ring.up(1))
        with Store(ClusterAddress(tuple(ring.hosts))) as store, tempfile.TemporaryDirectory() as tmp:
            print(f"writing {args.rows:,} samples of {args.size // 1000} kB at RF 1 …", flush=True)
            store.create_dataset(schema_for(DATASET, args.size))
            ingest(store, DATASET, str(make_source(Path(tmp), args.rows, args.size, labels=10)),
                   IngestOptions(concurrency=64))
            create_split(store, DATASET, "all", SplitSpec(ratios=(1,), names=("train",)))
            source = LoaderSource.from_split(DATASET, "all", "train", store=store)
        ring.nodetool(1, "flush", source.keyspace)
        ring.nodetool(1, "compact", source.keyspace)

        sizes = [*range(1, args.max_nodes + 1), *range(args.max_nodes - 1, 0, -1)]
        with Load(source, args.loaders, args.batch, loader_cpus) as load:
            load.wait(args.steady_seconds)  # untimed: connections, the JIT, the page cache
            for previous, nodes in zip([None, *sizes], sizes, strict=False):
                if previous is not None:
                    step = Phase(f"{previous} → {nodes}", nodes, steady=False, start=time.time())
                    try:
                        if nodes > previous:
                            on_cpus_of(nodes, ring.add_node)
                        else:
                            ring.remove_node(previous, force=True)  # the system keyspaces' RF 2-3
                    except RingfeedError as error:  # e.g. a join whose streaming failed: the run ends here
                        load.errors.append(f"step {previous} → {nodes}: {error}")
                    load.wait(SETTLE_S)
                    step.end = time.time()
                    phases.append(step)
                    print(f"  step {step.name}: {step.end - step.start:5.1f} s, "
                          f"{load.rate(step.start, step.end):9,.0f} samples/s", flush=True)
                if load.errors:  # the bar has failed; what the rest of the run would measure is the failure
                    diagnose(ring, source.keyspace, load.errors)
                    break
                steady = Phase(f"{nodes} node{'s' if nodes > 1 else ''}", nodes, steady=True, start=time.time(),
                               latency_before=load.histogram())
                load.wait(args.steady_seconds)
                steady.end, steady.latency_after = time.time(), load.histogram()
                phases.append(steady)
                print(f"  {steady.name:>8}: {load.rate(steady.start, steady.end):9,.0f} samples/s, read p99 "
                      f"{p99(load.bounds, steady.latency_before, steady.latency_after) * 1e3:6.1f} ms", flush=True)
        failed_reads = sum(load.failures)
    finally:
        ring.down(purge=True)

    rates = {nodes: [load.rate(p.start, p.end) for p in phases if p.steady and p.nodes == nodes]
             for nodes in range(1, args.max_nodes + 1)}
    print("\nnodes  samples/s (growing, shrinking)  MB/s")
    for nodes, measured in rates.items():
        figures = " / ".join(f"{r:,.0f}" for r in measured) or "not measured"
        print(f"{nodes:>5}  {figures:>30}  {max(measured, default=0) * args.size / 1e6:6.0f}")
    if args.json:
        args.json.write_text(json.dumps({
            "cpus": len(everything), "node_cpus": args.node_cpus if dedicated else None, "loaders": args.loaders,
            "size": args.size, "rows": args.rows, "failed_reads": failed_reads,
            "phases": [{"name": p.name, "nodes": p.nodes, "steady": p.steady, "seconds": p.end - p.start,
                        "samples_per_s": load.rate(p.start, p.end),
                        "read_p99_s": p99(load.bounds, p.latency_before, p.latency_after) if p.steady else None}
                       for p in phases]}, indent=2) + "\n")

    # An N-node phase that never ran (the run stopped at a failed read) scales by nothing.
    scaling = max(rates[args.max_nodes], default=0.0) / max(rates[1])
    target = args.max_nodes - 1.0
    verdict = "PASS" if scaling >= target else "FAIL"
    print()
    print(f"BAR ring_reads_{args.max_nodes}_vs_1_nodes {scaling:.2f} {target} {verdict}")
    print(f"BAR ring_resize_failed_reads {failed_reads} 0 {'PASS' if failed_reads == 0 else 'FAIL'}")
    return 0 if scaling >= target and failed_reads == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
