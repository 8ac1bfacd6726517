"""The loader: batches of a split part, read by the native fetcher, prefetched, in a deterministic epoch order.

Reads go through ``ringfeed._native.Fetcher`` (Rust, scylla driver): every sample of a batch is a single-partition
read of ``data_by_uuid``, many in flight, token-aware, at consistency ONE by default; images are decoded and resized
on a native thread pool; each batch arrives as one contiguous buffer that numpy (and torch) use without a copy.
The GIL is released while Python waits for a batch.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import logging
import os
import time
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ringfeed._native import LoaderMetrics
from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError, SampleNotFound, ring_error, ring_failures
from ringfeed.loader.options import TENSOR, Decode, LoaderOptions
from ringfeed.loader.plan import EpochPlan
from ringfeed.schema import Encoding
from ringfeed_client.batch import Blobs
from ringfeed_client.cpus import cpu_count

if TYPE_CHECKING:
    from ringfeed._native import Fetcher, WindowStats  # WindowStats: a TypedDict of the stub only

log = logging.getLogger("ringfeed.loader")

# UUIDs of skipped samples kept for the report; counts are always exact.
REPORTED_UUIDS = 100
STATE_VERSION = 1


@dataclasses.dataclass
class LoaderStats:
    batches: int = 0
    samples: int = 0
    bytes: int = 0
    missing: int = 0
    corrupt: int = 0
    retries: int = 0
    """Read requests retried after a transient failure, counted as they happen (also those of a batch that then
    failed)."""
    wait_s: float = 0.0
    buffers_allocated: int = 0
    """Batch buffers allocated rather than reused from the pool of released ones."""
    max_batches_in_flight: int = 0
    """The most batches submitted and not yet handed over at once (the reader's window decides, see
    ``LoaderOptions.memory_bytes``)."""
    missing_uuids: list[str] = dataclasses.field(default_factory=list)
    corrupt_samples: list[tuple[str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class LoaderSource:
    """Everything a loader process needs, picklable: where to read, what to read, and the split's identity."""

    address: ClusterAddress
    keyspace: str
    uuids: np.ndarray
    split: str
    split_id: str
    content_hash: str
    part: str
    encoding: Encoding
    sample_bytes: int = 0
    """Mean stored bytes per sample of the dataset (0: unknown); sizes the first read requests."""
    dataset: str = ""
    split_name: str = ""
    """The Dataset's and the Split's names (``split`` above names the version too, for messages)."""

    @classmethod
    def from_split(cls, dataset: str, split: str, part: str, *, store=None, address: ClusterAddress | None = None,
                   version: int | None = None) -> LoaderSource:
        from ringfeed.splits import load_split
        from ringfeed.store import Store

        own_store = store is None
        store = store or Store(address)
        try:
            info = store.info(dataset)
            schema = info.schema
            stored = load_split(store, dataset, split, version)
            return cls(address=store.address, keyspace=schema.keyspace, uuids=stored.uuids(part),
                       split=f"{dataset}/{split} v{stored.version}", dataset=dataset, split_name=split,
                       split_id=str(stored.split_id),
                       content_hash=stored.content_hash, part=part,
                       encoding=schema.encoding,
                       sample_bytes=info.bytes // info.samples if info.samples else 0)
        finally:
            if own_store:
                store.close()


# A TLS connection's records are encrypted by one event-loop thread of the node and decrypted by the loader's thread
# that polls it (the native session runs one per connection to a node): on the 16-core device machine 2 connections
# carried 85k rows/s of 20 kB over TLS, 4 carried 100-111k, 8 carried 108-113k; plain text 117-133k.
TLS_CONNECTIONS_PER_NODE = 8


def connections_per_node(window_bytes: int, tls: bool = False) -> int:
    """Connections to each node for a window of `window_bytes`: one TCP connection carries at most its receive
    buffer per round trip (the kernel's ``tcp_rmem`` maximum, 6 MiB by default), so a long link needs several; with
    `tls` at least TLS_CONNECTIONS_PER_NODE, so that the cipher work spreads over that many cores on either side; at
    most 8 (each costs the node a little)."""
    try:
        receive_buffer = int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    except (OSError, IndexError, ValueError):
        receive_buffer = 6 * 1024 * 1024  # Linux's default maximum
    for_the_link = -(-window_bytes // receive_buffer)
    return min(8, max(for_the_link, TLS_CONNECTIONS_PER_NODE if tls else 1))


@dataclasses.dataclass
class _NextEpoch:
    """The next epoch's first batches, submitted while the current one ended, for the fetcher that reads them."""

    epoch: int
    fetcher: Fetcher
    batches: list[tuple[int, int, np.ndarray]]
    """(ticket, batch number, sample indices), in order."""


class Loader:
    """Iterates over batches ``(x, y)`` (``(x, y, uuids)`` with ``with_uuids``) of one part of a stored split:
    x is uint8 (n, height, width, channels) with a ``Decode``, the schema's dtype and shape with ``decode='tensor'``,
    else ``Blobs`` (the stored bytes); y is int64 (n,); uuids is uint8 (n, 16).

    Each ``iter()`` runs the current epoch from the current offset, then moves to the next epoch; ``set_epoch``,
    ``state_dict`` and ``load_state_dict`` give explicit control (see ``EpochPlan`` for the epoch semantics).
    Nothing is connected or started before the first batch is asked for.
    """

    def __init__(self, dataset: str, split: str, part: str = "train", *, options: LoaderOptions | None = None,
                 store=None, address: ClusterAddress | None = None, split_version: int | None = None, **fields):
        """Reads `part` of `dataset`'s `split` with `options`, or with ``LoaderOptions`` fields given as keywords
        (``batch_size=64, seed=42``; both: the keywords change those fields of `options`)."""
        options = LoaderOptions.build(options, **fields)  # validated before anything is read
        source = LoaderSource.from_split(dataset, split, part, store=store, address=address, version=split_version)
        self._setup(source, options)

    @classmethod
    def from_source(cls, source: LoaderSource, *, options: LoaderOptions | None = None,
                    metrics: LoaderMetrics | None = None, session=None, **fields) -> Loader:
        """A loader of `source`; `metrics`: the native measurements to add to (the sidecar keeps one across the
        loaders it starts), else its own; `session`: a native session (``ringfeed._native.Session``) to read
        through, shared with other loaders of this process (its connections and decoder threads; the sidecar's
        feeds share one), which stays open when this loader closes; else the loader opens and closes its own."""
        loader = cls.__new__(cls)
        loader._setup(source, LoaderOptions.build(options, **fields), metrics, session)
        return loader

    def _setup(self, source: LoaderSource, options: LoaderOptions, metrics: LoaderMetrics | None = None,
               session=None) -> None:
        kind = source.encoding.kind
        if options.decode == TENSOR and kind != "raw":
            raise RingfeedError(f"decode='tensor' needs a dataset with the raw encoding; {source.split} is {kind}")
        if isinstance(options.decode, Decode) and kind == "raw":
            raise RingfeedError(f"{source.split} holds raw tensors, not images: use decode='tensor'")
        if isinstance(options.decode, Decode):
            options = dataclasses.replace(options, decode=options.decode.on_device(kind))
        self.source = source
        self.options = options
        self.plan = EpochPlan(len(source.uuids), options)
        self.stats = LoaderStats()
        self.metrics = metrics or LoaderMetrics()  # fetch latency, decode time, stage readiness (ringfeed.metrics)
        self.epoch = 0
        self.offset = 0
        self._skip: frozenset[int] = frozenset()  # batches (counted from offset) delivered ahead, out of order
        self._tickets = itertools.count()
        self.shared_session = session
        self._shared_session_pid = os.getpid()
        self._own_session = None
        self._fetcher = None
        self._fetcher_pid = None
        self._counted_before_fetcher = (0, 0)  # retries, buffers allocated: a fetcher counts its own from zero
        self._next_epoch: _NextEpoch | None = None

    def __getstate__(self) -> dict:
        """A loader pickled into another process (a DataLoader worker started by spawn) connects and measures there
        on its own: the native reader and counters stay in this one."""
        return {**self.__dict__, "metrics": None, "_fetcher": None, "_fetcher_pid": None, "_next_epoch": None,
                "shared_session": None, "_own_session": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.metrics = LoaderMetrics()

    def window_stats(self) -> WindowStats | None:
        """The native reader's adaptive window (bytes in flight, round trips); None before this process read."""
        return self._fetcher.window() if self._fetcher is not None else None

    def open(self) -> Loader:
        """Connect now rather than at the first batch (to fail early, or to keep set-up out of a measurement)."""
        self._open_fetcher()
        return self

    def close(self) -> None:
        """Release this process's connection, I/O and decoder threads now (waiting for the threads to stop) instead
        of when the loader is garbage-collected; batches in flight are abandoned. A later iteration connects again."""
        if self._fetcher is not None and self._fetcher_pid == os.getpid():
            self._fetcher.close()
            if self._own_session is not None:
                self._own_session.close()
        # Ones inherited by a forked worker are dropped as they are: their threads are the parent's.
        self._fetcher = self._own_session = None
        self._next_epoch = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- epochs and resume ---------------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches this loader yields in the rest of the current epoch."""
        return len(self._batch_numbers())

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning at the next iteration."""
        if epoch < 0:
            raise RingfeedError(f"epoch must be zero or more, got {epoch}")
        self.epoch, self.offset, self._skip = epoch, 0, frozenset()

    def state_dict(self) -> dict:
        """Where this loader stands: resume with ``load_state_dict`` (any world size when nothing was delivered
        out of order)."""
        if self.options.shard[1] > 1:
            raise RingfeedError("a sharded loader does not keep a position; ringfeed.torch.RingfeedDataLoader keeps it")
        return self._state()

    def _state(self) -> dict:
        return {"version": STATE_VERSION, "epoch": self.epoch, "offset": self.offset, "skip": sorted(self._skip),
                "split_id": self.source.split_id, "part": self.source.part, "samples": self.plan.samples,
                "seed": self.options.seed, "shuffle": self.options.shuffle, "remainder": self.options.remainder,
                "batch_size": self.options.batch_size, "world_size": self.options.world_size}

    def load_state_dict(self, state: dict) -> None:
        if state.get("version") != STATE_VERSION:
            raise RingfeedError(f"loader state version {state.get('version')!r} is not {STATE_VERSION}")
        mine = self._state()
        for key in ("split_id", "part", "samples", "seed", "shuffle", "remainder"):
            if state[key] != mine[key]:
                raise RingfeedError(f"loader state is for another run: {key} is {state[key]!r}, "
                                    f"this loader has {mine[key]!r}")
        if state["skip"] and (state["world_size"], state["batch_size"]) != (mine["world_size"], mine["batch_size"]):
            raise RingfeedError("loader state has batches delivered out of order; resume it with the same "
                                "world_size and batch_size")
        self.plan.check_offset(state["offset"])
        self.epoch, self.offset, self._skip = state["epoch"], state["offset"], frozenset(state["skip"])

    def _batch_numbers(self, offset: int | None = None, skip: frozenset[int] | None = None) -> list[int]:
        """Batches (counted from the offset) this shard yields in the rest of the epoch (from this loader's position,
        or from `offset` skipping `skip`)."""
        offset = self.offset if offset is None else offset
        skip = self._skip if skip is None else skip
        return self.plan.shard_batch_numbers(offset, skip, self.options.shard)

    def _adopt_next_epoch(self, fetcher: Fetcher, epoch: int, start: int) -> list[tuple[int, int, np.ndarray]]:
        """The batches submitted ahead for this epoch, if the position is still where they were meant to start; ones
        no longer wanted (the position moved: set_epoch, load_state_dict) are taken and dropped."""
        next_epoch, self._next_epoch = self._next_epoch, None
        if next_epoch is None or next_epoch.fetcher is not fetcher:
            return []  # none, or their fetcher is closed
        if (next_epoch.epoch, start, self._skip) == (epoch, 0, frozenset()):
            return next_epoch.batches
        for ticket, _, _ in next_epoch.batches:
            with contextlib.suppress(*ring_failures()):
                fetcher.take(ticket)
        return []

    # -- iteration -----------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple]:
        epoch, start = self.epoch, self.offset
        batches = self.plan.batches(epoch, start)
        numbers = collections.deque(self._batch_numbers())
        done = 0  # batches (counted from `start`) delivered without a gap
        ahead = set(self._skip)  # batches delivered after a gap (out of order)
        fetcher = self._open_fetcher()
        in_flight: dict[int, tuple[int, np.ndarray]] = {}  # ticket → (batch number, sample indices)
        order: collections.deque[int] = collections.deque()
        for ticket, number, batch in self._adopt_next_epoch(fetcher, epoch, start):
            numbers.popleft()  # the same numbers, from the start of this epoch
            in_flight[ticket] = (number, batch)
            order.append(ticket)
        # The next epoch's first batches, submitted once this one is (in order only: out of order, take() could
        # return them here), so that the next epoch starts with a full window rather than an empty pipeline.
        upcoming: list[tuple[int, int, np.ndarray]] = []
        upcoming_plan: list = []  # [its batches, its batch numbers], made when first needed

        def submit() -> None:
            # `prefetch` batches at least; more while the reader's window wants them (a long link needs many).
            while numbers and (len(in_flight) < self.options.prefetch or fetcher.wants_more):
                number = numbers.popleft()
                batch = batches[number]
                ticket = next(self._tickets)
                fetcher.submit(ticket, self.source.uuids[batch].tobytes(), epoch)
                in_flight[ticket] = (number, batch)
                order.append(ticket)
            if not numbers and not self.options.out_of_order:
                if not upcoming_plan:
                    upcoming_plan.extend((self.plan.batches(epoch + 1),
                                          collections.deque(self._batch_numbers(0, frozenset()))))
                next_batches, next_numbers = upcoming_plan
                while next_numbers and fetcher.wants_more:
                    number = next_numbers.popleft()
                    ticket = next(self._tickets)
                    fetcher.submit(ticket, self.source.uuids[next_batches[number]].tobytes(), epoch + 1)
                    upcoming.append((ticket, number, next_batches[number]))
            self.stats.max_batches_in_flight = max(self.stats.max_batches_in_flight, len(in_flight) + len(upcoming))

        submit()
        try:
            while in_flight:
                started = time.perf_counter()
                try:
                    fetched = fetcher.take(None if self.options.out_of_order else order[0])
                except ring_failures() as exc:
                    raise ring_error(exc, f"reading {self.source.split} part {self.source.part} from "
                                          f"{self.source.keyspace}.data_by_uuid", self.source.address.where) from None
                finally:
                    self.stats.wait_s += time.perf_counter() - started
                    retries, buffers = self._counted_before_fetcher
                    self.stats.retries = retries + fetcher.retries
                    self.stats.buffers_allocated = buffers + fetcher.buffers_allocated
                order.remove(fetched.ticket)
                number, batch = in_flight.pop(fetched.ticket)
                submit()  # keep the window full before handing the batch over
                result = self._convert(fetched, batch)
                del fetched
                if self.options.shard[1] == 1:
                    ahead.add(number)
                    while done in ahead:
                        ahead.remove(done)
                        done += 1
                    self.offset = self.plan.offset_after(start, done)
                    self._skip = frozenset(n - done for n in ahead)
                yield result
                del result  # the consumer is done with it: its buffer can go back to the pool
        finally:
            if in_flight:  # abandoned mid-epoch: batches still in flight belong to no one
                self.close()
            elif upcoming:
                self._next_epoch = _NextEpoch(epoch + 1, fetcher, upcoming)
        self.set_epoch(epoch + 1)

    def _open_fetcher(self):
        """The native reader of this process, opened on first use (and again in a forked worker)."""
        if self._fetcher is None or self._fetcher_pid != os.getpid():
            session = self.shared_session if self._shared_session_pid == os.getpid() else None
            if session is None:  # none given, or given to the process this one was forked from
                session = self._own_session = self.source.address.native_session(
                    self.options.consistency,
                    connections_per_node(self.options.memory_bytes // 2, tls=bool(self.source.address.tls_ca_file)))
            decode = self.options.decode
            decoding = {}
            if isinstance(decode, Decode):
                decoding = dict(image_size=(decode.height, decode.width), channels=decode.channels, crop=decode.crop,
                                decode_threads=self.options.decode_threads or min(8, cpu_count()),
                                defer_decode=self.options.trainer_decode is not None)
                if decode.random_crop is not None:
                    decoding.update(random_crop=decode.random_crop.native(), seed=self.options.seed)
            elif decode == TENSOR:
                decoding = dict(raw_item_bytes=self.source.encoding.raw_nbytes)
            try:
                self._fetcher = session.fetcher(self.source.keyspace, concurrency=self.options.concurrency,
                                                max_retries=self.options.max_retries,
                                                request_bytes=self.options.request_bytes,
                                                sample_bytes=self.source.sample_bytes,
                                                memory_bytes=self.options.memory_bytes, metrics=self.metrics,
                                                **decoding)
            except ring_failures() as exc:
                raise ring_error(exc, f"opening {self.source.keyspace}.data_by_uuid",
                                 self.source.address.where) from None
            self._fetcher_pid = os.getpid()
            self._counted_before_fetcher = (self.stats.retries, self.stats.buffers_allocated)
        return self._fetcher

    def _convert(self, fetched, batch: np.ndarray) -> tuple:
        positions = np.frombuffer(fetched.positions, dtype=np.int64)
        if fetched.missing:
            self._report_missing(batch, fetched.missing)
        if fetched.corrupt:
            self._report_corrupt(batch, fetched.corrupt)
        count = len(positions)
        d = self.options.decode
        x: np.ndarray | Blobs
        if isinstance(d, Decode) and fetched.boxes is not None:
            x = Blobs(np.frombuffer(fetched.data, dtype=np.uint8),
                      np.frombuffer(fetched.spans, dtype=np.int64).reshape(-1, 2),
                      np.frombuffer(fetched.boxes, dtype=np.int32).reshape(-1, 5), (d.height, d.width, d.channels))
        elif isinstance(d, Decode):
            x = np.frombuffer(fetched.data, dtype=np.uint8).reshape(count, d.height, d.width, d.channels)
        elif d == TENSOR:
            dtype, shape = self.source.encoding.tensor
            x = np.frombuffer(fetched.data, dtype=np.dtype(dtype)).reshape(count, *shape)
        else:
            x = Blobs(np.frombuffer(fetched.data, dtype=np.uint8),
                      np.frombuffer(fetched.spans, dtype=np.int64).reshape(-1, 2))
        y = np.frombuffer(fetched.labels, dtype=np.int32).astype(np.int64)
        self.stats.batches += 1
        self.stats.samples += count
        self.stats.bytes += len(fetched.data)
        if self.options.with_uuids:
            return x, y, self.source.uuids[batch[positions]]
        return x, y

    def _report_missing(self, batch: np.ndarray, positions: list[int]) -> None:
        ids = [str(uuid_module.UUID(bytes=self.source.uuids[batch[p]].tobytes())) for p in positions]
        if self.options.missing == "raise":
            raise SampleNotFound(
                f"{len(ids)} sample(s) of {self.source.split} part {self.source.part} have no row in "
                f"{self.source.keyspace}.data_by_uuid (first: {ids[0]}); was the dataset re-ingested or a node's "
                "data lost? Pass missing='skip' to skip and count them")
        self.stats.missing += len(ids)
        room = REPORTED_UUIDS - len(self.stats.missing_uuids)
        self.stats.missing_uuids.extend(ids[:room])
        log.warning("skipped %d missing sample(s) (first: %s); %d so far", len(ids), ids[0], self.stats.missing)

    def _report_corrupt(self, batch: np.ndarray, corrupt: list[tuple[int, str]]) -> None:
        found = [(str(uuid_module.UUID(bytes=self.source.uuids[batch[p]].tobytes())), reason)
                 for p, reason in corrupt]
        self.stats.corrupt += len(found)
        room = REPORTED_UUIDS - len(self.stats.corrupt_samples)
        self.stats.corrupt_samples.extend(found[:room])
        log.warning("skipped %d corrupt sample(s) (first: %s: %s); %d so far", len(found), found[0][0],
                    found[0][1], self.stats.corrupt)
