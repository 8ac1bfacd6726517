"""The training decode: RandomResizedCrop + flip fused into the JPEG decode (libjpeg-turbo decodes only the crop's
blocks, scaled down in the DCT domain where the output allows) against the full decode then crop and resize, the
same native code otherwise (``decode_image(..., fused=False)``), on ImageNet-sized photographs.

No ring: the JPEGs are made here (~500×375 photographs with sensor-like grain, quality 90 to 95, ~100 kB like
ImageNet's) and decoded from memory by as many threads as the machine has cores, as the loader's decoder threads do
(the native decode releases the GIL). One untimed warm-up pass, then rounds over every image; each figure is the
median round. Ends with BAR rrc_decode_vs_full_decode (fused images/s ÷ full-decode images/s, bar ≥ 1.3).

The same photographs as files, read by torchvision's ImageFolder through a DataLoader with as many workers and the
same RandomResizedCrop + flip (to a uint8 tensor, as the native decode gives), are the peer: BAR
rrc_decode_vs_dataloader (fused images/s ÷ DataLoader images/s, bar ≥ 2.0). The files are in the page cache after
the warm-up, so the peer's reads cost it no disk. The three run in each round, in an order that rotates and turns
round from one round to the next, so that none is always first or last.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch.utils.data
from PIL import Image
from torchvision import datasets, transforms

from ringfeed._native import decode_image
from ringfeed.loader import RandomResizedCrop

BAR = 1.3
DATALOADER_BAR = 2.0
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


def native_pass(pool: concurrent.futures.ThreadPoolExecutor, images: list[bytes], size: int,
                fused: bool) -> Callable[[], None]:
    samples = [uuid.UUID(int=index) for index in range(len(images))]

    def decode(index: int) -> None:
        decode_image(images[index], size, size, 3, random_crop=RANDOM_CROP, seed=1, epoch=0, sample=samples[index],
                     fused=fused)

    def one_pass() -> None:
        list(pool.map(decode, range(len(images))))
    return one_pass


def dataloader_pass(folder: Path, size: int, workers: int) -> Callable[[], None]:
    transform = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                                    transforms.PILToTensor()])
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(str(folder), transform=transform), batch_size=64,
                                         num_workers=workers, persistent_workers=True)

    def one_pass() -> None:
        for _ in loader:
            pass
    return one_pass


def images_per_second(passes: dict[str, Callable[[], None]], count: int, rounds: int) -> dict[str, float]:
    """Median images/s of each pass over `rounds` rounds, after one untimed pass of each."""
    names = list(passes)
    for name in names:
        passes[name]()
    timings: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order if round_ % 2 == 0 else reversed(order):
            started = time.perf_counter()
            passes[name]()
            timings[name].append(time.perf_counter() - started)
    return {name: count / statistics.median(timings[name]) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--size", type=int, default=224, help="Output height and width.")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="Native decoder threads, and the DataLoader's workers.")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    images = photographs(args.images)
    print(f"{len(images)} JPEGs, mean {sum(map(len, images)) / len(images) / 1000:.0f} kB; {args.size}x{args.size} "
          f"RandomResizedCrop + flip on {args.threads} threads, median of {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        folder = Path(tmp)
        for index, image in enumerate(images):
            label = folder / f"class{index % 2}"
            label.mkdir(exist_ok=True)
            (label / f"{index}.jpg").write_bytes(image)
        rates = images_per_second({
            "full": native_pass(pool, images, args.size, fused=False),
            "fused": native_pass(pool, images, args.size, fused=True),
            "dataloader": dataloader_pass(folder, args.size, args.threads),
        }, len(images), args.rounds)
    print(f"full decode, then crop and resize:            {rates['full']:,.0f} images/s")
    print(f"fused crop decode:                            {rates['fused']:,.0f} images/s")
    print(f"torchvision ImageFolder + DataLoader, {args.threads} workers: {rates['dataloader']:,.0f} images/s")
    for name, reference, bar in (("rrc_decode_vs_full_decode", "full", BAR),
                                 ("rrc_decode_vs_dataloader", "dataloader", DATALOADER_BAR)):
        ratio = rates["fused"] / rates[reference]
        print(f"BAR {name} {ratio:.2f} {bar} {'PASS' if ratio >= bar else 'FAIL'}")


if __name__ == "__main__":
    main()
