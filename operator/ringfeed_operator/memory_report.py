"""Where the operator's memory is, on demand: with PYTHONTRACEMALLOC=N in its environment (the chart's
operator.extraEnv), SIGUSR1 logs the allocation sites holding the most memory, each with its N innermost frames.
Off by default: tracing costs memory and time on every allocation."""

from __future__ import annotations

import logging
import signal
import tracemalloc

TOP = 25

log = logging.getLogger(__name__)


def install() -> None:
    """Answer SIGUSR1 with a report when Python traces its allocations since the start."""
    if tracemalloc.is_tracing():
        signal.signal(signal.SIGUSR1, lambda *_: report())


def report() -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    held = snapshot.statistics("traceback")
    total = sum(stat.size for stat in held)
    log.warning("memory report: %.1f MiB traced in %d blocks; the %d largest allocation sites follow",
                total / 2**20, sum(stat.count for stat in held), TOP)
    for stat in held[:TOP]:
        frames = " <- ".join(f"{frame.filename.rsplit('site-packages/', 1)[-1]}:{frame.lineno}"
                             for frame in reversed(stat.traceback))
        log.warning("memory report: %.1f MiB in %d blocks at %s", stat.size / 2**20, stat.count, frames)
    for stat in snapshot.statistics("filename")[:TOP]:
        log.warning("memory report by file: %.1f MiB in %d blocks in %s", stat.size / 2**20, stat.count,
                    stat.traceback[0].filename.rsplit("site-packages/", 1)[-1])
