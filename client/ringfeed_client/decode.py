"""Image decoding in the trainer (``decode.device: gpu``): nvJPEG through torchvision on a GPU, the same operations
on the CPU where there is none.

The loader hands the stored bytes of a batch with each image's box (``Blobs.boxes``): the crop its own decode would
take (a RandomResizedCrop drawn from the run's seed, the epoch and the sample, or the evaluation's centre crop) and
whether it mirrors it. Here the batch's JPEGs are decoded in one call, each box resized to the target with an
antialiased bilinear filter (the loader's filter) and mirrored where it says, into one uint8 (n, height, width,
channels) tensor: the layout the loader's own decode hands, so a trainer reads both alike.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional
import torchvision.io

from ringfeed_client.batch import Blobs

log = logging.getLogger("ringfeed_client.decode")

JPEG_MAGIC = b"\xff\xd8\xff"
# Grey as the loader's decoder makes it from RGB (Rec. 709 luma), not the JPEG's own Y (Rec. 601): a sample looks
# the same whichever side decoded it.
LUMA = (0.2126, 0.7152, 0.0722)


def default_device() -> torch.device:
    """The GPU this process trains on (torch's current CUDA device) where there is one, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")


class ImageDecoder:
    """Decodes batches of stored images with their boxes (``Blobs.boxes``) on `device` (default: ``default_device``).

    On a GPU the work runs on a stream of its own, so it overlaps the training step already queued; the batch comes
    back ready for the current stream. An image that cannot be decoded is left out of the batch and counted in
    ``corrupt``, as the loader's own decode does."""

    def __init__(self, device: torch.device | str | None = None):
        self.device = torch.device(device) if device is not None else default_device()
        self.corrupt = 0
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None

    def decode(self, blobs: Blobs) -> tuple[torch.Tensor, np.ndarray]:
        """The batch's images as uint8 (n, height, width, channels) on the device, and the indices of the samples
        they are (all of them, unless some could not be decoded)."""
        if blobs.boxes is None or blobs.image is None:
            raise ValueError("these samples come without boxes: the loader decodes them itself (decode.device cpu)")
        if self._stream is None:
            return self._decode(blobs)
        current = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._stream):
            images, kept = self._decode(blobs)
        current.wait_stream(self._stream)
        images.record_stream(current)  # its memory is the side stream's: not reused before the step has read it
        return images, kept

    def _decode(self, blobs: Blobs) -> tuple[torch.Tensor, np.ndarray]:
        assert blobs.boxes is not None and blobs.image is not None  # checked by decode()
        height, width, channels = blobs.image
        decoded = self._decode_all(blobs)
        kept = np.array([index for index, image in enumerate(decoded) if image is not None], dtype=np.int64)
        boxes = blobs.boxes[kept]
        # Per image only what its size makes its own (the crop's resize); the rest once for the batch: a few kernel
        # launches per image is what keeps the decode's CPU time below a fast model's step.
        resized = torch.empty((len(kept), 3, height, width), dtype=torch.float32, device=self.device)
        for row, (index, (left, top, box_width, box_height, _)) in enumerate(zip(kept, boxes.tolist(), strict=True)):
            crop = decoded[index][None, :, top:top + box_height, left:left + box_width].float()
            resized[row] = torch.nn.functional.interpolate(crop, size=(height, width), mode="bilinear",
                                                           antialias=True, align_corners=False)[0]
        flipped = np.flatnonzero(boxes[:, 4])
        if len(flipped):
            rows = torch.from_numpy(flipped).to(self.device)
            resized[rows] = resized[rows].flip(-1)
        if channels == 1:
            resized = (resized * torch.tensor(LUMA, device=self.device).view(1, 3, 1, 1)).sum(1, keepdim=True)
        return resized.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous(), kept

    def _decode_all(self, blobs: Blobs) -> list[torch.Tensor | None]:
        """Each sample as a (3, h, w) uint8 RGB tensor on the device (None: it could not be decoded). The JPEGs go to
        the device's decoder in one call; other images (PNG) are decoded on the CPU and moved there."""
        mode = torchvision.io.ImageReadMode.RGB
        encoded = [torch.from_numpy(blobs.data[start:end]) for start, end in blobs.spans]
        decoded: list[torch.Tensor | None] = [None] * len(encoded)
        jpegs = [index for index, data in enumerate(encoded) if bytes(data[:3].numpy()) == JPEG_MAGIC]
        if jpegs:
            try:
                batch = torchvision.io.decode_jpeg([encoded[index] for index in jpegs], mode=mode, device=self.device)
            except RuntimeError:  # one bad JPEG fails the whole call: find it one by one
                batch = [self._decode_one(encoded[index], mode, jpeg=True) for index in jpegs]
            for index, image in zip(jpegs, batch, strict=True):
                decoded[index] = image
        others = sorted(set(range(len(encoded))) - set(jpegs))
        for index in others:
            decoded[index] = self._decode_one(encoded[index], mode, jpeg=False)
        failed = decoded.count(None)
        if failed:
            self.corrupt += failed
            log.warning("left out %d image(s) that could not be decoded; %d so far", failed, self.corrupt)
        return decoded

    def _decode_one(self, data: torch.Tensor, mode, jpeg: bool) -> torch.Tensor | None:
        try:
            if jpeg:
                return torchvision.io.decode_jpeg(data, mode=mode, device=self.device)
            return torchvision.io.decode_image(data, mode=mode).to(self.device)
        except RuntimeError:
            return None
