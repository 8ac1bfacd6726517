"""Image decoding in the trainer (``decode.device: gpu``): on a GPU where there is one, the same operations on the CPU
where there is none.

The loader hands the stored bytes of a batch with each image's box (``Blobs.boxes``): the crop its own decode would
take (a RandomResizedCrop drawn from the run's seed, the epoch and the sample, or the evaluation's centre crop) and
whether it mirrors it. Here a codec (``ringfeed_client.codecs``) decodes the batch, each box is resized to the target
with an antialiased bilinear filter (the loader's filter) and mirrored where it says, into one uint8 (n, height,
width, channels) tensor: the layout the loader's own decode hands, so a trainer reads both alike. On a GPU the whole
batch resizes at once (``ringfeed_client.resample``); on a CPU each image with torch's filter.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch
import torch.nn.functional

from ringfeed_client.batch import Blobs
from ringfeed_client.codecs import DEFAULT_CODEC, codec_named
from ringfeed_client.resample import resize_boxes

log = logging.getLogger("ringfeed_client.decode")

# Grey as the loader's decoder makes it from RGB (Rec. 709 luma), not the JPEG's own Y (Rec. 601): a sample looks
# the same whichever side decoded it.
LUMA = (0.2126, 0.7152, 0.0722)


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """`device` with its index; None: the GPU this process trains on where there is one (torch's current CUDA device,
    which is the calling thread's: resolve it on the training loop's), else the CPU."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    resolved = torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if resolved == torch.device("cuda") else resolved


class ImageDecoder:
    """Decodes batches of stored images with their boxes (``Blobs.boxes``) on `device` (``resolve_device``) with
    `codec` (``torchvision`` or ``nvimgcodec``, ``ringfeed_client.codecs``).

    On a GPU the work runs on a stream of its own, so it overlaps the training step already queued. An image that
    cannot be decoded is left out of the batch and counted in ``corrupt``, as the loader's own decode does. One
    batch at a time: the process's decoder for a device and codec serves every feed of the process (a validation
    loop while a training feed's thread decodes the next epoch's first batches)."""

    def __init__(self, device: torch.device | str | None = None, codec: str = DEFAULT_CODEC):
        self.device = resolve_device(device)
        self.codec = codec_named(codec)(self.device)
        self.corrupt = 0
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._lock = threading.Lock()

    def decode(self, blobs: Blobs, *, finish: bool = False) -> tuple[torch.Tensor, np.ndarray]:
        """The batch's images as uint8 (n, height, width, channels) on the device, and the indices of the samples
        they are (all of them, unless some could not be decoded), ready for the calling thread's current stream.

        `finish`: wait here until the device has decoded them (a thread decoding ahead of the loop: the stored
        bytes can go back to the sidecar then, and the loop has nothing to wait for); the loop's thread calls
        ``hand_over`` before using them."""
        if blobs.boxes is None or blobs.image is None:
            raise ValueError("these samples come without boxes: the loader decodes them itself (decode.device cpu)")
        with self._lock:
            if self._stream is None:
                return self._decode(blobs)
            with torch.cuda.device(self.device), torch.cuda.stream(self._stream):  # this thread's device may differ
                images, kept = self._decode(blobs)
        if finish:
            self._stream.synchronize()
        else:
            torch.cuda.current_stream(self.device).wait_stream(self._stream)
            self.hand_over(images)
        return images, kept

    def hand_over(self, images: torch.Tensor) -> None:
        """The images are used from now on on the calling thread's current stream: their memory, the side stream's,
        is not reused before what that stream has queued has read them."""
        if self._stream is not None:
            images.record_stream(torch.cuda.current_stream(self.device))

    def _decode(self, blobs: Blobs) -> tuple[torch.Tensor, np.ndarray]:
        assert blobs.boxes is not None and blobs.image is not None  # checked by decode()
        height, width, channels = blobs.image
        decoded, boxes = self.codec.decode([blobs.data[start:end] for start, end in blobs.spans], blobs.boxes)
        kept = np.array([index for index, image in enumerate(decoded) if image is not None], dtype=np.int64)
        if len(kept) < len(decoded):
            self.corrupt += len(decoded) - len(kept)
            log.warning("left out %d image(s) that could not be decoded; %d so far", len(decoded) - len(kept),
                        self.corrupt)
        images = [decoded[index] for index in kept]
        if not images:
            return torch.empty((0, height, width, channels), dtype=torch.uint8, device=self.device), kept
        if self.device.type == "cuda":
            resized = resize_boxes(images, boxes[kept], (height, width))
        else:
            resized = self._resize_each(images, boxes[kept], (height, width))
        if channels == 1:
            resized = LUMA[0] * resized[:, 0:1] + LUMA[1] * resized[:, 1:2] + LUMA[2] * resized[:, 2:3]
        return resized.round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous(), kept

    def _resize_each(self, images: list[torch.Tensor], boxes: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
        """torch's separable antialiased filter image by image: on a CPU far less arithmetic than the batch's dense
        products, and the same result."""
        resized = torch.empty((len(images), 3, *size), dtype=torch.float32, device=self.device)
        for row, (image, (left, top, box_width, box_height, _)) in enumerate(zip(images, boxes.tolist(),
                                                                                 strict=True)):
            crop = image[None, :, top:top + box_height, left:left + box_width].float()
            resized[row] = torch.nn.functional.interpolate(crop, size=size, mode="bilinear", antialias=True,
                                                           align_corners=False)[0]
        flipped = np.flatnonzero(boxes[:, 4])
        if len(flipped):
            rows = torch.from_numpy(flipped).to(self.device)
            resized[rows] = resized[rows].flip(-1)
        return resized
