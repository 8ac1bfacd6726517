"""The images a user's data holds, through every fit of the loader's decoder and the deferred (GPU) path's box: the
kinds that decode give the picture Pillow gives; broken, cut or bomb-sized ones are refused with "cannot decode", so
the loader counts them corrupt instead of delivering grey or filling its memory."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image
from test_random_crop import IMAGENET, SAMPLES, photograph

from ringfeed._native import decode_image, image_box

FITS = {"centre": {"crop": True}, "stretch": {"crop": False}, "random": {"random_crop": IMAGENET, "seed": 3}}


def saved(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def decoded(data: bytes, fit: dict, size: int = 32) -> np.ndarray:
    buffer = decode_image(data, size, size, 3, sample=SAMPLES[0], **fit)
    return np.frombuffer(buffer, dtype=np.uint8).reshape(size, size, 3)


def pillow_reference(data: bytes, size: int = 32) -> np.ndarray:
    """The whole image stretched to the target by Pillow: the picture a decode must resemble."""
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.int16)


PHOTO = Image.fromarray(photograph(240, 180, seed=9))
DECODABLE = {
    "baseline-420": saved(PHOTO, "JPEG", quality=90),
    "baseline-444": saved(PHOTO, "JPEG", quality=90, subsampling=0),
    "progressive": saved(PHOTO, "JPEG", quality=90, progressive=True),
    "grey-jpeg": saved(PHOTO.convert("L"), "JPEG", quality=90),
    "cmyk-jpeg": saved(PHOTO.convert("CMYK"), "JPEG", quality=95),  # libjpeg-turbo's refusal: the full decoder's
    "png-rgba": saved(PHOTO.convert("RGBA"), "PNG"),
    "png-palette": saved(PHOTO.convert("P"), "PNG"),
    "tiff": saved(PHOTO, "TIFF"),
    "tiff-deflate": saved(PHOTO, "TIFF", compression="tiff_adobe_deflate"),
}
_JPEG = DECODABLE["baseline-420"]
_JFIF = _JPEG.index(b"JFIF\0") + 5
DECODABLE |= {  # what libjpeg warns about, the pixels whole
    "jfif-2.01": _JPEG[:_JFIF] + b"\x02\x01" + _JPEG[_JFIF + 2:],
    "extraneous-bytes": _JPEG[:-2] + bytes(range(1, 48)) + b"\xff\xd9",
}


@pytest.mark.parametrize("fit", FITS.values(), ids=FITS.keys())
@pytest.mark.parametrize("name", DECODABLE)
def test_every_kind_of_image_decodes_in_every_fit(name, fit):
    data = DECODABLE[name]
    out = decoded(data, fit)
    assert out.shape == (32, 32, 3)
    if "random_crop" not in fit:  # a random crop shows another part of the picture
        difference = np.abs(decoded(data, FITS["stretch"]).astype(np.int16) - pillow_reference(data)).mean()
        assert difference < 12, f"{name}: mean difference {difference} from Pillow's"
    left, top, width, height, _ = image_box(data, 32, 32, sample=SAMPLES[0], **fit)
    assert 0 <= left < 240 and 0 <= top < 180 and 0 < width <= 240 - left and 0 < height <= 180 - top


def cut(data: bytes, at: float) -> bytes:
    return data[:int(len(data) * at)]


def bit_flips(data: bytes) -> bytes:
    """Every fourth byte of the middle of the scan inverted: Huffman codes that run past the data."""
    damaged = bytearray(data)
    for position in range(len(data) // 2, len(data) - 20, 4):
        damaged[position] ^= 0xFF
    return bytes(damaged)


def headers_only(data: bytes) -> bytes:
    """The header and the end marker, no scan data."""
    scan = data.index(b"\xff\xda")
    return data[:scan + 2 + int.from_bytes(data[scan + 2:scan + 4], "big")] + b"\xff\xd9"


JPEG = DECODABLE["baseline-420"]
# name: (bytes, the intact image they were cut from)
BROKEN = {
    "empty": (b"", None),
    "garbage": (bytes(range(256)) * 4, None),
    "jpeg-cut-in-header": (JPEG[:60], JPEG),
    "jpeg-cut-in-scan": (cut(JPEG, 0.5), JPEG),
    "jpeg-cut-before-end": (JPEG[:-8], JPEG),
    "jpeg-no-scan-data": (headers_only(JPEG), JPEG),
    "jpeg-bit-flips": (bit_flips(JPEG), JPEG),
    "progressive-cut": (cut(DECODABLE["progressive"], 0.6), DECODABLE["progressive"]),
    "png-cut": (cut(DECODABLE["png-rgba"], 0.5), DECODABLE["png-rgba"]),
}


@pytest.mark.parametrize("fit", FITS.values(), ids=FITS.keys())
@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_image_is_refused_never_repaired(name, fit):
    """Refused, or (a random crop reads only its own rows, so damage below them goes unread) the very pixels of the
    intact image: never grey rows or garbage blocks in their place."""
    data, intact = BROKEN[name]
    try:
        out = decoded(data, fit)
    except ValueError as error:
        assert "cannot" in str(error)
        return
    assert "random_crop" in fit and intact is not None, f"{name} decoded in a fit that reads every row"
    assert np.array_equal(out, decoded(intact, fit))


def test_the_evaluation_fits_read_every_row_of_a_jpeg_cut_short():
    for name in ("jpeg-cut-in-scan", "jpeg-cut-before-end", "jpeg-no-scan-data", "progressive-cut"):
        for fit in (FITS["centre"], FITS["stretch"]):
            with pytest.raises(ValueError, match="cannot decode"):
                decoded(BROKEN[name][0], fit)


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` with its frame header (baseline or progressive) declaring another size."""
    frame = next(data.index(marker) for marker in (b"\xff\xc0", b"\xff\xc2") if marker in data)
    return data[:frame + 5] + struct.pack(">HH", height, width) + data[frame + 9:]


def with_png_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` with its IHDR declaring another size (and a right CRC, so that only the size is wrong)."""
    fields = struct.pack(">II", width, height) + data[24:29]
    chunk = b"IHDR" + fields
    return data[:12] + chunk + struct.pack(">I", zlib.crc32(chunk)) + data[33:]


BOMBS = {
    "jpeg-baseline": with_jpeg_size(JPEG, 30000, 30000),
    "jpeg-progressive": with_jpeg_size(DECODABLE["progressive"], 30000, 30000),
    "png-1-bit": with_png_size(saved(PHOTO.convert("1"), "PNG"), 23000, 23000),
}


@pytest.mark.parametrize("fit", FITS.values(), ids=FITS.keys())
@pytest.mark.parametrize("name", BOMBS)
def test_a_header_declaring_too_many_pixels_is_refused_before_any_is_decoded(name, fit):
    """A few kB that would take gigabytes on each decoder thread (and, deferred, in the trainer)."""
    with pytest.raises(ValueError, match="declares .* pixels"):
        decoded(BOMBS[name], fit)
    with pytest.raises(ValueError, match="declares .* pixels"):
        image_box(BOMBS[name], 32, 32, sample=SAMPLES[0], **fit)
