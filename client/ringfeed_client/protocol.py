"""The handoff between the loader sidecar (``ringfeed serve``) and the trainer (``ringfeed_client.Feed``): the one
definition both sides import.

Both containers mount the same memory-backed ``emptyDir`` (the *feed directory*). With several ranks per Pod
(torchrun's local ranks) each local rank has a feed of its own in ``local-rank-<n>`` under it. In a feed's
directory:

- ``feed.sock``, a Unix-domain ``SOCK_SEQPACKET`` socket: one JSON message per packet, request then reply;
- ``slot-<generation>-<n>``, the slot files: the sidecar writes a decoded batch once into a free slot, the trainer
  maps the file and reads the batch's arrays in place (numpy views, no copy). A slot goes back to the sidecar when
  the trainer asks for the next batch (``release``). The slot pool (prefetch + 1) is the back-pressure.

Requests (trainer → sidecar) and replies:

- ``{"type": "hello", "version": 1, "state": <loader state> | null}`` → ``welcome`` (the feed's shape and the
  position it will continue from: the given state, else where the last trainer stopped) or ``error``;
- ``{"type": "next", "release": <slot> | null}`` → ``batch`` (slot, size, arrays, epoch, ``state`` = the position
  after this batch), ``epoch_end`` (the epoch's last batch was handed out) or ``done`` (every epoch was), or
  ``error``;
- a trainer that takes batches ahead of its training loop (``Feed.prefetch``) adds ``"pending": <n>`` to ``next``:
  how many of the batches it was handed its loop has not taken yet. The sidecar keeps and reports the loop's
  position rather than the last batch's, and while a pause holds its batches it answers ``wait`` rather than
  holding the request, until the loop has taken them all; ``{"type": "loop", "pending": <n>}`` → ``loop`` says the
  same without asking for a batch. A sidecar that understands ``pending`` says so in its welcome (``"pending":
  true``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

import numpy as np

VERSION = 1
FEED_DIR_ENV = "RINGFEED_FEED_DIR"
TRAININGJOB_ENV = "RINGFEED_TRAININGJOB"  # the sidecar's, for its metrics' labels
DEFAULT_FEED_DIR = "/var/run/ringfeed"
SOCKET_NAME = "feed.sock"
ALIGNMENT = 64  # each array starts on a cache line (and satisfies every numpy dtype's alignment)
MAX_MESSAGE_BYTES = 1 << 20


class FeedError(Exception):
    """The sidecar refused a request or the feed broke; the message says why."""


class FeedClosed(FeedError):
    """The other side closed the connection (a sidecar or trainer restart)."""


def feed_dir(directory: str | os.PathLike | None = None) -> Path:
    """`directory`, else this process's feed in the TrainingJob's feed directory (RINGFEED_FEED_DIR, else the
    default): its local rank's when the Pod runs several (torchrun's LOCAL_WORLD_SIZE and LOCAL_RANK)."""
    if directory is not None:
        return Path(directory)
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_ranks > 1 and "LOCAL_RANK" not in os.environ:
        raise FeedError(f"this Pod runs {local_ranks} ranks (LOCAL_WORLD_SIZE) but this process has no LOCAL_RANK: "
                        "start the trainer under torchrun (`torchrun train.py`), which starts one process per rank")
    return local_feed_dir(Path(os.environ.get(FEED_DIR_ENV) or DEFAULT_FEED_DIR),
                          int(os.environ.get("LOCAL_RANK", "0")), local_ranks)


def local_feed_dir(directory: Path, local_rank: int, local_ranks: int) -> Path:
    """The feed of local rank `local_rank` of `local_ranks` in the Pod's feed directory (the directory itself when
    the Pod runs one rank)."""
    return directory if local_ranks == 1 else directory / f"local-rank-{local_rank}"


def socket_path(directory: Path) -> Path:
    return directory / SOCKET_NAME


def send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message, separators=(",", ":")).encode())


def receive(sock: socket.socket) -> dict:
    data = sock.recv(MAX_MESSAGE_BYTES)
    if not data:
        raise FeedClosed("the other side of the feed closed the connection")
    return json.loads(data)


@dataclasses.dataclass(frozen=True)
class ArraySpec:
    """Where one array of a batch lies in its slot."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count * np.dtype(self.dtype).itemsize

    def to_json(self) -> list:
        return [self.name, self.dtype, list(self.shape), self.offset]

    @classmethod
    def from_json(cls, item: list) -> ArraySpec:
        name, dtype, shape, offset = item
        return cls(name, dtype, tuple(shape), offset)


def layout(arrays: list[tuple[str, str, tuple[int, ...]]]) -> tuple[list[ArraySpec], int]:
    """Place (name, dtype, shape) arrays one after the other, each aligned: their specs and the bytes needed."""
    specs, end = [], 0
    for name, dtype, shape in arrays:
        offset = -(-end // ALIGNMENT) * ALIGNMENT
        spec = ArraySpec(name, dtype, tuple(int(extent) for extent in shape), offset)
        specs.append(spec)
        end = offset + spec.nbytes
    return specs, end

