"""One resize for a whole batch of decoded images, each from its own box, as a few kernel launches per batch.

The filter is the loader's: antialiased bilinear, PIL's and torch's ``interpolate(..., antialias=True)`` (a triangle
whose half-width grows with the shrink factor, weights renormalised at the box's edges). It is separable, so each
image's resize is ``rows @ image @ columns`` with a (height × image height) and an (image width × width) weight
matrix. Written as dense matrices over a canvas that holds the batch's images side by side (zero-padded to the
largest), the batch's resize is two batched matrix products whatever its size: on a GPU that is little arithmetic
for its tensor cores, where one resize call per image costs the training loop's thread several kernel launches per
image. A mirror is the column matrix reversed. On a CPU the dense products cost tens of times the arithmetic of
the separable filter, so ``ImageDecoder`` resizes there per image with torch's own filter, which this one equals.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

# An image more than this many times the batch's median height or width resizes in a batch of its own: one large
# photograph would otherwise size the whole batch's canvas.
OUTLIER_FACTOR = 2


def resize_boxes(images: list[torch.Tensor], boxes: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    """`images` (each (channels, h, w), any dtype, all on one device), each box (left, top, width, height, flip) of
    it resized to `size` (height, width) and mirrored where flip is set: float (n, channels, height, width), values
    in the images' range (not rounded)."""
    heights = np.array([image.shape[-2] for image in images])
    widths = np.array([image.shape[-1] for image in images])
    regular = (heights <= OUTLIER_FACTOR * np.median(heights)) & (widths <= OUTLIER_FACTOR * np.median(widths))
    groups = [np.flatnonzero(regular)] + [np.array([index]) for index in np.flatnonzero(~regular)]
    if len(groups) == 1:
        return _resize_group(images, boxes, size).float()
    out = torch.empty((len(images), images[0].shape[0], *size), dtype=torch.float32, device=images[0].device)
    for group in groups:
        if len(group):
            rows = torch.from_numpy(group).to(out.device, non_blocking=True)
            out.index_copy_(0, rows, _resize_group([images[index] for index in group], boxes[group], size).float())
    return out


def _resize_group(images: list[torch.Tensor], boxes: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    device = images[0].device
    # Half precision on a GPU (its tensor cores): 8-bit values and weights in [0, 1] keep an error far below one level.
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    with warnings.catch_warnings():  # torch calls its nested tensors a prototype; padding them is one kernel
        warnings.simplefilter("ignore", UserWarning)
        canvas = torch.nested.nested_tensor(images).to(dtype).to_padded_tensor(0.0)  # (n, channels, H, W)
    # non_blocking: from pageable memory the copy is staged at once, and the stream's queued decode is not waited for.
    boxes_on = torch.from_numpy(np.asarray(boxes, dtype=np.float32)).to(device, non_blocking=True)
    left, top, width, height, flip = boxes_on.unbind(1)
    rows = filter_weights(top, height, size[0], canvas.shape[-2])  # (n, height, H)
    columns = filter_weights(left, width, size[1], canvas.shape[-1])  # (n, width, W)
    columns = torch.where(flip.bool()[:, None, None], columns.flip(1), columns)
    shrunk = rows.to(dtype)[:, None] @ canvas  # (n, channels, height, W)
    return shrunk @ columns.to(dtype).transpose(1, 2)[:, None]  # (n, channels, height, width)


def filter_weights(start: torch.Tensor, length: torch.Tensor, out_size: int, in_size: int) -> torch.Tensor:
    """Per image, the (out_size × in_size) weights that resize [start, start + length) of an axis of in_size pixels
    to out_size: output pixel i is centred at start + (i + ½)·scale, scale = length / out_size, and takes the input
    pixels j of the box with weight max(0, 1 − |j + ½ − centre| / max(scale, 1)), renormalised to sum to 1."""
    scale = length / out_size
    half_width = scale.clamp(min=1.0)
    centres = start[:, None] + (torch.arange(out_size, device=start.device) + 0.5) * scale[:, None]
    pixels = torch.arange(in_size, device=start.device) + 0.5
    weights = (1 - (pixels - centres[:, :, None]).abs() / half_width[:, None, None]).clamp(min=0)
    inside = (pixels >= start[:, None]) & (pixels < (start + length)[:, None])
    weights = weights * inside[:, None, :]
    return (weights / weights.sum(-1, keepdim=True)).float()
