"""The trainer's decode (decode device gpu) against the loader's own CPU decode, on the same ImageNet-sized JPEGs.

No ring: bench_decode's photographs (~500×375, ~100 kB), each with the box the loader would hand (``image_box``: a
224×224 RandomResizedCrop + flip), in batches of 256 as ``Blobs``. ``ringfeed_client.decode.ImageDecoder`` decodes
them on the GPU with each codec installed (``ringfeed_client.codecs``: nvJPEG through torchvision, nvImageCodec),
then resizes and flips the batch on its own stream; the reference is the native fused CPU decode on every core, as
the sidecar's decoder threads run it. One untimed pass each, then rounds over every image in an order that turns
round each round; each figure is the median round, the GPU's timed to the end of its work (synchronised). Also
reports each codec's CPU time per image in this process, which is what it takes from a training loop. Ends with
one BAR gpu_decode_vs_cpu_decode_<codec> per codec (GPU images/s ÷ all cores' CPU images/s, bar ≥ 1.0).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import time
import uuid

import numpy as np
import torch

from bench_decode import photographs
from ringfeed._native import decode_image, image_box
from ringfeed.loader import RandomResizedCrop
from ringfeed_client.batch import Blobs
from ringfeed_client.codecs import CODECS
from ringfeed_client.decode import ImageDecoder

BAR = 1.0
SIZE = 224
RANDOM_CROP = RandomResizedCrop().native()


def batches_of(images: list[bytes], batch: int) -> list[Blobs]:
    """The images as the loader hands them with deferred decoding, `batch` at a time."""
    out = []
    for start in range(0, len(images), batch):
        part = images[start:start + batch]
        samples = [uuid.UUID(int=start + index) for index in range(len(part))]
        ends = np.cumsum([len(image) for image in part])
        spans = np.stack([ends - [len(image) for image in part], ends], axis=1).astype(np.int64)
        boxes = np.array([image_box(image, SIZE, SIZE, random_crop=RANDOM_CROP, seed=1, sample=sample)
                          for image, sample in zip(part, samples, strict=True)], dtype=np.int32)
        out.append(Blobs(np.frombuffer(bytearray(b"".join(part)), dtype=np.uint8), spans, boxes, (SIZE, SIZE, 3)))
    return out


def _loaded(library: str) -> set[str]:
    """The files of `library` this process mapped: which nvJPEG the codecs found (an older one on LD_LIBRARY_PATH can
    send nvImageCodec's region decodes to its CPU fallback)."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if library in line}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: the trainer's decode would run on the CPU, which this benchmark does not measure")
        return 1
    images = photographs(args.images)
    print(f"{len(images):,} photographs, {sum(map(len, images)) / len(images) / 1000:.0f} kB mean; "
          f"{torch.cuda.get_device_name()}; {os.cpu_count()} cores")
    batches = batches_of(images, args.batch)
    decoders = {}
    for codec in CODECS:
        try:
            decoders[codec] = ImageDecoder("cuda", codec)
        except (ImportError, RuntimeError) as error:  # nvImageCodec not installed, or no nvJPEG for it
            print(f"{codec}: not measured ({error})")
    samples = [uuid.UUID(int=index) for index in range(len(images))]
    pool = concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1)

    def gpu_pass(decoder: ImageDecoder) -> tuple[float, float]:
        started, cpu_started = time.perf_counter(), time.process_time()
        for blobs in batches:
            decoder.decode(blobs)
        cpu = time.process_time() - cpu_started
        torch.cuda.synchronize()
        return len(images) / (time.perf_counter() - started), cpu / len(images)

    def cpu_pass() -> tuple[float, float]:
        started = time.perf_counter()
        list(pool.map(lambda index: decode_image(images[index], SIZE, SIZE, 3, random_crop=RANDOM_CROP, seed=1,
                                                 sample=samples[index]), range(len(images))))
        return len(images) / (time.perf_counter() - started), 0.0

    cpu_pass()  # untimed, as every pass's first: the pool's threads, the codecs' and the kernels' first use
    for codec, decoder in list(decoders.items()):
        try:
            gpu_pass(decoder)
        except Exception as error:  # a codec that fails on this machine is reported, the others still measured
            print(f"{codec}: not measured (its first pass failed: {error!r})")
            del decoders[codec]
    print("nvJPEG loaded: " + (", ".join(sorted(_loaded("libnvjpeg"))) or "none"))
    passes = {"cpu": cpu_pass} | {codec: (lambda decoder=decoder: gpu_pass(decoder))
                                  for codec, decoder in decoders.items()}
    rates: dict[str, list[float]] = {name: [] for name in passes}
    cpu_per_image: dict[str, list[float]] = {name: [] for name in passes}
    for index in range(args.rounds):
        order = list(passes) if index % 2 == 0 else list(reversed(passes))
        for name in order:
            rate, cpu = passes[name]()
            rates[name].append(rate)
            cpu_per_image[name].append(cpu)
        print(f"round {index}: " + ", ".join(f"{name} {rates[name][-1]:,.0f} images/s" for name in passes),
              flush=True)
    cpu = statistics.median(rates["cpu"])
    print(f"CPU decode {cpu:,.0f} images/s on {os.cpu_count()} cores")
    for codec, decoder in decoders.items():
        print(f"GPU decode, {codec}: {statistics.median(rates[codec]):,.0f} images/s, "
              f"{statistics.median(cpu_per_image[codec]) * 1e3:.3f} CPU-ms per image in the trainer's process; "
              f"corrupt {decoder.corrupt}")
    for codec in decoders:
        ratio = statistics.median(rates[codec]) / cpu
        print(f"BAR gpu_decode_vs_cpu_decode_{codec} {ratio:.2f} {BAR} {'PASS' if ratio >= BAR else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
