"""Which samples a rank reads in an epoch, and in what order: pure index arithmetic, no I/O.

The epoch's *global order* is a permutation of the split's n samples drawn from (seed, epoch) alone, so it is the
same whatever the number of ranks (elastic). A resume point is a global *offset*: the first `offset` positions of
the global order have been consumed. Rank r of w takes the positions offset + r, offset + r + w, ... (a stride), so
after every rank has read k batches of b samples, exactly the positions [offset, offset + k·b·w) are consumed and
the state stays one number. The tail of an epoch follows an explicit remainder policy:

- ``uneven`` (default): every sample exactly once; ranks differ by at most one sample (and so one batch).
- ``pad``: the order is extended with its own first samples to a multiple of w; every rank gets the same count and
  w − 1 positions at most are read a second time.
- ``drop``: the last n mod w samples of the order are left out; every rank gets the same count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from ringfeed.errors import RingfeedError

REMAINDER_POLICIES = ("uneven", "pad", "drop")


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    samples: int
    batch_size: int
    shuffle: bool = True
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    remainder: str = "uneven"

    def __post_init__(self):
        if self.samples < 0:
            raise RingfeedError("samples must be zero or more")
        if self.batch_size < 1:
            raise RingfeedError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.world_size < 1:
            raise RingfeedError(f"world_size must be at least 1, got {self.world_size}")
        if not 0 <= self.rank < self.world_size:
            raise RingfeedError(f"rank must be in [0, {self.world_size}), got {self.rank}")
        if self.remainder not in REMAINDER_POLICIES:
            raise RingfeedError(f"unknown remainder policy {self.remainder!r} (one of {', '.join(REMAINDER_POLICIES)})")
        if not 0 <= self.seed < 2**64:
            raise RingfeedError("seed must be in [0, 2**64)")

    @property
    def epoch_length(self) -> int:
        """Positions in one epoch's order, after the remainder policy (pad adds, drop removes)."""
        n, w = self.samples, self.world_size
        if self.remainder == "pad":
            return n + (-n) % w
        if self.remainder == "drop":
            return n - n % w
        return n

    def global_order(self, epoch: int) -> np.ndarray:
        """Sample indices of the epoch in delivery order, independent of rank and world size."""
        if epoch < 0:
            raise RingfeedError(f"epoch must be zero or more, got {epoch}")
        n = self.samples
        if self.shuffle:
            order = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch]))).permutation(n)
        else:
            order = np.arange(n)
        if self.remainder == "pad" and n:
            return np.resize(order, self.epoch_length)  # repeats the order from its start (cyclic when w > n)
        return order[: self.epoch_length]

    def rank_indices(self, epoch: int, offset: int = 0) -> np.ndarray:
        """The sample indices this rank reads, in order, when the first `offset` global positions are consumed."""
        self.check_offset(offset)
        return self.global_order(epoch)[offset + self.rank :: self.world_size]

    def rank_samples(self, offset: int = 0) -> int:
        """How many samples this rank reads when the first `offset` global positions are consumed (no permutation
        is drawn: the count does not depend on the epoch)."""
        self.check_offset(offset)
        return len(range(offset + self.rank, self.epoch_length, self.world_size))

    def batches(self, epoch: int, offset: int = 0) -> Iterator[np.ndarray]:
        """This rank's batches of sample indices; only the last one may be smaller than batch_size."""
        indices = self.rank_indices(epoch, offset)
        for start in range(0, len(indices), self.batch_size):
            yield indices[start : start + self.batch_size]

    def offset_after(self, offset: int, batches: int) -> int:
        """The global offset once every rank has read `batches` more batches from `offset`."""
        self.check_offset(offset)
        return min(self.epoch_length, offset + batches * self.batch_size * self.world_size)

    def check_offset(self, offset: int) -> None:
        if not 0 <= offset <= self.epoch_length:
            raise RingfeedError(f"offset {offset} is outside the epoch (0..{self.epoch_length})")
