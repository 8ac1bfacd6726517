"""The loader sidecar: one rank's share of a split part, read by the native loader and handed to the trainer of the
same Pod through shared memory (``ringfeed_client.protocol`` describes the exchange).

A producer thread runs the loader epoch after epoch and writes each batch once into a free slot (the slot pool,
prefetch + 1 deep, is the back-pressure); the serving loop answers the trainer's requests on the Unix socket.

Exactly once per epoch, across restarts:

- each batch carries the loader position after it; the trainer's ``Feed.state_dict()`` is the position after the
  last batch it received, and its ``hello`` carries the position it resumes from (a checkpoint's, or after a
  sidecar restart its own): a position other than the next batch's restarts the producer there;
- a trainer that goes away (restart) gives back the batch it held: it is the next one handed out;
- the position after the last *released* batch is kept in ``state.json`` in the feed directory (it outlives the
  sidecar's container), where a restarted sidecar starts prefetching from;
- a trainer that decodes ahead of its loop (``Feed.prefetch``) says with each request how many of the batches it was
  handed its loop has not taken yet (``pending``): the loop's position is the one kept, reported and given back on a
  restart, and a pause holds it "done" only once its loop has taken every batch.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import select
import socket
import threading
import time
from pathlib import Path

from ringfeed._native import LoaderMetrics
from ringfeed.errors import RingfeedError, RingTimeout, RingUnavailable
from ringfeed.lineage import epoch_digest
from ringfeed.loader import Loader, LoaderSource
from ringfeed.serve.slots import Slots
from ringfeed_client.batch import Blobs
from ringfeed_client.protocol import VERSION, ArraySpec, FeedClosed, receive, send, socket_path

log = logging.getLogger("ringfeed.serve")

STATE_FILE = "state.json"
POLL_S = 0.2  # how often a blocked producer looks whether it should stop
REPORTED_EPOCHS = 64  # epochs whose lineage digest /status carries (ringfeed.lineage)
MAX_PENDING = 1024  # batches a trainer may have taken ahead of its loop that the sidecar can still place
# Failures a restart of the sidecar may cure (the kubelet restarts it; the trainer's Feed reconnects): the producer
# ends the process on these. Any other error is the trainer's to see.
RESTARTABLE = (RingUnavailable, RingTimeout)


@dataclasses.dataclass
class Batch:
    slot: str
    size: int
    arrays: list[ArraySpec]
    samples: int
    epoch: int
    state_before: dict
    state_after: dict


@dataclasses.dataclass
class EpochEnd:
    state_after: dict


@dataclasses.dataclass
class Done:
    state_after: dict


@dataclasses.dataclass
class Failed:
    message: str


Item = Batch | EpochEnd | Done | Failed


def same_position(a: dict | None, b: dict | None) -> bool:
    return a is not None and b is not None and (a["epoch"], a["offset"], a["skip"]) == (b["epoch"], b["offset"],
                                                                                          b["skip"])


class Producer(threading.Thread):
    """Runs a loader from `start` up to `epochs` epochs and queues its batches, written into slots."""

    def __init__(self, source: LoaderSource, loader: Loader, slots: Slots, epochs: int, start: dict,
                 on_restartable_failure):
        super().__init__(name="ringfeed-producer", daemon=True)
        self.source, self.loader, self.slots, self.epochs = source, loader, slots, epochs
        self.loader.load_state_dict(start)
        self.items: collections.deque[Item] = collections.deque()
        self.ready = threading.Condition()
        self.stopping = threading.Event()
        self.connected = threading.Event()
        self._on_restartable_failure = on_restartable_failure

    def run(self) -> None:
        try:
            self.loader.open()
            self.connected.set()
            self._produce()
        except RESTARTABLE as error:
            self._on_restartable_failure(error)
        except Exception as error:  # the trainer must hear of it rather than wait forever
            message = str(error) if isinstance(error, RingfeedError) else f"{type(error).__name__}: {error}"
            log.exception("loader failed: %s", message)
            self._put(Failed(message))
        finally:
            self.loader.close()

    def _produce(self) -> None:
        loader = self.loader
        while loader.epoch < self.epochs:
            epoch = loader.epoch
            before = loader.state_dict()
            for x, y, uuids in loader:
                slot = None
                while slot is None:
                    if self.stopping.is_set():
                        return
                    slot = self.slots.take(POLL_S)
                if isinstance(x, Blobs):
                    arrays = [("data", x.data), ("spans", x.spans)]
                    if x.boxes is not None:
                        arrays.append(("boxes", x.boxes))
                else:
                    arrays = [("x", x)]
                specs, size = self.slots.write(slot, [*arrays, ("y", y), ("uuids", uuids)])
                after = loader.state_dict()
                self._put(Batch(slot, size, specs, len(y), epoch, before, after))
                before = after
            self._put(EpochEnd(loader.state_dict()))
        self._put(Done(loader.state_dict()))

    def _put(self, item: Item) -> None:
        with self.ready:
            self.items.append(item)
            self.ready.notify_all()

    def next_item(self) -> Item:
        """The next item, waiting for the producer (a Done or Failed item stays: it is every later answer too)."""
        with self.ready:
            while not self.items:
                self.ready.wait()
            item = self.items[0]
            if not isinstance(item, Done | Failed):
                self.items.popleft()
            return item

    def give_back(self, batch: Batch) -> None:
        """A handed-out batch whose trainer went away: it is handed out next."""
        with self.ready:
            self.items.appendleft(batch)

    def stop(self) -> None:
        """Stop producing and free every slot the queued batches hold."""
        self.stopping.set()
        self.join()
        for item in self.items:
            if isinstance(item, Batch):
                self.slots.give_back(item.slot)
        self.items.clear()


@dataclasses.dataclass
class FeedStatus:
    """What the sidecar reports (``/status``, metrics; the operator's TrainingJob status is made from it)."""

    rank: int
    world_size: int
    epochs: int
    samples_per_epoch: int
    epoch: int = 0
    offset: int = 0
    batches_served: int = 0
    samples_served: int = 0
    bytes_served: int = 0
    trainer_wait_s: float = 0.0
    trainer_asked: int = 0
    """Batches the trainer asked for; ``trainer_found_ready`` of them were written and waiting."""
    trainer_found_ready: int = 0
    trainer_connected: bool = False
    trainer_held: bool = False
    """The trainer asks for a batch that a pause holds back: it is done with every batch it was handed."""
    done: bool = False
    error: str | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)


