"""PyTorch integration: an IterableDataset of a split part's batches that keeps its position, and a DataLoader that
keeps it mid-epoch.

    from ringfeed import Decode
    from ringfeed.torch import RingfeedDataLoader, RingfeedDataset

    data = RingfeedDataset("imagenet", "std", "train", batch_size=256, decode=Decode(224, 224), seed=42)
    # or: RingfeedDataset("imagenet", "std", "train", options=LoaderOptions(batch_size=256, ...))
    loader = RingfeedDataLoader(data, num_workers=4, pin_memory=True)
    for epoch in range(90):
        for x, y in loader:          # x: uint8 (256, 224, 224, 3) tensor, y: int64 (256,)
            ...
        checkpoint = loader.state_dict()   # mid-epoch too; load_state_dict resumes there (Lightning does both)

Both classes speak the ``state_dict()`` / ``load_state_dict(state)`` protocol of torchdata's ``StatefulDataLoader``
and of Lightning's checkpoints. ``torchdata.stateful_dataloader.StatefulDataLoader(data, batch_size=None,
num_workers=k)`` works too: it asks the dataset in each worker for its position and hands each position back to the
same worker on resume.

Each DataLoader worker opens its own connection (lazily, in the worker) and reads every k-th batch of the rank's
stream, so k workers deliver each sample once, in the same order as one process. Under DDP, rank and world size come
from torch.distributed unless the options set a world size. torch is an optional dependency
(``pip install ringfeed[torch]``).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import torch
import torch.distributed
import torch.utils.data

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError
from ringfeed.loader import Loader, LoaderOptions, LoaderSource
from ringfeed.loader.plan import EpochPlan
from ringfeed_client.torch import tensors

__all__ = ["RingfeedDataLoader", "RingfeedDataset"]

WORKER_KEY = "worker"
"""The key of a position taken inside a DataLoader worker: ``{"id": i, "num_workers": k, "batches": m}``, the m
batches worker i of k has delivered since the position's offset. Only worker i of k can resume it."""


def shard_batches(plan: EpochPlan, state: dict, shard: tuple[int, int]) -> list[int]:
    """The batches (numbered from the state's offset) that DataLoader worker ``shard[0]`` of ``shard[1]`` reads from
    the position `state`, in its order: every count-th one from its index, less those the state skips (the rule of
    ``LoaderOptions.shard``)."""
    return plan.shard_batch_numbers(state["offset"], set(state["skip"]), shard)


def handed_out(plan: EpochPlan, state: dict, workers: int, batches: int) -> list[int]:
    """The batches (numbered from the state's offset) a torch DataLoader with `workers` worker processes (0: the main
    process) has handed out after `batches` batches: it takes one from each worker in turn, passing over a worker
    that has no more."""
    count = max(1, workers)
    streams = [shard_batches(plan, state, (index, count)) for index in range(count)]
    rounds = max((len(stream) for stream in streams), default=0)
    order = [stream[r] for r in range(rounds) for stream in streams if r < len(stream)]
    return order[:batches]


def position_after(plan: EpochPlan, state: dict, delivered: Iterable[int]) -> dict:
    """`state` once the batches `delivered` (numbered from its offset) were read: the offset moves past those read
    without a gap, the others are kept in ``skip`` (numbered from the new offset)."""
    done = set(state["skip"]) | set(delivered)
    gapless = 0
    while gapless in done:
        gapless += 1
    return {**state, "offset": plan.offset_after(state["offset"], gapless),
            "skip": sorted(b - gapless for b in done if b >= gapless)}


@dataclasses.dataclass
class _Iteration:
    """One iteration of the dataset in this process (the main one, or a DataLoader worker)."""

    loader: Loader
    shard: tuple[int, int]
    start: dict
    """The position it started from (no worker key)."""
    batches: int = 0
    """Batches delivered since `start`."""
    before: int = 0
    """Batches this worker had delivered from `start` before this iteration (a resumed worker position)."""


