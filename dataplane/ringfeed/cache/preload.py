"""Preload: read every file of a cache tier's tree once through its FUSE mount, so that the first epoch finds it warm.

A file read for the first time comes from the ring into an Alluxio worker; many threads read at once, so the ring
serves the misses in parallel. With the tuned preset's kernel cache, the file's pages also stay in the node's page
cache, which is where a warm epoch reads them: the first epoch after a preload runs as a warm one. Alluxio's own
distributed load (``fs load --submit``) fills the workers only, and the first epoch after it still crosses FUSE for
every file: 0.3 of a warm epoch on 2 cores (docs/benchmarks.md, bench-cache).

On Kubernetes each FUSE Pod of a Dataset with ``spec.cache.alluxio.preload`` runs ``ringfeed cache preload --watch``
beside its mount: one pass over the tree, a ready file once it is done (the container's readiness, which the
operator reports as the Dataset's CacheWarm condition), then a pass every interval that reads only the files that
are new (a split made since). A file that cannot be read is counted and named in the log, never fatal."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger(__name__)

CHUNK = 1 << 20
DEFAULT_THREADS = 32  # misses wait on the ring, not on a core: enough in flight to keep a node's reads busy


@dataclasses.dataclass(frozen=True)
class PreloadFigures:
    files: int
    bytes: int
    failed: int
    seconds: float

    @property
    def bytes_per_second(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        return (f"{self.files:,} files, {self.bytes / 1e6:,.1f} MB in {self.seconds:.1f} s "
                f"({self.bytes_per_second / 1e6:,.1f} MB/s, {self.files / max(self.seconds, 1e-9):,.0f} files/s)"
                + (f", {self.failed:,} failed" if self.failed else ""))


def read_through(path: str) -> int:
    """Read a file to its end (→ its size); the bytes go nowhere, the tier and the page cache keep them."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = 0
        while chunk := os.read(fd, CHUNK):
            size += len(chunk)
        return size
    finally:
        os.close(fd)


def tree_files(root: Path) -> Iterator[str]:
    """Every file under root; an unreadable folder raises (a mount that went away must not look like an empty
    tree)."""
    def fail(error: OSError) -> None:
        raise error

    for folder, _, files in os.walk(root, onerror=fail):
        for name in files:
            yield os.path.join(folder, name)


class Preloader:
    """Reads the files of a tree that it has not read yet, with ``threads`` reads in flight."""

    def __init__(self, root: Path, threads: int = DEFAULT_THREADS):
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.root = Path(root)
        self.threads = threads
        self.read: set[str] = set()

    def forget(self) -> None:
        """A new mount (its FUSE process restarted): its page cache is empty, so every file is read again."""
        self.read.clear()

    def run_pass(self, on_progress: Callable[[int, int], None] | None = None) -> PreloadFigures:
        """Read every file not read before; → what this pass read. on_progress(files, bytes) every 1,000 files."""
        started = time.monotonic()
        pending = [path for path in tree_files(self.root) if path not in self.read]
        files = size = failed = 0

        def read(path: str) -> tuple[str, int | OSError]:
            try:
                return path, read_through(path)
            except OSError as error:
                return path, error

        with ThreadPoolExecutor(self.threads, thread_name_prefix="preload") as pool:
            for path, outcome in pool.map(read, pending):
                if isinstance(outcome, OSError):
                    failed += 1
                    log.warning("cannot read %s: %s", path, outcome.strerror or outcome)
                    continue
                self.read.add(path)
                files, size = files + 1, size + outcome
                if on_progress is not None and files % 1000 == 0:
                    on_progress(files, size)
        return PreloadFigures(files, size, failed, time.monotonic() - started)


def wait_for_mount(mount: Path, poll_s: float = 1.0, timeout_s: float | None = None) -> int:
    """Wait until ``mount`` is a mount point that answers; → its device number (a new mount gets a new one)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            if os.path.ismount(mount):
                os.listdir(mount)
                return os.stat(mount).st_dev
        except OSError:
            pass  # ENOTCONN: a dead FUSE process's mount, until its restart detaches it
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{mount} is not mounted")
        time.sleep(poll_s)


def keep_warm(mount: Path, threads: int, interval_s: float, ready_file: Path | None,
              on_pass: Callable[[PreloadFigures, bool], None], passes: int | None = None) -> None:
    """Preload ``mount`` and keep it warm: a full pass, the ready file (the figures of that pass, as JSON), then a
    pass every ``interval_s`` for the files that are new. A mount that goes away is waited for, and read whole
    again once it is back. ``passes``: stop after that many (tests); None: forever."""
    preloader = Preloader(mount, threads)
    device = None
    done = 0
    while passes is None or done < passes:
        try:
            if (current := wait_for_mount(mount)) != device:
                device = current
                preloader.forget()
            figures = preloader.run_pass()
        except OSError as error:
            log.warning("the mount %s went away (%s): waiting for it", mount, error.strerror or error)
            continue
        first = done == 0
        done += 1
        on_pass(figures, first)
        if first and ready_file is not None:
            ready_file.write_text(json.dumps(dataclasses.asdict(figures)))
        if passes is None or done < passes:
            time.sleep(interval_s)
