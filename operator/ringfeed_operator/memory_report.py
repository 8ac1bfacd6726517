"""Where the operator's memory goes, on demand: a SIGUSR1 starts tracing Python's allocations, the next one logs the
allocation sites that hold the most of what was allocated since, each with its innermost frames, and stops tracing.
Tracing slows every allocation several times, so it runs only between the two signals (tracing from the start,
PYTHONTRACEMALLOC, made the operator miss its liveness probes while importing). The report is made on a thread of its
own: the signal handler runs on the event loop's thread, which must keep answering the watches and /healthz."""

from __future__ import annotations

import logging
import signal
import threading
import tracemalloc

FRAMES = 8
TOP = 25

log = logging.getLogger(__name__)


def install() -> None:
    signal.signal(signal.SIGUSR1, lambda *_: on_signal())


def on_signal() -> None:
    if tracemalloc.is_tracing():
        threading.Thread(target=report, name="memory-report", daemon=True).start()
    else:
        tracemalloc.start(FRAMES)
        log.warning("memory report: tracing allocations from now on; the next SIGUSR1 reports where they are held")


def report() -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    tracemalloc.stop()
    held = snapshot.statistics("traceback")
    total = sum(stat.size for stat in held)
    log.warning("memory report: %.1f MiB traced in %d blocks; the %d largest allocation sites follow",
                total / 2**20, sum(stat.count for stat in held), TOP)
    for stat in held[:TOP]:
        frames = " <- ".join(f"{_module(frame.filename)}:{frame.lineno}" for frame in reversed(stat.traceback))
        log.warning("memory report: %.1f MiB in %d blocks at %s", stat.size / 2**20, stat.count, frames)
    for stat in snapshot.statistics("filename")[:TOP]:
        log.warning("memory report by file: %.1f MiB in %d blocks in %s", stat.size / 2**20, stat.count,
                    _module(stat.traceback[0].filename))


def _module(filename: str) -> str:
    """An installed package's file from its package on (the venv's path is the same in every line)."""
    return filename.rsplit("site-packages/", 1)[-1]