class RingfeedDataset(torch.utils.data.IterableDataset):
    """Batches of one part of a stored split; use with ``batch_size=None`` in a DataLoader (``RingfeedDataLoader``
    does). Takes ``options=LoaderOptions(...)`` and/or its fields as keywords, as ``ringfeed.Loader`` does; under
    DDP, options with world_size 1 (the default) take torch.distributed's rank and world size.

    A *Stateful* dataset (torchdata's protocol): ``state_dict()`` is its position, also in the middle of an
    iteration in this process (in a DataLoader worker: that worker's share), and ``load_state_dict`` moves it there.
    The dataset never moves to the next epoch by itself in a worker; call ``set_epoch`` before each epoch, as with
    ``DistributedSampler`` (``RingfeedDataLoader`` does it for you).
    """

    def __init__(self, dataset: str, split: str, part: str = "train", *, options: LoaderOptions | None = None,
                 store=None, address: ClusterAddress | None = None, split_version: int | None = None, **fields):
        options = LoaderOptions.build(options, **fields)
        if options.shard != (0, 1):
            raise RingfeedError("shard is set per DataLoader worker; do not pass it")
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if distributed and options.world_size == 1:  # the default: this process alone
            options = LoaderOptions.build(options, rank=torch.distributed.get_rank(),
                                          world_size=torch.distributed.get_world_size())
        self.source = LoaderSource.from_split(dataset, split, part, store=store, address=address,
                                              version=split_version)
        # Checks the options against the split here, in the main process; connects to nothing. It holds the position
        # the next iteration starts from; it is never iterated itself.
        self._position = Loader.from_source(self.source, options=options)
        self.options = self._position.options  # decode.device "auto" settled here: a worker must not ask CUDA
        self._worker: dict | None = None  # the position is a worker's share (see WORKER_KEY)
        self._iteration: _Iteration | None = None
        self._iterated_in: int | None = None  # the worker process that iterated this copy (persistent workers)

    @property
    def plan(self) -> EpochPlan:
        return self._position.plan

    @property
    def epoch(self) -> int:
        return self._iteration.start["epoch"] if self._iteration else self._position.epoch

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its beginning at the next iteration."""
        self._position.set_epoch(epoch)
        self._worker, self._iteration = None, None

    def __len__(self) -> int:
        """Batches of one epoch for this rank, also after a mid-epoch resume (torch's DataLoader, torchdata and
        Lightning count a resumed epoch's batches from its start)."""
        return self.plan.batch_count(0)

    def state_dict(self) -> dict[str, Any]:
        """The position: the epoch, the global offset and the split's identity (``ringfeed.Loader.state_dict``),
        after the batches this process has delivered. After a whole epoch in the main process: the next epoch's
        start. Inside a DataLoader worker: the position its iteration started from, with this worker's share
        (``"worker"``) — only the same worker of as many resumes it (torchdata's StatefulDataLoader does)."""
        iteration = self._iteration
        if iteration is None:
            state = self._position.state_dict()
            if self._worker is not None:
                state[WORKER_KEY] = dict(self._worker)
            return state
        if iteration.shard == (0, 1):
            return iteration.loader.state_dict()  # exact, out of order too; after the epoch: the next one's start
        if self.options.out_of_order:
            raise RingfeedError("a DataLoader worker that hands batches over out of order has no exact position; "
                                "use out_of_order=False or num_workers=0")
        index, count = iteration.shard
        return {**iteration.start,
                WORKER_KEY: {"id": index, "num_workers": count, "batches": iteration.before + iteration.batches}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state` (from ``state_dict``) at the next iteration; a state of another split, part, seed,
        shuffle or remainder policy is refused."""
        state = dict(state)
        worker = state.pop(WORKER_KEY, None)
        self._position.load_state_dict(state)
        self._worker = dict(worker) if worker is not None else None
        self._iteration = None

    def __iter__(self) -> Iterator[tuple]:
        info = torch.utils.data.get_worker_info()
        shard = (info.id, info.num_workers) if info else (0, 1)
        if info is not None:
            if self._iterated_in == os.getpid():
                raise RingfeedError("persistent_workers would keep each worker's epoch and position; leave it off")
            self._iterated_in = os.getpid()
        start = self.state_dict()  # where an earlier iteration of this process stopped, if it did not end
        worker = start.pop(WORKER_KEY, None)
        before = 0
        if worker is not None:
            if (worker["id"], worker["num_workers"]) != shard:
                where = f"worker {shard[0]} of {shard[1]}" if info else "the main process"
                raise RingfeedError(f"this position is DataLoader worker {worker['id']}'s of {worker['num_workers']}; "
                                    f"it cannot resume in {where}: resume with as many workers")
            before = worker["batches"]
        loader = Loader.from_source(self.source, options=self.options, shard=shard)
        loader.load_state_dict({**start, "skip": sorted({*start["skip"],
                                                         *shard_batches(self.plan, start, shard)[:before]})})
        iteration = self._iteration = _Iteration(loader, shard, start, before=before)
        try:
            for batch in loader:
                iteration.batches += 1
                yield batch
        finally:
            if self._iteration is iteration:  # not replaced by set_epoch, load_state_dict or a newer iteration
                if shard == (0, 1) or not self.options.out_of_order:
                    self.load_state_dict(self.state_dict())  # where it stopped, or the next epoch's start
                self._iteration = None
            loader.close()  # a worker's threads stop before the worker exits, also when abandoned mid-epoch


class RingfeedDataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader over a ``RingfeedDataset`` (``batch_size=None`` underneath: batches come whole) that counts
    the batches it hands out, so ``state_dict()`` is exact mid-epoch, and moves the dataset to the next epoch when
    one ends. Batches arrive in the same order whatever ``num_workers``; numpy batches become tensors without a copy
    in the main process. With ``Decode(device="gpu")`` the workers read the images undecoded and the main process
    decodes them on its GPU (``ringfeed_client.torch.tensors``). ``state_dict``/``load_state_dict`` are what
    Lightning saves and restores with a checkpoint.
    """

    dataset: RingfeedDataset

    def __init__(self, dataset: RingfeedDataset, num_workers: int = 0, **kwargs):
        if kwargs.get("persistent_workers"):
            raise RingfeedError("persistent_workers would keep each worker's epoch and position; leave it off")
        if kwargs.get("in_order") is False:
            raise RingfeedError("in_order=False hands batches over in no fixed order; the position needs it")
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        self._start: dict | None = None  # the dataset's position when the current iteration started
        self._consumed = 0

    def __iter__(self):
        if self._start is not None:  # an iteration left mid-epoch: the next one goes on from there
            self.dataset.load_state_dict(self.state_dict())
        self._start, self._consumed = self.dataset.state_dict(), 0
        batches = super().__iter__()
        if self.dataset.options.trainer_decode is not None:
            batches = tensors(batches)  # the images the workers left undecoded, decoded here on the GPU
        for batch in batches:
            self._consumed += 1
            yield batch
        self.dataset.set_epoch(self._start["epoch"] + 1)
        self._start, self._consumed = None, 0

    def state_dict(self) -> dict[str, Any]:
        """The position after the batches handed out so far (``RingfeedDataset.state_dict`` between iterations)."""
        if self._start is None or self.num_workers == 0:
            return self.dataset.state_dict()  # in the main process the dataset follows its own iteration
        if self.dataset.options.out_of_order:
            raise RingfeedError("DataLoader workers that hand batches over out of order leave no exact position; "
                                "use out_of_order=False or num_workers=0")
        plan = self.dataset.plan
        return position_after(plan, self._start, handed_out(plan, self._start, self.num_workers, self._consumed))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state` (from ``state_dict``) at the next iteration."""
        if WORKER_KEY in state:
            raise RingfeedError("this position is one DataLoader worker's (torchdata's StatefulDataLoader keeps "
                                "those); give it back to a StatefulDataLoader with as many workers")
        self.dataset.load_state_dict(state)
        self._start, self._consumed = None, 0


def __getattr__(name: str) -> type[RingfeedDataLoader]:
    if name == "DataLoader":  # the name before 0.2: it shadowed torch.utils.data.DataLoader
        warnings.warn("ringfeed.torch.DataLoader is now ringfeed.torch.RingfeedDataLoader", DeprecationWarning,
                      stacklevel=2)
        return RingfeedDataLoader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
