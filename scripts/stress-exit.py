#!/usr/bin/env python3
"""Stress the exit path: thousands of short `ringfeed` commands and repeated Loader + torch DataLoader processes,
each ending at an awkward moment; reports every run that died by a signal and exits 1 if any did.

Not run in CI (it takes minutes). Typical use, against the test node (`RINGFEED_TEST_KEEP=1` keeps it up):

    .venv/bin/python scripts/stress-exit.py --hosts 127.0.10.1 --cli-runs 2000 --loader-runs 40

It creates a small image dataset with a unique name on that ring, drops it at the end, and runs children with
PYTHONFAULTHANDLER=1 and core dumps enabled in a scratch folder: a crashed run's stderr and, when gdb is installed,
a backtrace of every thread from its core file are kept under --report-dir.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPLIT = "by-patient"

# --- children: each builds native sessions, loaders or workers and leaves while they are busy -------------------


def child_loader_mid_epoch(dataset: str) -> None:
    """Decoding loader abandoned after one batch with the window full, beside another library's DataLoader workers."""
    import torch.utils.data

    from ringfeed import Decode, Loader

    others = iter(torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(64.0)), batch_size=8,
                                              num_workers=2))
    next(others)
    loader = Loader(dataset, SPLIT, "train", batch_size=8, decode=Decode(32, 32), prefetch=4, decode_threads=2)
    next(iter(loader))
    next(others)


def child_torch_workers(dataset: str) -> None:
    """ringfeed.torch.RingfeedDataLoader with two workers left mid-epoch, and a main-process loader left mid-epoch."""
    from ringfeed import Loader
    from ringfeed.torch import RingfeedDataLoader, RingfeedDataset

    data = RingfeedDataset(dataset, SPLIT, "train", batch_size=8, seed=1)
    batches = iter(RingfeedDataLoader(data, num_workers=2))
    next(batches)
    next(iter(Loader(dataset, SPLIT, "val", batch_size=4, prefetch=3)))
    next(batches)


def child_fork_after_loader(dataset: str) -> None:
    """A loader read in the main process, then forked workers of another library inherit its native session."""
    import torch.utils.data

    from ringfeed import Decode, Loader

    loader = Loader(dataset, SPLIT, "val", batch_size=8, decode=Decode(32, 32), decode_threads=2)
    for _ in loader:
        pass
    for _ in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(32.0)), batch_size=8,
                                         num_workers=2):
        pass
    next(iter(loader))


def child_fork_reuses_loader(dataset: str) -> None:
    """A forked child iterates a loader its parent had opened: it opens its own reader and lets the inherited one
    go (whose threads exist only in the parent), then exits normally."""
    from ringfeed import Decode, Loader

    loader = Loader(dataset, SPLIT, "val", batch_size=8, decode=Decode(32, 32), decode_threads=2)
    next(iter(loader))
    pid = os.fork()
    if pid == 0:
        for _ in loader:
            pass
        loader.close()
        return
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"the forked child ended with {os.waitstatus_to_exitcode(status)}")


def child_daemon_thread(dataset: str) -> None:
    """The main thread exits while a daemon thread waits inside the native loader for a batch."""
    from ringfeed import Loader

    loader = Loader(dataset, SPLIT, "train", batch_size=4, prefetch=8, concurrency=2)
    started = threading.Event()

    def read_forever():
        while True:
            for _ in loader:
                started.set()

    threading.Thread(target=read_forever, daemon=True).start()
    started.wait()


def child_error_mid_epoch(dataset: str) -> None:
    """An exception escapes mid-epoch: its traceback keeps the loader's frames (and batches in flight) alive."""
    from ringfeed import Loader

    for _ in Loader(dataset, SPLIT, "train", batch_size=4, prefetch=4):
        raise RuntimeError("stress-exit: deliberate error mid-epoch")


def child_daemon_decoders(dataset: str) -> None:
    """The main thread exits while daemon threads decode a JPEG natively, the GIL released (`dataset` is not read)."""
    import random

    from ringfeed import _native
    from ringfeed.demo import patch_jpeg

    jpeg = patch_jpeg(random.Random(1), tumor=True, size=384)
    started = threading.Barrier(DECODER_THREADS + 1)

    def decode_forever():
        started.wait()
        while True:
            _native.decode_image(jpeg, 224, 224)

    for _ in range(DECODER_THREADS):
        threading.Thread(target=decode_forever, daemon=True).start()
    started.wait()
    time.sleep(0.05)


