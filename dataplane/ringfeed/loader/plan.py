"""Which samples a rank reads in an epoch, and in what order: pure index arithmetic, no I/O.

The epoch's *global order* is a permutation of the split's n samples drawn from (seed, epoch) alone, so it is the
same whatever the number of ranks (elastic). A resume point is a global *offset*: the first `offset` positions of
the global order have been consumed. Rank r of w takes the positions offset + r, offset + r + w, ... (a stride), so
after every rank has read k batches of b samples, exactly the positions [offset, offset + k·b·w) are consumed and
the state stays one number. The tail of an epoch follows an explicit remainder policy:

- ``uneven``: every sample exactly once; ranks differ by at most one sample (and so one batch).
- ``pad`` (default, as the TrainingJob's: DDP's collectives need every rank to take as many steps): the order is
  extended with its own first samples to a multiple of w; every rank gets the same count and
  w − 1 positions at most are read a second time.
- ``drop``: the last n mod w samples of the order are left out; every rank gets the same count.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ringfeed.errors import RingfeedError
from ringfeed.loader.options import LoaderOptions


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """The epochs of `samples` samples under `options` (its batch size, shuffle, seed, rank, world size and
    remainder policy, validated there)."""

    samples: int
    options: LoaderOptions

    def __post_init__(self):
        if self.samples < 0:
            raise RingfeedError(f"samples must be zero or more, got {self.samples}")

    @property
    def epoch_length(self) -> int:
        """Positions in one epoch's order, after the remainder policy (pad adds, drop removes)."""
        n, w = self.samples, self.options.world_size
        if self.options.remainder == "pad":
            return n + (-n) % w
        if self.options.remainder == "drop":
            return n - n % w
        return n

    def global_order(self, epoch: int) -> np.ndarray:
        """Sample indices of the epoch in delivery order, independent of rank and world size."""
        if epoch < 0:
            raise RingfeedError(f"epoch must be zero or more, got {epoch}")
        n = self.samples
        if self.options.shuffle:
            seeds = np.random.SeedSequence([self.options.seed, epoch])
            order = np.random.Generator(np.random.PCG64(seeds)).permutation(n)
        else:
            order = np.arange(n)
        if self.options.remainder == "pad" and n:
            return np.resize(order, self.epoch_length)  # repeats the order from its start (cyclic when w > n)
        return order[: self.epoch_length]

    def rank_indices(self, epoch: int, offset: int = 0) -> np.ndarray:
        """The sample indices this rank reads, in order, when the first `offset` global positions are consumed."""
        self.check_offset(offset)
        return self.global_order(epoch)[offset + self.options.rank :: self.options.world_size]

    def rank_samples(self, offset: int = 0) -> int:
        """How many samples this rank reads when the first `offset` global positions are consumed (no permutation
        is drawn: the count does not depend on the epoch)."""
        self.check_offset(offset)
        return len(range(offset + self.options.rank, self.epoch_length, self.options.world_size))

    def samples_delivered(self, epoch: int, offset: int) -> int:
        """Samples this rank has read since the first epoch began, at position (epoch, offset)."""
        per_epoch = self.rank_samples(0)
        return epoch * per_epoch + per_epoch - self.rank_samples(min(offset, self.epoch_length))

    def batch_count(self, offset: int = 0) -> int:
        """How many batches this rank reads from `offset` on (``len(batches(epoch, offset))``, with no permutation
        drawn)."""
        return -(-self.rank_samples(offset) // self.options.batch_size)

    def batches(self, epoch: int, offset: int = 0) -> list[np.ndarray]:
        """This rank's batches of sample indices from `offset` on (views of ``rank_indices``); only the last one may
        be smaller than batch_size. Batch k of this list is batch k of every rank: `offset_after` counts them."""
        indices = self.rank_indices(epoch, offset)
        size = self.options.batch_size
        return [indices[start : start + size] for start in range(0, len(indices), size)]

    def shard_batch_numbers(self, offset: int, skip, shard: tuple[int, int]) -> list[int]:
        """The batches (counted from `offset`) that shard ``(index, count)`` of this rank reads, in order: every
        count-th one from its index, less those in `skip` (delivered ahead, out of order)."""
        index, count = shard
        return [b for b in range(index, self.batch_count(offset), count) if b not in skip]

    def offset_after(self, offset: int, batches: int) -> int:
        """The global offset once every rank has read `batches` more batches from `offset`."""
        self.check_offset(offset)
        return min(self.epoch_length, offset + batches * self.options.batch_size * self.options.world_size)

    def check_offset(self, offset: int) -> None:
        if not 0 <= offset <= self.epoch_length:
            raise RingfeedError(f"offset {offset} is outside the epoch (0..{self.epoch_length})")
