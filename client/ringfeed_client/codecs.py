"""The image codecs the trainer's decode can use: each turns a batch of stored images into (3, h, w) uint8 RGB tensors
on the decoder's device, with the box of each to resize from.

- ``torchvision``: nvJPEG through ``torchvision.io.decode_jpeg`` (libjpeg-turbo on a CPU), the whole image; other
  formats decoded on the CPU and moved. torchvision serialises its nvJPEG calls in a process (one decoder, one lock).
- ``nvimgcodec``: NVIDIA nvImageCodec, the region of the box only (a region-of-interest decode), on the GPU's
  hardware JPEG engines where it has them, its CUDA decoder or the CPU otherwise (libjpeg-turbo: what the loader's
  own decode does). Needs ``nvidia-nvimgcodec-cu13`` (and ``nvidia-nvjpeg`` for a GPU).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from ringfeed_client.cpus import cpu_count

JPEG_MAGIC = b"\xff\xd8\xff"


class Codec(Protocol):
    def __init__(self, device: torch.device): ...

    def decode(self, encoded: list[np.ndarray], boxes: np.ndarray) -> tuple[list[torch.Tensor | None], np.ndarray]:
        """Each image as a (3, h, w) uint8 RGB tensor on the device (None: it could not be decoded), and the boxes
        (left, top, width, height, flip) within what was decoded."""
        ...


class TorchvisionCodec:
    def __init__(self, device: torch.device):
        import torchvision.io  # only where images are decoded here

        self.device = device
        self._io = torchvision.io

    def decode(self, encoded: list[np.ndarray], boxes: np.ndarray) -> tuple[list[torch.Tensor | None], np.ndarray]:
        mode = self._io.ImageReadMode.RGB
        data = [torch.from_numpy(item) for item in encoded]
        decoded: list[torch.Tensor | None] = [None] * len(data)
        jpegs = [index for index, item in enumerate(encoded) if bytes(item[:3]) == JPEG_MAGIC]
        if jpegs:
            try:
                batch = self._io.decode_jpeg([data[index] for index in jpegs], mode=mode, device=self.device)
            except RuntimeError:  # one bad JPEG fails the whole call: find it one by one
                batch = [self._decode_one(data[index], mode, jpeg=True) for index in jpegs]
            for index, image in zip(jpegs, batch, strict=True):
                decoded[index] = image
        for index in sorted(set(range(len(data))) - set(jpegs)):
            decoded[index] = self._decode_one(data[index], mode, jpeg=False)
        return decoded, boxes

    def _decode_one(self, data: torch.Tensor, mode, jpeg: bool) -> torch.Tensor | None:
        try:
            if jpeg:
                return self._io.decode_jpeg(data, mode=mode, device=self.device)
            image = self._io.decode_image(data, mode=mode)
        except RuntimeError:
            return None
        if image.dtype == torch.uint16:  # a 16-bit PNG: to 8 bits as the loader's CPU decoder rounds it
            image = ((image.to(torch.int32) + 128) // 257).to(torch.uint8)
        return image.to(self.device)


class NvImageCodec:
    def __init__(self, device: torch.device):
        from nvidia import nvimgcodec

        self.device = device
        self._nvimgcodec = nvimgcodec
        # Its executor's threads (parsing, the CPU and hybrid backends' Huffman work) default to the node's cores,
        # not the trainer container's CPU limit.
        threads = cpu_count()
        if device.type == "cuda":
            self._decoder = nvimgcodec.Decoder(device_id=device.index or 0, max_num_cpu_threads=threads,
                                               options=":fancy_upsampling=1")
        else:
            self._decoder = nvimgcodec.Decoder(device_id=nvimgcodec.NVIMGCODEC_DEVICE_CPU_ONLY,
                                               max_num_cpu_threads=threads,
                                               backends=[nvimgcodec.Backend(nvimgcodec.BackendKind.CPU_ONLY)])
        # Planar RGB: the (3, h, w) layout both codecs hand; the stored orientation, as the loader's boxes are.
        self._params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=nvimgcodec.ColorSpec.SRGB,
                                               sample_format=nvimgcodec.SampleFormat.P_RGB)

    def decode(self, encoded: list[np.ndarray], boxes: np.ndarray) -> tuple[list[torch.Tensor | None], np.ndarray]:
        nvimgcodec = self._nvimgcodec
        regions: list = []
        for item, (left, top, width, height, _) in zip(encoded, boxes.tolist(), strict=True):
            try:
                stream = nvimgcodec.CodeStream(item)  # over the slot's bytes, no copy
                regions.append(stream.get_sub_code_stream(
                    region=nvimgcodec.Region(top, left, top + height, left + width)))
            except RuntimeError:  # not an image it can read
                regions.append(None)
        readable = [index for index, region in enumerate(regions) if region is not None]
        stream_handle = torch.cuda.current_stream(self.device).cuda_stream if self.device.type == "cuda" else 0
        images = self._decoder.decode([regions[index] for index in readable], params=self._params,
                                      cuda_stream=stream_handle) if readable else []
        decoded: list[torch.Tensor | None] = [None] * len(encoded)
        for index, image in zip(readable, images, strict=True):
            if image is not None:
                # On a GPU the image is its memory (DLPack, in order on the current stream) unless a CPU backend
                # decoded it (no nvJPEG there): then it moves.
                decoded[index] = (torch.from_dlpack(image).to(self.device) if self.device.type == "cuda"
                                  else torch.from_numpy(np.asarray(image)))
        region_boxes = boxes.copy()
        region_boxes[:, :2] = 0  # each image is its box now
        return decoded, region_boxes


CODECS: dict[str, type[Codec]] = {"torchvision": TorchvisionCodec, "nvimgcodec": NvImageCodec}


def codec_named(name: str) -> type[Codec]:
    if name not in CODECS:
        raise ValueError(f"codec must be one of {', '.join(CODECS)}, not {name!r}")
    return CODECS[name]


# Until a GPU measurement says nvImageCodec is faster (bench_gpu_decode.py, docs/loader.md).
DEFAULT_CODEC = "torchvision"