DECODER_THREADS = 4
CHILDREN = {
    "loader-mid-epoch": (child_loader_mid_epoch, 0),
    "torch-workers": (child_torch_workers, 0),
    "fork-after-loader": (child_fork_after_loader, 0),
    "fork-reuses-loader": (child_fork_reuses_loader, 0),
    "daemon-thread": (child_daemon_thread, 0),
    "daemon-decoders": (child_daemon_decoders, 0),
    "error-mid-epoch": (child_error_mid_epoch, 1),
}

# --- the driver -------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Run:
    kind: str
    argv: list[str]
    expected_exit: int


@dataclasses.dataclass
class Tally:
    runs: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    crashes: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (kind, signal name)
    unexpected: collections.Counter = dataclasses.field(default_factory=collections.Counter)  # (kind, exit code)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def make_dataset(address, name: str, scratch: Path) -> list[str]:
    """A small JPEG dataset with a split; returns some of its sample UUIDs."""
    from ringfeed.demo import make_demo_set
    from ringfeed.ingest import ingest
    from ringfeed.schema import Column, DatasetSchema, Encoding
    from ringfeed.splits import SplitSpec, create_split, load_split
    from ringfeed.store import Store

    demo = make_demo_set(scratch / "demo", patients=6)
    with Store(address) as store:
        store.create_dataset(DatasetSchema(
            name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
            Encoding("jpeg"), metadata=(Column("scanner", "text"),), label_names=("normal", "tumor")))
        ingest(store, name, str(demo.manifest))
        create_split(store, name, SPLIT, SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=1))
        uuids = load_split(store, name, SPLIT).uuids("train")[:50]
    return [str(uuid.UUID(bytes=u.tobytes())) for u in uuids]


def drop_dataset(address, name: str) -> None:
    from ringfeed.store import Store

    with Store(address) as store:
        store.drop_dataset(name, force=True)


def cli_runs(count: int, dataset: str, samples: list[str], scratch: Path) -> list[Run]:
    """Mostly `ringfeed get` (the command that crashed), with failing commands and native loader runs mixed in."""
    ringfeed = [sys.executable, "-m", "ringfeed"]
    out = str(scratch / "sample.bin")
    mix = [
        ("get", lambda i: ringfeed + ["get", dataset, samples[i % len(samples)], "-o", out], 0),
        ("get", lambda i: ringfeed + ["get", dataset, samples[(i + 7) % len(samples)], "-o", out], 0),
        ("get", lambda i: ringfeed + ["get", dataset, samples[(i + 13) % len(samples)], "-o", out], 0),
        ("get-missing", lambda i: ringfeed + ["get", dataset, str(uuid.UUID(int=i)), "-o", out], 1),
        ("inspect", lambda i: ringfeed + ["inspect", dataset], 0),
        ("load", lambda i: ringfeed + ["load", dataset, SPLIT, "--part", "val", "-b", "8", "--decode", "32x32"], 0),
    ]
    runs = []
    for i in range(count):
        kind, argv, expected = mix[i % len(mix)]
        runs.append(Run(kind, argv(i), expected))
    return runs


def loader_runs(count: int, dataset: str) -> list[Run]:
    kinds = list(CHILDREN)
    return [Run(kinds[i % len(kinds)], [sys.executable, str(Path(__file__).resolve()), "--child", kinds[i % len(kinds)],
                                       "--dataset", dataset], CHILDREN[kinds[i % len(kinds)]][1])
            for i in range(count)]


def backtrace(core: Path) -> str:
    if not shutil.which("gdb"):
        return "(gdb is not installed: no backtrace)\n"
    result = subprocess.run(["gdb", "-batch", "-ex", "thread apply all bt 30", sys.executable, str(core)],
                            check=False, capture_output=True, text=True, timeout=300)
    return result.stdout + result.stderr


def enable_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def execute(run: Run, number: int, env: dict, scratch: Path, report_dir: Path, tally: Tally,
            timeout_s: float) -> None:
    cwd = scratch / f"run-{number}"
    cwd.mkdir()
    try:
        result = subprocess.run(run.argv, check=False, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=timeout_s, preexec_fn=enable_core_dumps)
        code, stderr = result.returncode, result.stderr
    except subprocess.TimeoutExpired as exc:
        code, stderr = "timeout", (exc.stderr or b"").decode(errors="replace")
    with tally.lock:
        tally.runs[run.kind] += 1
    if code == run.expected_exit:
        shutil.rmtree(cwd, ignore_errors=True)
        return
    crashed = isinstance(code, int) and code < 0
    label = signal.Signals(-code).name if crashed else str(code)
    with tally.lock:
        (tally.crashes if crashed else tally.unexpected)[(run.kind, label)] += 1
    report = report_dir / f"{number:05d}-{run.kind}-{label}.txt"
    cores = sorted(cwd.glob("core*"))
    report.write_text(f"$ {' '.join(run.argv)}\nexit: {label}\n\n--- stderr ---\n{stderr}\n"
                      + "".join(f"--- {core.name} ---\n{backtrace(core)}" for core in cores))
    print(f"run {number} ({run.kind}): {label}; see {report}", flush=True)
    shutil.rmtree(cwd, ignore_errors=True)


