"""The shared-memory slots of a feed: files in the memory-backed feed directory, each holding one batch.

A slot file is mapped once by the sidecar (shared, read-write) and by the trainer (``ringfeed_client.Feed``); a
batch is written once into a free slot and read in place. Slots only grow (a shrinking file would fault a mapping
of its tail). Each sidecar start is a new *generation* with new file names: a trainer still holding a batch of the
previous sidecar keeps its mapping, and so its bytes, while the old name is unlinked.
"""

from __future__ import annotations

import mmap
import os
import queue
import secrets
from pathlib import Path

import numpy as np

from ringfeed_client.protocol import ArraySpec, layout

SLOT_PREFIX = "slot-"
GROWTH = 1 << 20  # slots grow in whole MiB: batches of one feed differ little in size


class Slots:
    """`count` slots under `directory`; ``take`` waits for a free one (the back-pressure), ``give_back`` frees it."""

    def __init__(self, directory: Path, count: int):
        self.directory = directory
        for stale in directory.glob(f"{SLOT_PREFIX}*"):
            stale.unlink()  # a previous sidecar's: mapped ones live on in their trainer until unmapped
        generation = secrets.token_hex(4)
        self.names = [f"{SLOT_PREFIX}{generation}-{index}" for index in range(count)]
        self._maps: dict[str, mmap.mmap] = {}
        self._free: queue.Queue[str] = queue.Queue()
        for name in self.names:
            (directory / name).touch(mode=0o640)  # the trainer reads through the Pod's fsGroup
            self._free.put(name)

    def take(self, timeout_s: float) -> str | None:
        """A free slot, or None after `timeout_s` (so the caller can look whether it should stop)."""
        try:
            return self._free.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def give_back(self, name: str) -> None:
        self._free.put(name)

    def write(self, name: str, arrays: list[tuple[str, np.ndarray]]) -> tuple[list[ArraySpec], int]:
        """Copy `arrays` into slot `name`, one after the other and aligned: their layout and the bytes used."""
        specs, size = layout([(label, array.dtype.str, array.shape) for label, array in arrays])
        buffer = self._mapping(name, size)
        for spec, (_, array) in zip(specs, arrays, strict=True):
            target = np.frombuffer(buffer, dtype=array.dtype, count=array.size, offset=spec.offset)
            np.copyto(target.reshape(array.shape), array)
        return specs, size

    def _mapping(self, name: str, size: int) -> mmap.mmap:
        mapped = self._maps.get(name)
        if mapped is None or len(mapped) < size:
            path = self.directory / name
            length = max(-(-size // GROWTH) * GROWTH, GROWTH)
            with open(path, "r+b") as file:
                if os.fstat(file.fileno()).st_size < length:
                    os.ftruncate(file.fileno(), length)
                mapped = mmap.mmap(file.fileno(), length, flags=mmap.MAP_SHARED)
            previous = self._maps.pop(name, None)
            if previous is not None:
                previous.close()
            self._maps[name] = mapped
        return mapped

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
