"""The trainer's side of the loader sidecar: batches as numpy views of shared memory, a resumable position."""

from __future__ import annotations

import atexit
import dataclasses
import mmap
import os
import queue
import socket
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ringfeed_client.batch import Blobs
from ringfeed_client.protocol import (
    VERSION,
    ArraySpec,
    FeedClosed,
    FeedError,
    feed_dir,
    receive,
    send,
    socket_path,
)

RETRY_S = 0.25
POLL_S = 0.05  # how often a prefetch thread looks whether its loop has left
EXIT_WAIT_S = 10.0  # how long an exiting interpreter waits for a prefetch thread's decode to end


class _Stopped(Exception):
    """A prefetch thread told to stop while it waited on the sidecar."""


@dataclasses.dataclass
class FeedStats:
    batches: int = 0
    samples: int = 0
    wait_s: float = 0.0
    """Time the training loop spent blocked on the next batch (the sidecar counts its requests' time, per rank, in
    its metrics: the same, unless a prefetch thread asks ahead of the loop)."""


class Feed:
    """Batches of this rank's share of a Split part, handed over by the loader sidecar of the Pod.

    Iterating runs the rest of the current epoch, then moves to the next one; ``epochs`` is how many the
    TrainingJob asked for. Each batch is ``(x, y)`` (``(x, y, uuids)`` with ``with_uuids``): numpy arrays that are
    views of the sidecar's shared memory, valid until the next batch is asked for (copy what you keep longer).
    x is uint8 (n, height, width, channels) for decoded images, the dataset's dtype and shape for tensors, or
    ``Blobs`` (the stored bytes; with ``decode.device: gpu`` each image's crop too, for ``ringfeed_client.torch.
    tensors`` to decode on the GPU); y is int64 (n,); uuids is uint8 (n, 16).

    ``state_dict()`` is the position after the last batch handed out: save it with the model and give it back to
    ``load_state_dict`` after a restart, before iterating, and the sidecar continues from there. A sidecar that
    restarts is reconnected to transparently (for up to ``reconnect_s``), from the same position.
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, with_uuids: bool = False,
                 reconnect_s: float = 300.0):
        self.directory: Path = feed_dir(directory)
        self.with_uuids = with_uuids
        self.reconnect_s = reconnect_s
        self.stats = FeedStats()
        self._sock: socket.socket | None = None
        self._welcome: dict = {}
        self._state: dict | None = None
        self._held: str | None = None  # the slot of the batch the trainer has now
        self._maps: dict[str, mmap.mmap] = {}
        self._done = False
        # While batches are prepared ahead: the position after the loop's batch, and the batches left after it.
        self._handed: dict | None = None
        self._left: int | None = None
        self._prefetching = False  # a loop over a prefetch is running
        self._ahead: _Prefetch | None = None  # its thread, which may have gone on past the loop's epoch
        self._lock = threading.Lock()  # one request at a time on the socket (a prefetch thread and the loop)

    # -- what the feed is ------------------------------------------------------------------------------------------

    def connect(self) -> Feed:
        """Connect now rather than at the first batch (waits up to ``reconnect_s`` for the sidecar)."""
        self._request(None)
        return self

    @property
    def epoch(self) -> int:
        """The epoch the next batch belongs to."""
        return self.state_dict()["epoch"]

    @property
    def epochs(self) -> int:
        """Epochs the TrainingJob asked for: train while ``feed.epoch < feed.epochs``."""
        return self._info("epochs")

    @property
    def rank(self) -> int:
        return self._info("rank")

    @property
    def world_size(self) -> int:
        return self._info("world_size")

    def _info(self, key: str):
        if not self._welcome:
            self.connect()
        return self._welcome[key]

    def __len__(self) -> int:
        """Batches left in the current epoch for this rank."""
        if self._left is not None:
            return self._left
        return self._request({"type": "length"})["batches"]

    # -- position ----------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The position after the last batch handed out (checkpoint it with the model)."""
        if self._handed is not None:
            return dict(self._handed)
        if self._state is None:
            self.connect()
        return dict(self._state)  # type: ignore[arg-type]

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state` (from ``state_dict``, usually of a checkpoint); the sidecar checks it is a state of
        this feed's split, part, seed and world."""
        self._refuse_while_prefetching()
        self._stop_prefetch()
        self._reposition(state)

    def _reposition(self, state: dict) -> None:
        self._state = dict(state)
        self._done = False
        self._drop()  # the next request says hello again, with this state

    # -- batches -----------------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple]:
        self._refuse_while_prefetching()
        self._stop_prefetch()
        while (step := self._next(counted=True)) is not None:
            batch, _ = step
            self._count(batch)
            yield batch

    def prefetch(self, prepare: Callable[[tuple], tuple], depth: int = 1) -> Iterator[tuple]:
        """The rest of the epoch as iterating gives it, each batch passed through `prepare` on a thread of its own,
        up to `depth` batches ahead of the loop: the trainer's decode of the next batches overlaps the step on this
        one. What `prepare` returns must stay valid once the next batch is asked for (the slot goes back then).

        ``state_dict()`` and ``len()`` stay those of the batch the loop has, and the sidecar keeps and reports that
        position too (a pause waits for the loop, a restart resumes there). A loop left early (or failing) gives
        the sidecar that position back, so the batches prepared ahead of it are served again.

        At the epoch's end the thread goes on into the next epoch, so its first batches are ready when the loop
        comes back: the next call with the same `prepare` (==) and `depth` continues from them. Anything else the
        feed is asked to do first (iterating it, another prefetch, ``load_state_dict``, ``close``) stops the thread
        and gives the sidecar the loop's position back. A Feed dropped without ``close`` ends its thread too."""
        if depth < 1:
            raise ValueError(f"depth is a number of batches, 1 or more, not {depth}")
        self._refuse_while_prefetching()
        ahead = self._ahead
        if ahead is None or not ahead.serves(prepare, depth):
            self._stop_prefetch()
            self._handed, self._left = self.state_dict(), len(self)
            ahead = self._ahead = _Prefetch(self, prepare, depth)
        self._prefetching, ended = True, False
        try:
            yield from ahead.epoch(self)
            ended = True
        finally:
            self._prefetching = False
            if not ended:
                self._stop_prefetch()

    def close(self) -> None:
        self._stop_prefetch()
        self._drop()
        self._maps.clear()

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _next(self, counted: bool, pending: Callable[[], int] | None = None,
              stop: threading.Event | None = None) -> tuple[tuple, dict] | None:
        """The epoch's next batch with the position after it; None at the epoch's end. `pending`: how many batches
        handed the loop has not taken yet, told with the request (a prefetch); `stop`: end with _Stopped when set."""
        while not self._done:
            if stop is not None and stop.is_set():
                raise _Stopped
            request: dict = {"type": "next", "release": self._held}
            if pending is not None:
                request["pending"] = pending()
            reply = self._request(request, counted, stop)
            self._held = None
            if reply["type"] == "wait":  # a pause holds the batches until the loop has taken those it has
                time.sleep(POLL_S)
                continue
            if reply["type"] == "done":
                self._done = True
                return None
            if reply["type"] == "epoch_end":
                return None
            self._held = reply["slot"]
            return self._batch(reply), dict(self._state)  # type: ignore[arg-type]
        return None

    def _stop_prefetch(self) -> None:
        """End the prefetch thread, if any, and forget what it prepared: the sidecar serves it again from the loop's
        position."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        ahead.stop()
        handed, self._handed, self._left = self._handed, None, None
        if self._state == handed:
            self._tell_loop(pending=0)
        else:
            self._tell_loop(pending=ahead.pending())  # the loop's position, should the trainer leave now
            self._reposition(handed)  # type: ignore[arg-type]

    def _refuse_while_prefetching(self) -> None:
        if self._prefetching:
            raise FeedError("this feed is being prefetched: leave that loop first")

    def _count(self, batch: tuple) -> None:
        self.stats.batches += 1
        self.stats.samples += len(batch[1])

    def _batch(self, reply: dict) -> tuple:
        buffer = self._map(reply["slot"], reply["size"])
        arrays = {}
        for spec in map(ArraySpec.from_json, reply["arrays"]):
            count = int(np.prod(spec.shape))
            arrays[spec.name] = np.frombuffer(buffer, dtype=spec.dtype, count=count,
                                              offset=spec.offset).reshape(spec.shape)
        x: np.ndarray | Blobs
        if "x" in arrays:
            x = arrays["x"]
        else:
            image = self._welcome.get("image")
            x = Blobs(arrays["data"], arrays["spans"], arrays.get("boxes"), tuple(image) if image else None)
        return (x, arrays["y"], arrays["uuids"]) if self.with_uuids else (x, arrays["y"])

    def _map(self, slot: str, size: int) -> mmap.mmap:
        """The slot's file mapped copy-on-write: reads see the sidecar's bytes in place; a trainer that writes into
        a batch changes its own copy of those pages only. Remapped when the sidecar grew the slot."""
        mapped = self._maps.get(slot)
        if mapped is None or len(mapped) < size:
            with open(self.directory / slot, "rb") as file:
                mapped = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_PRIVATE,
                                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self._maps[slot] = mapped  # views of an older mapping keep that mapping alive
        return mapped

    # -- the connection ------------------------------------------------------------------------------------------

    def _request(self, message: dict | None, counted: bool = True, stop: threading.Event | None = None) -> dict:
        """Send `message` (None: only connect) and return the reply; reconnects (saying where it stands) when the
        sidecar went away, waiting for it up to ``reconnect_s``. `counted`: the time is the loop's wait; `stop`:
        give up with _Stopped once set (a prefetch ending)."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.reconnect_s
        try:
            with self._lock:
                while True:
                    try:
                        sock = self._sock or self._hello()
                        if message is None:
                            return self._welcome
                        send(sock, message)
                        reply = receive(sock)
                        break
                    except (FeedClosed, ConnectionError, FileNotFoundError) as error:
                        self._drop()
                        if stop is not None and stop.is_set():
                            raise _Stopped from None
                        if time.monotonic() > deadline:
                            raise FeedError(f"no loader sidecar answered on {socket_path(self.directory)} for "
                                            f"{self.reconnect_s:.0f} s: {error}") from None
                        time.sleep(RETRY_S)
        finally:
            if counted:
                self.stats.wait_s += time.perf_counter() - started
        if reply["type"] == "error":
            raise FeedError(reply["message"])
        if "state" in reply:
            self._state = reply["state"]
        return reply

    def _hello(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.connect(str(socket_path(self.directory)))
            send(sock, {"type": "hello", "version": VERSION, "state": self._state})
            welcome = receive(sock)
        except BaseException:
            sock.close()
            raise
        if welcome["type"] == "error":
            sock.close()
            raise FeedError(welcome["message"])
        self._sock, self._welcome, self._state = sock, welcome, welcome["state"]
        self._held = None  # a new sidecar has new slots; the old mapping stays valid while views of it live
        self._done = welcome.get("done", False)
        return sock

    def _tell_loop(self, pending: int) -> None:
        """Where the loop is: all but the last `pending` batches handed taken, so the sidecar places it there. Only
        on a live connection (a sidecar reached anew learns it from the hello), so a loop that ends never waits."""
        if self._sock is None or not self._welcome.get("pending"):
            return
        try:
            with self._lock:
                send(self._sock, {"type": "loop", "pending": pending})
                receive(self._sock)
        except (FeedClosed, ConnectionError):
            self._drop()

    def _interrupt(self) -> None:
        """End a request in flight on another thread (its socket read fails at once); the next one reconnects."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


@dataclasses.dataclass(frozen=True)
class _EpochEnd:
    """The end of an epoch in a prefetch's queue: the position after it and the batches of the next one."""
    state: dict
    batches: int


class _Prefetch:
    """A thread that asks the feed for batches and prepares them, up to `depth` ahead of the loop, epoch after
    epoch: an epoch's end is an item of its queue, and the thread goes on (`Feed.prefetch`). It holds the feed only
    while it asks for a batch, so a feed its trainer dropped goes (its connection with it) and the thread ends."""

    def __init__(self, feed: Feed, prepare: Callable[[tuple], tuple], depth: int):
        self.feed = weakref.ref(feed)
        self.prepare, self.depth = prepare, depth
        self.ready: queue.Queue = queue.Queue(maxsize=depth)
        self.stopping = threading.Event()
        self.fetched = self.taken = 0
        self.finished = False  # the feed is done: the last items are in the queue or on their way
        self.worker = threading.Thread(target=self._work, name="ringfeed-prefetch", daemon=True)
        _RUNNING.add(self)
        # Exit handlers run last registered first: registered again now, after torch's, so this one runs before them.
        atexit.unregister(_stop_running)
        atexit.register(_stop_running)
        self.worker.start()

    def serves(self, prepare: Callable[[tuple], tuple], depth: int) -> bool:
        """Whether a loop with `prepare` and `depth` continues with this thread's queue."""
        return prepare == self.prepare and depth == self.depth and (not self.finished or not self.ready.empty())

    def pending(self) -> int:
        """Batches handed to the feed that the loop has not taken yet."""
        return self.fetched - self.taken

    def epoch(self, feed: Feed) -> Iterator[tuple]:
        """The loop's batches up to its epoch's end; the feed's position follows them."""
        while True:
            item = self._take(feed)
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, _EpochEnd):
                feed._handed, feed._left = item.state, item.batches
                return
            batch, feed._handed = item
            self.taken += 1
            feed._left = (feed._left or 0) - 1
            feed._count(batch)
            yield batch

    def stop(self, wait_s: float = float("inf")) -> None:
        """Stop the thread and wait for it to end (up to `wait_s`)."""
        deadline = time.monotonic() + wait_s
        self.stopping.set()
        self.worker.join(POLL_S)  # what it asks the sidecar for comes within this, unless a pause holds it
        while self.worker.is_alive() and time.monotonic() < deadline:
            feed = self.feed()
            if feed is not None and feed._lock.locked():
                feed._interrupt()  # a request the sidecar holds (a pause) or retries (a restart) ends now
            del feed
            self.worker.join(POLL_S)

    def _take(self, feed: Feed):
        started = time.perf_counter()
        while True:
            if self.stopping.is_set():
                raise FeedError("the feed was closed while its loop decoded ahead")
            try:
                item = self.ready.get(timeout=POLL_S)
                break
            except queue.Empty:
                pass
        feed.stats.wait_s += time.perf_counter() - started
        return item

    def _work(self) -> None:
        try:
            while self._step():
                pass
        except _Stopped:
            pass
        except BaseException as error:  # the loop raises it
            self._offer(error)

    def _step(self) -> bool:
        """One batch, or an epoch's end, into the queue: False once there is nothing more to do."""
        feed = self.feed()
        if feed is None:
            return False
        step = feed._next(counted=False, pending=self.pending, stop=self.stopping)
        item: object
        if step is not None:
            self.fetched += 1
            item = (self.prepare(step[0]), step[1])
        else:
            batches = 0 if feed._done else feed._request({"type": "length"}, False, self.stopping)["batches"]
            item = _EpochEnd(dict(feed._state), batches)  # type: ignore[arg-type]
            self.finished = feed._done
        del feed, step  # waiting for room in the queue, the thread holds no feed
        if not self._offer(item):
            return False
        if self.finished:
            self._follow_loop_to_the_end()
        return not self.finished

    def _offer(self, item) -> bool:
        while not self.stopping.is_set() and self.feed() is not None:
            try:
                self.ready.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                pass
        return False

    def _follow_loop_to_the_end(self) -> None:
        """After the last epoch no request tells the sidecar where the loop is: this does, once it has taken the
        last batches (the sidecar keeps the loop's position: what a pause waits for, where a restart resumes)."""
        while self.pending() and not self.stopping.is_set():
            time.sleep(POLL_S)
        feed = self.feed()
        if feed is not None and not self.stopping.is_set():
            feed._tell_loop(pending=0)


# Threads still preparing when the interpreter exits (a trainer that trained fewer epochs than its feed has, without
# closing it) are stopped first, so that none is inside a decode on the GPU while torch tears CUDA down.
_RUNNING: weakref.WeakSet[_Prefetch] = weakref.WeakSet()


def _stop_running() -> None:
    for ahead in list(_RUNNING):
        ahead.stop(wait_s=EXIT_WAIT_S)