def run_all(runs: list[Run], jobs: int, deadline: float, env: dict, scratch: Path, report_dir: Path,
            timeout_s: float) -> Tally:
    tally = Tally()
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        pending = set()
        for number, run in enumerate(runs):
            if time.monotonic() > deadline:
                print(f"time limit reached after {number} of {len(runs)} runs", flush=True)
                break
            if len(pending) >= jobs * 2:
                done, pending = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    future.result()
            pending.add(pool.submit(execute, run, number, env, scratch, report_dir, tally, timeout_s))
            if number and number % 200 == 0:
                print(f"{number} runs started ({time.monotonic() - started:.0f} s)", flush=True)
        for future in concurrent.futures.as_completed(pending):
            future.result()
    return tally


def summary(title: str, tally: Tally) -> bool:
    """Prints the counts; True when nothing crashed or ended with an unexpected exit code."""
    print(f"{title}: {sum(tally.runs.values())} runs ({', '.join(f'{k} {n}' for k, n in sorted(tally.runs.items()))})")
    print(f"  crashed by a signal: {sum(tally.crashes.values())}"
          + "".join(f"\n    {kind}: {sig} x{n}" for (kind, sig), n in sorted(tally.crashes.items())))
    print(f"  unexpected exit code: {sum(tally.unexpected.values())}"
          + "".join(f"\n    {kind}: {code} x{n}" for (kind, code), n in sorted(tally.unexpected.items())))
    return not tally.crashes and not tally.unexpected


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default=os.environ.get("RINGFEED_HOSTS", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("RINGFEED_PORT", "9042")))
    parser.add_argument("--cli-runs", type=int, default=2000, help="short `ringfeed` commands")
    parser.add_argument("--loader-runs", type=int, default=40, help="Loader + torch DataLoader processes")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--max-minutes", type=float, default=60, help="no new run starts after this")
    parser.add_argument("--run-timeout", type=float, default=120, help="seconds before a run counts as hung")
    parser.add_argument("--report-dir", type=Path, default=Path("stress-exit-report"))
    parser.add_argument("--dataset", help="use this existing dataset (with a split named by-patient)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        CHILDREN[args.child][0](args.dataset)
        return 0

    from ringfeed.connection import ClusterAddress

    os.environ["RINGFEED_HOSTS"], os.environ["RINGFEED_PORT"] = args.hosts, str(args.port)
    address = ClusterAddress.from_env()
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    args.report_dir.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.max_minutes * 60
    scratch = Path(tempfile.mkdtemp(prefix="stress-exit-"))
    dataset = args.dataset or f"stress_exit_{uuid.uuid4().hex[:8]}"
    try:
        if not args.dataset:
            print(f"creating dataset {dataset} on {args.hosts}:{args.port}", flush=True)
        samples = make_dataset(address, dataset, scratch) if not args.dataset else _some_samples(address, dataset)
        clean = True
        for title, runs in (("loader processes", loader_runs(args.loader_runs, dataset)),
                            ("CLI commands", cli_runs(args.cli_runs, dataset, samples, scratch))):
            print(f"{title}: {len(runs)} runs, {args.jobs} at a time", flush=True)
            tally = run_all(runs, args.jobs, deadline, env, scratch, args.report_dir, args.run_timeout)
            clean = summary(title, tally) and clean
    finally:
        if not args.dataset:
            drop_dataset(address, dataset)
        shutil.rmtree(scratch, ignore_errors=True)
    print("no crash" if clean else f"FAILED: reports in {args.report_dir}")
    return 0 if clean else 1


def _some_samples(address, dataset: str) -> list[str]:
    from ringfeed.splits import load_split
    from ringfeed.store import Store

    with Store(address) as store:
        return [str(uuid.UUID(bytes=u.tobytes())) for u in load_split(store, dataset, SPLIT).uuids("train")[:50]]


if __name__ == "__main__":
    sys.exit(main())
