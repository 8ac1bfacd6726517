"""PyTorch integration: an IterableDataset of a split part's batches, and a DataLoader that keeps its position.

    from ringfeed import Decode
    from ringfeed.torch import DataLoader, RingfeedDataset

    data = RingfeedDataset("imagenet", "std", "train", batch_size=256, decode=Decode(224, 224), seed=42)
    # or: RingfeedDataset("imagenet", "std", "train", options=LoaderOptions(batch_size=256, ...))
    loader = DataLoader(data, num_workers=4, pin_memory=True)
    for epoch in range(90):
        for x, y in loader:          # x: uint8 (256, 224, 224, 3) tensor, y: int64 (256,)
            ...
        checkpoint = loader.state_dict()   # mid-epoch too; DataLoader.load_state_dict resumes there

Each DataLoader worker opens its own connection (lazily, in the worker) and reads every k-th batch of the rank's
stream, so k workers deliver each sample once, in the same order as one process. Under DDP, rank and world size come
from torch.distributed unless the options set a world size. torch is an optional dependency
(``pip install ringfeed[torch]``).
"""

from __future__ import annotations

import torch
import torch.distributed
import torch.utils.data

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError
from ringfeed.loader import Loader, LoaderOptions, LoaderSource


class RingfeedDataset(torch.utils.data.IterableDataset):
    """Batches of one part of a stored split; use with ``batch_size=None`` in a DataLoader (``DataLoader`` below
    does). Takes ``options=LoaderOptions(...)`` and/or its fields as keywords, as ``ringfeed.Loader`` does; under
    DDP, options with world_size 1 (the default) take torch.distributed's rank and world size."""

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
        self.options = options
        # Checks the options against the split here, in the main process; connects to nothing.
        self._position = Loader.from_source(self.source, options=options)

    @property
    def epoch(self) -> int:
        return self._position.epoch

    def set_epoch(self, epoch: int) -> None:
        self._position.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._position)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        shard = (info.id, info.num_workers) if info else (0, 1)
        loader = Loader.from_source(self.source, options=self.options, shard=shard)
        loader.load_state_dict(self._position.state_dict())
        try:
            yield from loader
        finally:
            loader.close()  # a worker's threads stop before the worker exits, also when abandoned mid-epoch

    def state_dict(self, batches_consumed: int) -> dict:
        """The position after `batches_consumed` batches of the current epoch's remainder were used."""
        state = self._position.state_dict()
        state["offset"] = self._position.plan.offset_after(state["offset"], batches_consumed)
        return state

    def load_state_dict(self, state: dict) -> None:
        self._position.load_state_dict(state)


class DataLoader(torch.utils.data.DataLoader):
    """A torch DataLoader over a ``RingfeedDataset`` that counts the batches it hands out, so ``state_dict()`` is
    exact mid-epoch, and moves the dataset to the next epoch when one ends. Batches arrive in the same order
    whatever ``num_workers``; numpy batches become tensors without a copy in the main process."""

    dataset: RingfeedDataset

    def __init__(self, dataset: RingfeedDataset, num_workers: int = 0, **kwargs):
        if kwargs.get("persistent_workers"):
            raise RingfeedError("persistent_workers would keep each worker's epoch and position; leave it off")
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        self._consumed = 0

    def __iter__(self):
        self._consumed = 0
        for batch in super().__iter__():
            self._consumed += 1
            yield batch
        self.dataset.set_epoch(self.dataset.epoch + 1)
        self._consumed = 0

    def state_dict(self) -> dict:
        return self.dataset.state_dict(self._consumed)

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state)
        self._consumed = 0
