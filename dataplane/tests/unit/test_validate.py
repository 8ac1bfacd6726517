"""Structural checks reject corrupt, truncated, oversized and mis-shaped samples, and pass good ones untouched."""

import io

import numpy as np
import pytest
from PIL import Image

from ringfeed.schema import Encoding
from ringfeed.validate import SampleRejected, check_sample


def encoded(fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(buffer, fmt)
    return buffer.getvalue()


@pytest.mark.parametrize("kind, fmt", [("jpeg", "JPEG"), ("png", "PNG"), ("tiff", "TIFF")])
def test_good_images_pass_unchanged(kind, fmt):
    data = encoded(fmt)
    assert check_sample(data, Encoding(kind), 1 << 20) is data
    assert check_sample(data, Encoding(kind), 1 << 20, full_decode=True) is data


@pytest.mark.parametrize("kind, fmt, mangle, reason", [
    ("jpeg", "JPEG", lambda d: d[: len(d) // 2], "truncated JPEG"),
    ("jpeg", "PNG", lambda d: d, "not a JPEG"),
    ("png", "PNG", lambda d: d[:-20], "truncated PNG"),
    ("png", "JPEG", lambda d: d, "not a PNG"),
    ("tiff", "PNG", lambda d: d, "not a TIFF"),
    ("jpeg", "JPEG", lambda d: b"", "empty file"),
])
def test_corrupt_images_are_rejected(kind, fmt, mangle, reason):
    with pytest.raises(SampleRejected, match=reason) as info:
        check_sample(mangle(encoded(fmt)), Encoding(kind), 1 << 20)
    assert info.value.kind == "corrupt"


def test_full_decode_catches_damage_inside_a_well_framed_jpeg():
    data = bytearray(encoded("JPEG"))
    table = data.find(b"\xff\xc4")  # a Huffman table: its counts made impossible, its length and markers intact
    data[table + 5:table + 21] = b"\xff" * 16
    check_sample(bytes(data), Encoding("jpeg"), 1 << 20)
    with pytest.raises(SampleRejected, match="does not decode"):
        check_sample(bytes(data), Encoding("jpeg"), 1 << 20, full_decode=True)


def photo_with_thumbnail() -> bytes:
    """A JPEG whose EXIF block (APP1) holds a JPEG thumbnail, end marker included, as cameras write them."""
    thumbnail = encoded("JPEG")
    exif = Image.Exif()
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (10, 200, 10)).save(buffer, "JPEG", exif=exif.tobytes() + thumbnail)
    return buffer.getvalue()


@pytest.mark.parametrize("kind, data", [
    ("jpeg", encoded("JPEG") + b"\x00" * 64),  # padded
    ("jpeg", encoded("JPEG") + b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8),  # a motion photo's video
    ("jpeg", photo_with_thumbnail()),
    ("png", encoded("PNG") + b"trailing bytes"),
    ("jpeg", encoded("JPEG")[:2] + b"\xff\x01\xff\xd0" + encoded("JPEG")[2:]),  # markers without a length
], ids=["padded", "motion-photo", "exif-thumbnail", "png-trailing", "tem-and-rst-in-header"])
def test_images_with_bytes_after_their_end_pass_whole(kind, data):
    assert check_sample(data, Encoding(kind), 1 << 20) is data


@pytest.mark.parametrize("kind, data, reason", [
    ("jpeg", photo_with_thumbnail()[:-30], "truncated JPEG"),  # the thumbnail's end marker is not the image's
    ("jpeg", encoded("JPEG")[:40], "truncated JPEG"),  # cut in the header
    ("png", encoded("PNG")[:50] + b"IEND", "truncated PNG"),  # cut in a chunk, IEND written after it
])
def test_an_image_cut_short_is_rejected_whatever_end_markers_it_holds(kind, data, reason):
    with pytest.raises(SampleRejected, match=reason):
        check_sample(data, Encoding(kind), 1 << 20)


def test_oversized():
    with pytest.raises(SampleRejected, match="oversized: .* bytes > limit of 100") as info:
        check_sample(encoded("JPEG"), Encoding("jpeg"), 100)
    assert info.value.kind == "oversized"


def test_raw_tensor_bytes_and_npy_files():
    encoding = Encoding("raw", "float32", (2, 3))
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert check_sample(array.tobytes(), encoding, 1 << 20) == array.tobytes()
    npy = io.BytesIO()
    np.save(npy, array)
    assert check_sample(npy.getvalue(), encoding, 1 << 20) == array.tobytes()
    fortran = io.BytesIO()
    np.save(fortran, np.asfortranarray(array))
    assert check_sample(fortran.getvalue(), encoding, 1 << 20) == array.tobytes()


def test_raw_tensor_of_wrong_size_dtype_or_shape():
    encoding = Encoding("raw", "float32", (2, 3))
    with pytest.raises(SampleRejected, match="a float32\\[2, 3\\] tensor has 24"):
        check_sample(b"\x00" * 20, encoding, 1 << 20)
    npy = io.BytesIO()
    np.save(npy, np.zeros((3, 2), dtype=np.float32))
    with pytest.raises(SampleRejected, match="holds float32\\[3, 2\\]") as info:
        check_sample(npy.getvalue(), encoding, 1 << 20)
    assert info.value.kind == "schema mismatch"
    good = io.BytesIO()
    np.save(good, np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(SampleRejected, match="truncated .npy"):
        check_sample(good.getvalue()[:-4], encoding, 1 << 20)