class FeedServer:
    """Serves one trainer at a time on the feed directory's socket (a new connection replaces the previous one)."""

    def __init__(self, source: LoaderSource, loader: Loader, directory: Path, epochs: int,
                 kept_positions: Path | None = None):
        self.source, self.loader, self.directory, self.epochs = source, loader, directory, epochs
        self.slots = Slots(directory, loader.options.prefetch + 1)
        self.paused = threading.Event()
        self.pause_target: tuple[int, int] | None = None  # (epoch, offset) a resize's ranks stop at
        self._handing = threading.Lock()  # held while a batch is handed out: a pause waits for it
        self.position = (self._saved_position() or self._kept_position(kept_positions) or loader.state_dict())
        self.status = FeedStatus(rank=loader.options.rank, world_size=loader.options.world_size, epochs=epochs,
                                 samples_per_epoch=loader.plan.rank_samples(0))
        self._record_position(self.position)
        self._counted = {"corrupt": 0, "missing": 0, "retries": 0}  # by the producers before the current one
        self.metrics = LoaderMetrics()  # the native reader's, across the producers' loaders
        self.producer = self._start_producer(self.position)
        self.held: Batch | None = None
        self._digests: dict[int, str] = {}  # lineage digests of finished epochs, computed once
        # The trainer's loop: batches handed that it has not taken yet (as its last request said), and the position
        # before each of the last batches handed, to place it.
        self.pending = 0
        self.loop_position = self.position
        self._handed_before: collections.deque[dict] = collections.deque(maxlen=MAX_PENDING)

    # -- position ----------------------------------------------------------------------------------------------------

    def _saved_position(self) -> dict | None:
        path = self.directory / STATE_FILE
        try:
            state = json.loads(path.read_text())
            self.loader.load_state_dict(state)  # checks it is this feed's
            return state
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, RingfeedError) as error:
            log.warning("ignoring %s: %s", path, error)
            return None

    def _kept_position(self, path: Path | None) -> dict | None:
        """This rank's position kept by the operator over a suspension (a JSON object of states by rank, from the
        Pod's annotation); None when there is none."""
        if path is None or not path.exists() or not path.read_text().strip():
            return None
        try:
            state = json.loads(path.read_text()).get(str(self.loader.options.rank))
            if state is not None:
                self.loader.load_state_dict(state)
            return state
        except (ValueError, KeyError, AttributeError, RingfeedError) as error:
            log.warning("ignoring the kept positions in %s: %s", path, error)
            return None

    def pause(self, at: tuple[int, int] | None = None) -> dict:
        """Hand out no more batches (the TrainingJob is being suspended or resized); → the position after the last
        one. ``at`` (epoch, offset): go on handing out batches until the position reaches it, then stop (the ranks
        of a resize meet at one global position). A position already past it stays where it is."""
        with self._handing:
            self.pause_target = at
            if at is None:
                self.paused.set()
            else:
                self.paused.clear()
            return dict(self.position)

    def resume(self) -> None:
        """Hand out batches again after a pause (a suspension that was called off)."""
        with self._handing:
            self.pause_target = None
            self.paused.clear()

    def holding(self) -> bool:
        """Whether it hands out nothing now: paused, or at (or past) the position it was told to stop at."""
        target = self.pause_target
        return self.paused.is_set() or (target is not None
                                        and (self.position["epoch"], self.position["offset"]) >= tuple(target))

    def _save_position(self, state: dict) -> None:
        path = self.directory / STATE_FILE
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(state))
        os.replace(temporary, path)

    def _record_position(self, state: dict) -> None:
        self.status.epoch, self.status.offset = state["epoch"], state["offset"]
        self.status.done = state["epoch"] >= self.epochs

    def samples_delivered(self) -> int:
        """Samples of this rank handed out since the first epoch began, from the position (survives restarts)."""
        return self.loader.plan.samples_delivered(self.status.epoch, self.status.offset)

    def epoch_digests(self) -> dict[str, str]:
        """The lineage digest (ringfeed.lineage) of each of the last REPORTED_EPOCHS epochs this rank has finished;
        the operator polls far more often than that many epochs pass."""
        finished = min(self.status.epoch, self.epochs)
        reported = range(max(0, finished - REPORTED_EPOCHS), finished)
        for epoch in reported:
            if epoch not in self._digests:
                self._digests[epoch] = epoch_digest(self.source.uuids, self.loader.plan, epoch)
        return {str(epoch): self._digests[epoch] for epoch in reported}

    def corrupt(self) -> int:
        return self._counted["corrupt"] + self.producer.loader.stats.corrupt

    def missing(self) -> int:
        return self._counted["missing"] + self.producer.loader.stats.missing

    def retries(self) -> int:
        return self._counted["retries"] + self.producer.loader.stats.retries

    def _start_producer(self, start: dict) -> Producer:
        loader = Loader.from_source(self.source, options=self.loader.options, metrics=self.metrics,
                                    session=self.loader.shared_session)
        producer = Producer(self.source, loader, self.slots, self.epochs, start, self._restart_sidecar)
        producer.start()
        return producer

    def _reposition(self, state: dict) -> None:
        self.producer.stop()
        self._counted = {"corrupt": self.corrupt(), "missing": self.missing(), "retries": self.retries()}
        self.position = self.loop_position = state
        self._handed_before.clear()
        self.producer = self._start_producer(state)

    @staticmethod
    def _restart_sidecar(error: BaseException) -> None:
        log.error("the ring failed: %s; exiting so that the kubelet restarts the sidecar", error)
        logging.shutdown()
        os._exit(3)

    # -- serving -----------------------------------------------------------------------------------------------------

    def serve_forever(self, ready: threading.Event | None = None) -> None:
        path = socket_path(self.directory)
        path.unlink(missing_ok=True)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
            listener.bind(str(path))
            # The trainer may run as another user, in the feed directory's group (a Pod's fsGroup): not others.
            os.chmod(path, 0o660)
            listener.listen(1)
            if ready is not None:
                ready.set()
            while True:
                connection, _ = listener.accept()
                with connection:
                    self._serve(connection)

    def _serve(self, connection: socket.socket) -> None:
        self.status.trainer_connected = True
        try:
            while True:
                request = receive(connection)
                started = time.perf_counter()
                reply = self._answer(request, connection)
                send(connection, reply)
                if request["type"] == "next":
                    self.status.trainer_wait_s += time.perf_counter() - started
        except (FeedClosed, ConnectionError):
            pass
        finally:
            self.status.trainer_connected = False
            if self.held is not None:  # the trainer went away with it: hand it out again
                self.producer.give_back(self.held)
                self.position = self.held.state_before
                self.held = None
            if self.pending and not same_position(self.loop_position, self.position):
                self._reposition(self.loop_position)  # and the batches its loop had not taken
            self.pending, self.loop_position = 0, self.position
            self._record_position(self.position)

    def _answer(self, request: dict, connection: socket.socket) -> dict:
        kind = request.get("type")
        try:
            if kind == "hello":
                return self._hello(request)
            if kind == "next":
                return self._next(request.get("release"), request.get("pending"), connection)
            if kind == "loop":
                with self._handing:
                    self._place_loop(int(request["pending"]))
                return {"type": "loop"}
            if kind == "length":
                return {"type": "length", "batches": self._batches_left()}
        except RingfeedError as error:
            return {"type": "error", "message": str(error)}
        return {"type": "error", "message": f"unknown request {kind!r}"}

    def _hello(self, request: dict) -> dict:
        if request.get("version") != VERSION:
            return {"type": "error", "message": f"feed protocol {request.get('version')} is not {VERSION}: use the "
                                                f"ringfeed-client of the sidecar's release"}
        state = request.get("state")
        if state is not None:
            self.loader.load_state_dict(state)  # raises RingfeedError when the state is another feed's
            if not same_position(state, self.position):
                self._reposition(state)
        options = self.loader.options
        welcome = {"type": "welcome", "state": self.position, "epochs": self.epochs, "rank": options.rank,
                   "world_size": options.world_size, "split": self.source.split, "part": self.source.part,
                   "done": self.position["epoch"] >= self.epochs}
        if (decode := options.trainer_decode) is not None:
            welcome["image"] = [decode.height, decode.width, decode.channels]  # the trainer decodes to this shape
        welcome["pending"] = True  # it places a trainer's loop from `pending` (a sidecar of 0.1.0 does not)
        return welcome

    def _next(self, release: str | None, pending: int | None, connection: socket.socket) -> dict:
        """`pending`: how many of the batches handed to this trainer its loop has not taken yet (None: a trainer
        whose loop takes each batch as it is handed). A trainer that goes away while a pause holds its request is
        let go at once (FeedClosed), so the next one is answered."""
        with self._handing:
            if self.held is not None and self.held.slot == release:
                self.slots.give_back(self.held.slot)
            self.held = None  # a release of another sidecar's slot (before a restart) is nothing to free here
            self._place_loop(pending or 0)
        while True:
            with self._handing:
                if not self.holding():
                    self.status.trainer_held = False
                    return self._hand_out(ahead=pending is not None)
                if pending:  # its loop still trains on batches it was handed: not done with them yet
                    self.status.trainer_held = False
                    return {"type": "wait"}
                self.status.trainer_held = True
            time.sleep(POLL_S)  # paused: the trainer waits until its Pod is stopped
            if _hung_up(connection):
                raise FeedClosed("the trainer went away while its request was held")

    def _place_loop(self, pending: int) -> None:
        """The trainer's loop has taken all but the last `pending` batches handed: its position is kept (a
        restarted sidecar starts there) and reported."""
        pending = min(pending, len(self._handed_before))
        position = self._handed_before[-pending] if pending else self.position
        self._save_position(position)
        self.pending, self.loop_position = pending, position
        self._record_position(position)

    def _hand_out(self, ahead: bool) -> dict:
        """The next item; `ahead`: the trainer takes batches ahead of its loop, whose position stays."""
        self.status.trainer_asked += 1
        self.status.trainer_found_ready += bool(self.producer.items)
        item = self.producer.next_item()
        if isinstance(item, Failed):
            self.status.error = item.message
            return {"type": "error", "message": item.message}
        self.position = item.state_after
        if not ahead:
            self.loop_position = self.position
            self._record_position(self.position)
        if isinstance(item, Done):
            return {"type": "done", "state": self.position}
        if isinstance(item, EpochEnd):
            return {"type": "epoch_end", "state": self.position}
        self.held = item
        self._handed_before.append(item.state_before)
        self.status.batches_served += 1
        self.status.samples_served += item.samples
        self.status.bytes_served += item.size
        return {"type": "batch", "slot": item.slot, "size": item.size, "epoch": item.epoch,
                "arrays": [spec.to_json() for spec in item.arrays], "state": self.position}

    def _batches_left(self) -> int:
        plan = self.loader.plan
        if self.position["epoch"] >= self.epochs:
            return 0
        return plan.batch_count(self.position["offset"])


def _hung_up(connection: socket.socket) -> bool:
    """Whether the trainer closed its end (a read would find the end of the stream); a request of it waiting to be
    read is no hang-up."""
    if not select.select([connection], [], [], 0)[0]:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def wait_for_socket(directory: Path, timeout_s: float = 30) -> None:
    """Until the feed's socket exists (tests and benchmarks that start a server in another process)."""
    deadline = time.monotonic() + timeout_s
    while not socket_path(directory).exists():
        if time.monotonic() > deadline:
            raise RingfeedError(f"no feed socket in {directory} after {timeout_s:.0f} s")
        time.sleep(0.05)

