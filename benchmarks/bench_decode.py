"""The training decode: RandomResizedCrop + flip fused into the JPEG decode (libjpeg-turbo decodes only the crop's
blocks, scaled down in the DCT domain where the output allows) against the full decode then crop and resize, the
same native code otherwise (``decode_image(..., fused=False)``), on ImageNet-sized photographs.

No ring: the JPEGs are made here (~500×375 photographs with sensor-like grain, quality 90 to 95, ~100 kB like
ImageNet's) and decoded from memory by as many threads as the machine has cores, as the loader's decoder threads do
(the native decode releases the GIL). One untimed warm-up pass, then rounds over every image; each figure is the
median round. Ends with BAR rrc_decode_vs_full_decode (fused images/s ÷ full-decode images/s, bar ≥ 1.3).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import statistics
import time
import uuid

import numpy as np
from PIL import Image

from ringfeed._native import decode_image
from ringfeed.loader import RandomResizedCrop

BAR = 1.3
RANDOM_CROP = RandomResizedCrop().native()
# Standard deviation of the grain added to each pixel: ~100 kB per 500×375 JPEG at quality 90-95, as ImageNet's.
GRAIN = 16


def photographs(count: int, seed: int = 0) -> list[bytes]:
    """`count` JPEGs of 500×375 (one in four 375×500): colour fields, edges and grain, quality 90 to 95."""
    rng = np.random.default_rng(seed)
    images = []
    for index in range(count):
        width, height = (375, 500) if index % 4 == 3 else (500, 375)
        y, x = np.mgrid[0:height, 0:width].astype(np.float32)
        phase = rng.uniform(0, 2 * np.pi, 3)
        period = rng.uniform(20, 90, 3)
        channels = [128 + 90 * np.sin(x / period[c] + phase[c]) * np.cos(y / (period[c] * 1.3)) for c in range(3)]
        pixels = np.stack(channels, axis=-1) + rng.normal(0, GRAIN, (height, width, 3))
        out = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, format="JPEG",
                                                                        quality=int(rng.integers(90, 96)))
        images.append(out.getvalue())
    return images


def images_per_second(images: list[bytes], size: int, fused: bool, threads: int, rounds: int) -> float:
    samples = [uuid.UUID(int=index) for index in range(len(images))]

    def decode(index: int) -> None:
        decode_image(images[index], size, size, 3, random_crop=RANDOM_CROP, seed=1, epoch=0, sample=samples[index],
                     fused=fused)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(decode, range(len(images))))  # warm-up: threads, thread-local decoders and resizers
        timings = []
        for _ in range(rounds):
            started = time.perf_counter()
            list(pool.map(decode, range(len(images))))
            timings.append(time.perf_counter() - started)
    return len(images) / statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--size", type=int, default=224, help="Output height and width.")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    images = photographs(args.images)
    print(f"{len(images)} JPEGs, mean {sum(map(len, images)) / len(images) / 1000:.0f} kB; {args.size}x{args.size} "
          f"RandomResizedCrop + flip on {args.threads} threads, median of {args.rounds} rounds")
    full = images_per_second(images, args.size, False, args.threads, args.rounds)
    fused = images_per_second(images, args.size, True, args.threads, args.rounds)
    print(f"full decode, then crop and resize: {full:,.0f} images/s")
    print(f"fused crop decode:                 {fused:,.0f} images/s")
    ratio = fused / full
    print(f"BAR rrc_decode_vs_full_decode {ratio:.2f} {BAR} {'PASS' if ratio >= BAR else 'FAIL'}")


if __name__ == "__main__":
    main()
