"""What a batch's samples are when they are not decoded: shared by the in-process loader and the feed."""

from __future__ import annotations

import numpy as np


class Blobs:
    """Undecoded samples of a batch: one uint8 buffer and int64 (start, end) spans, one row per sample;
    ``blobs[i]`` is sample i's bytes (a memoryview, no copy).

    Images whose decode is the trainer's (``decode.device: gpu``) come with ``boxes``, int32 (left, top, width,
    height, flip) per sample: the part of the image the loader's own decode would take, and whether it mirrors it;
    ``image`` is the (height, width, channels) to decode them to. ``ringfeed_client.torch.tensors`` decodes them."""

    def __init__(self, data: np.ndarray, spans: np.ndarray, boxes: np.ndarray | None = None,
                 image: tuple[int, int, int] | None = None):
        self.data = data
        self.spans = spans
        self.boxes = boxes
        self.image = image

    def __len__(self) -> int:
        return len(self.spans)

    def __getitem__(self, index: int) -> memoryview:
        start, end = self.spans[index]
        return memoryview(self.data.data)[start:end]

    @property
    def nbytes(self) -> int:
        return int((self.spans[:, 1] - self.spans[:, 0]).sum())
