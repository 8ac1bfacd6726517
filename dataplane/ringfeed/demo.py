"""A small histopathology-shaped image set (patient → slide → patch, two classes) for the demo and the tests.

Tumour patches have more dark, dense "nuclei" than normal ones, and each patient has a tumour prevalence of
their own, so label ratios differ per patient as in real slide collections: a group-aware split matters.
A few deliberately broken inputs show how ingest reports rejections instead of failing.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import random
from pathlib import Path

LABEL_NAMES = ("normal", "tumor")
MANIFEST_COLUMNS = ["path", "patient_id", "slide_num", "x", "y", "scanner", "label"]


@dataclasses.dataclass(frozen=True)
class DemoSet:
    manifest: Path
    images: int
    broken: int


def patch_jpeg(rng: random.Random, tumor: bool, size: int = 96) -> bytes:
    from PIL import Image, ImageDraw, ImageFilter

    image = Image.new("RGB", (size, size), (236 + rng.randint(-8, 8), 200 + rng.randint(-12, 12), 220))
    draw = ImageDraw.Draw(image)
    nuclei = rng.randint(40, 70) if tumor else rng.randint(8, 20)
    for _ in range(nuclei):
        x, y, r = rng.randrange(size), rng.randrange(size), rng.randint(2, 5 if tumor else 3)
        shade = rng.randint(60, 120)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=(shade, 40, shade + 60))
    buffer = io.BytesIO()
    image.filter(ImageFilter.SMOOTH).save(buffer, "JPEG", quality=85)
    return buffer.getvalue()


def make_demo_set(root: Path, patients: int = 24, seed: int = 7) -> DemoSet:
    """Write ``root/patches/<patient>/<slide>/*.jpg`` and ``root/manifest.csv``; deterministic for a seed."""
    rng = random.Random(seed)
    rows = []
    for p in range(patients):
        patient = f"P{p:03d}"
        prevalence = rng.choice([0.05, 0.2, 0.5, 0.8])
        for slide in range(rng.randint(1, 3)):
            folder = root / "patches" / patient / f"slide{slide}"
            folder.mkdir(parents=True, exist_ok=True)
            for _ in range(rng.randint(20, 50)):
                x, y = rng.randrange(0, 40_000, 96), rng.randrange(0, 30_000, 96)
                tumor = rng.random() < prevalence
                path = folder / f"{x}_{y}.jpg"
                path.write_bytes(patch_jpeg(rng, tumor))
                rows.append([path.relative_to(root).as_posix(), patient, slide, x, y,
                             rng.choice(["aperio", "hamamatsu"]), int(tumor)])
    images = len(rows)
    broken_dir = root / "patches" / "broken"
    broken_dir.mkdir(parents=True, exist_ok=True)
    whole = patch_jpeg(rng, tumor=True)
    (broken_dir / "truncated.jpg").write_bytes(whole[: len(whole) // 2])
    (broken_dir / "empty.jpg").write_bytes(b"")
    (broken_dir / "not_an_image.jpg").write_text("this is a text file\n")
    broken = [["patches/broken/truncated.jpg", "P900", 0, 0, 0, "aperio", 1],
              ["patches/broken/empty.jpg", "P900", 0, 96, 0, "aperio", 0],
              ["patches/broken/not_an_image.jpg", "P900", 0, 192, 0, "aperio", 0],
              ["patches/broken/missing.jpg", "P900", 0, 288, 0, "aperio", 0],
              ["patches/P000/slide0/bad_label.jpg", "P900", 0, 384, 0, "aperio", "tumour?"]]
    manifest = root / "manifest.csv"
    with open(manifest, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(MANIFEST_COLUMNS)
        writer.writerows(rows + broken)
    return DemoSet(manifest, images, len(broken))
