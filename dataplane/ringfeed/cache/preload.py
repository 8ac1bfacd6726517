"""Preload: read every file of a cache tier's tree once through its FUSE mount, so that the first epoch finds it warm.

A file read for the first time comes from the ring into an Alluxio worker; many threads read at once, so the ring
serves the misses in parallel. With the tuned preset's kernel cache, the file's pages also stay in the node's page
cache, which is where a warm epoch reads them: the first epoch after a preload runs as a warm one. Alluxio's own
distributed load (``fs load --submit``) fills the workers only, and the first epoch after it still crosses FUSE for
every file: 0.3 of a warm epoch on 2 cores (docs/benchmarks.md, bench-cache).

On Kubernetes each FUSE Pod of a Dataset with ``spec.cache.alluxio.preload`` runs ``ringfeed cache preload --watch``
beside its mount: a pass over the tree, a ready file once it is done (the container's readiness, which the operator
reports as the Dataset's CacheWarm condition), then every interval a pass over what is new: the tier's FUSE lists a
dataset's splits as the catalog is now (io.ringfeed.alluxio.fuse.ZeroMessageOpenFileSystem), so a split made since
shows, and folders read whole before are not listed again (a split version never changes). A pass with files to
read removes the ready file until it is done. A file that cannot be read is counted and named in the log, never
fatal; its folder is read again by the next pass."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
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


class _Tally:
    """A pass's counts, from its reader threads."""

    def __init__(self, on_progress: Callable[[int, int], None] | None):
        self.lock = threading.Lock()
        self.files = self.bytes = self.failed = 0
        self.failed_folders: set[str] = set()
        self.on_progress = on_progress

    def read(self, size: int) -> None:
        with self.lock:
            self.files, self.bytes = self.files + 1, self.bytes + size
            if self.on_progress is not None and self.files % 1000 == 0:
                self.on_progress(self.files, self.bytes)

    def fail(self, folder: str, path: str, error: OSError) -> None:
        log.warning("cannot read %s: %s", path, error.strerror or error)
        with self.lock:
            self.failed += 1
            self.failed_folders.add(folder)


class Preloader:
    """Reads the files of a tree that it has not read yet, ``threads`` at a time. Memory stays small whatever the
    tree: at most 4 × threads reads are queued, and what was read is kept per folder, not per file."""

    def __init__(self, root: Path, threads: int = DEFAULT_THREADS):
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self.root = Path(root)
        self.threads = threads
        self.complete: dict[str, bool] = {}  # folder read whole → whether it has subfolders (those are walked)

    def forget(self) -> None:
        """A new mount (its FUSE process restarted): its page cache is empty, so every file is read again."""
        self.complete.clear()

    def _pending(self) -> Iterator[tuple[str, list[str], bool]]:
        """(folder, its files, whether it has subfolders) for each folder not read whole; a folder read whole with no
        subfolder is not even listed. A folder that cannot be listed raises: a mount that went away must not look
        like an empty tree."""
        def fail(error: OSError) -> None:
            raise error

        for folder, subfolders, files in os.walk(self.root, onerror=fail):
            subfolders[:] = [name for name in subfolders if self.complete.get(os.path.join(folder, name)) is not False]
            if folder not in self.complete:
                yield folder, files, bool(subfolders)

    def run_pass(self, on_pending: Callable[[], None] | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> PreloadFigures:
        """Read every file of the folders not read whole yet; → what this pass read. on_pending() once before the
        first read, on_progress(files, bytes) every 1,000 files."""
        started = time.monotonic()
        tally = _Tally(on_progress)
        slots = threading.BoundedSemaphore(4 * self.threads)
        visited: list[tuple[str, bool]] = []

        def read(folder: str, path: str) -> None:
            try:
                tally.read(read_through(path))
            except OSError as error:
                tally.fail(folder, path, error)
            finally:
                slots.release()

        with ThreadPoolExecutor(self.threads, thread_name_prefix="preload") as pool:
            for folder, files, has_subfolders in self._pending():
                visited.append((folder, has_subfolders))
                for name in files:
                    if on_pending is not None:
                        on_pending()
                        on_pending = None
                    slots.acquire()
                    pool.submit(read, folder, os.path.join(folder, name))
        for folder, has_subfolders in visited:
            if folder not in tally.failed_folders:
                self.complete[folder] = has_subfolders
        return PreloadFigures(tally.files, tally.bytes, tally.failed, time.monotonic() - started)


def wait_for_mount(mount: Path, poll_s: float = 1.0, timeout_s: float | None = None) -> None:
    """Wait until ``mount`` is a mount point that answers."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            if os.path.ismount(mount):
                os.listdir(mount)
                return
        except OSError:
            pass  # ENOTCONN: a dead FUSE process's mount, until its restart detaches it
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{mount} is not mounted")
        time.sleep(poll_s)


def _remounted(mount: Path, held: int) -> bool:
    """Whether the mount at ``mount`` is another than the one ``held`` (an open folder of its root) is on. Holding
    it keeps its device number from being given to the next mount; a dead FUSE connection fails the fstat."""
    try:
        return os.fstat(held).st_dev != os.stat(mount).st_dev
    except OSError:
        return True


def keep_warm(mount: Path, threads: int, interval_s: float, ready_file: Path | None,
              on_pass: Callable[[PreloadFigures, bool], None], passes: int | None = None) -> None:
    """Preload ``mount`` and keep it warm: a full pass, the ready file (that pass's figures, JSON), then every
    ``interval_s`` a pass over what is new, the ready file removed while it has files to read. A mount that goes
    away is waited for and read whole again once it is back. ``passes``: stop after that many (tests); None:
    forever."""
    def unready() -> None:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)

    unready()  # a restarted container has read nothing yet
    preloader = Preloader(mount, threads)
    held: int | None = None
    done = 0
    while passes is None or done < passes:
        try:
            if held is None or _remounted(mount, held):
                if held is not None:
                    log.warning("%s was mounted again: reading it whole again", mount)
                    os.close(held)
                    held = None
                    preloader.forget()
                wait_for_mount(mount)
                held = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
            figures = preloader.run_pass(on_pending=unready)
        except OSError as error:
            log.warning("cannot read %s (%s): trying again", mount, error.strerror or error)
            time.sleep(min(interval_s, 5))
            continue
        done += 1
        on_pass(figures, done == 1)
        if ready_file is not None and not ready_file.exists():
            ready_file.write_text(json.dumps(dataclasses.asdict(figures)))
        if passes is None or done < passes:
            time.sleep(interval_s)
