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

import functools
from collections.abc import Iterable, Iterator

import numpy as np
import torch

from ringfeed_client.batch import Blobs
from ringfeed_client.codecs import DEFAULT_CODEC, codec_named
from ringfeed_client.decode import ImageDecoder, resolve_device
from ringfeed_client.feed import Feed


def tensors(batches: Iterable[tuple], device: torch.device | str | None = None,
            codec: str = DEFAULT_CODEC, ahead: int = 0) -> Iterator[tuple]:
    """Each batch with its numpy arrays as tensors over the same memory (``Blobs`` are passed as they are), and
    images left to the trainer decoded on `device` (default: this process's GPU, else the CPU) with `codec`
    (``ringfeed_client.codecs``). An image that cannot be decoded leaves the batch with its label (and UUID).

    `ahead`: how many batches a thread of this process decodes ahead of the loop (``Feed.prefetch``), so the
    decode's work on the CPU overlaps the training step; `batches` must be the Feed itself, whose ``state_dict()``
    stays the position after the loop's batch. Each batch is then the thread's own copy, valid after the next one.
    The thread goes on into the next epoch: the next call with the same `device`, `codec` and `ahead` starts with
    the batches it decoded meanwhile."""
    if ahead < 0:
        raise ValueError(f"ahead is a number of batches, 0 or more, not {ahead}")
    codec_named(codec)  # an unknown one is refused here rather than at the first batch to decode
    convert = _converter(device, codec)
    if not ahead:
        return _inline(batches, convert)
    if not isinstance(batches, Feed):
        raise TypeError(f"decoding ahead needs the Feed itself (its position follows the loop), not {batches!r}")
    convert.settle_device()  # here, on the loop's thread: the prefetch thread's current CUDA device is the first GPU
    return _handed_over(batches.prefetch(convert.prepared, depth=ahead), convert)


def _inline(batches: Iterable[tuple], convert: _Converter) -> Iterator[tuple]:
    for batch in batches:
        yield _as_tensors(convert(batch))


def _handed_over(batches: Iterator[tuple], convert: _Converter) -> Iterator[tuple]:
    for batch in batches:
        convert.hand_over(batch)
        yield _as_tensors(batch)


class _Converter:
    """A batch with its images decoded, where the trainer decodes them: by the process's decoder for the device and
    codec (made on first use, kept from one epoch's call to the next)."""

    def __init__(self, device: torch.device | str | None, codec: str):
        self.codec = codec
        self.device = device
        self._settled: torch.device | None = None

    def settle_device(self) -> torch.device:
        """The device with its index, settled on the calling thread the first time (``resolve_device``)."""
        if self._settled is None:
            self._settled = resolve_device(self.device)
        return self._settled

    def __call__(self, batch: tuple, finish: bool = False) -> tuple:
        x = batch[0]
        if not (isinstance(x, Blobs) and x.boxes is not None):
            return batch
        images, kept = _decoder(self.settle_device(), self.codec).decode(x, finish=finish)
        rest = batch[1:] if len(kept) == len(x) else tuple(item[kept] for item in batch[1:])
        return (images, *rest)

    def prepared(self, batch: tuple) -> tuple:
        """On the prefetch thread: decoded and finished, everything else copied out of the slot."""
        return tuple(_owned(item) for item in self(batch, finish=True))

    def hand_over(self, batch: tuple) -> None:
        if isinstance(batch[0], torch.Tensor) and batch[0].is_cuda:
            _decoder(self.settle_device(), self.codec).hand_over(batch[0])


@functools.cache
def _converter(device: torch.device | str | None, codec: str) -> _Converter:
    """One per device and codec, so that the next epoch's call prepares as this one did (``Feed.prefetch`` goes on
    with the same `prepare`)."""
    return _Converter(device, codec)


@functools.cache
def _decoder(device: torch.device, codec: str) -> ImageDecoder:
    decoder = ImageDecoder(device, codec)
    _DECODERS.append(decoder)
    return decoder


_DECODERS: list[ImageDecoder] = []


def undecodable() -> int:
    """How many images ``tensors`` left out of this process's batches so far because they could not be decoded
    (decode device gpu: the loader's ``stats.corrupt`` counts only what it decoded itself)."""
    return sum(decoder.corrupt for decoder in _DECODERS)


def _owned(item):
    if isinstance(item, np.ndarray):
        return item.copy()
    if isinstance(item, Blobs):
        return Blobs(item.data.copy(), item.spans.copy(), None if item.boxes is None else item.boxes.copy(),
                     item.image)
    return item


def _as_tensors(batch: tuple) -> tuple:
    return tuple(torch.from_numpy(item) if isinstance(item, np.ndarray) else item for item in batch)
