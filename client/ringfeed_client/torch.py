"""The feed's batches as torch tensors that share the sidecar's memory (``torch.from_numpy``: no copy).

    from ringfeed_client import Feed
    from ringfeed_client.torch import tensors

    for x, y in tensors(feed):    # x: uint8 (n, h, w, c) tensor, y: int64 (n,)
        ...
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch


def tensors(batches: Iterable[tuple]) -> Iterator[tuple]:
    """Each batch with its numpy arrays as tensors over the same memory (``Blobs`` are passed as they are)."""
    for batch in batches:
        yield tuple(torch.from_numpy(item) if isinstance(item, np.ndarray) else item for item in batch)
