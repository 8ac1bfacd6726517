"""The feed's batches as torch tensors that share the sidecar's memory (``torch.from_numpy``: no copy).

    from ringfeed_client import Feed
    from ringfeed_client.torch import tensors

    for x, y in tensors(feed):    # x: uint8 (n, h, w, c) tensor, y: int64 (n,)
        ...

With ``loader.decode.device: gpu`` the sidecar hands the images undecoded, each with its crop: ``tensors`` decodes
them on the GPU (``ringfeed_client.decode``) into the same uint8 (n, h, w, c) batch, there; the labels stay on the
CPU as with the loader's own decode.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import torch

from ringfeed_client.batch import Blobs
from ringfeed_client.codecs import DEFAULT_CODEC


def tensors(batches: Iterable[tuple], device: torch.device | str | None = None,
            codec: str = DEFAULT_CODEC) -> Iterator[tuple]:
    """Each batch with its numpy arrays as tensors over the same memory (``Blobs`` are passed as they are), and
    images left to the trainer decoded on `device` (default: this process's GPU, else the CPU) with `codec`
    (``ringfeed_client.codecs``). An image that cannot be decoded leaves the batch with its label (and UUID)."""
    decoder = None
    for batch in batches:
        x = batch[0]
        if isinstance(x, Blobs) and x.boxes is not None:
            if decoder is None:
                from ringfeed_client.decode import ImageDecoder  # torchvision, only where images are decoded here
                decoder = ImageDecoder(device, codec)
            images, kept = decoder.decode(x)
            rest = batch[1:] if len(kept) == len(x) else tuple(item[kept] for item in batch[1:])
            batch = (images, *rest)
        yield tuple(torch.from_numpy(item) if isinstance(item, np.ndarray) else item for item in batch)
