"""Cheap structural checks of sample bytes: a corrupt or truncated file is rejected at ingest, not at training time."""

from __future__ import annotations

import io

from ringfeed.schema import Encoding

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"


class SampleRejected(ValueError):
    """A sample that cannot be stored; ``kind`` groups rejections in the ingest summary."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def check_sample(data: bytes, encoding: Encoding, max_bytes: int, full_decode: bool = False) -> bytes:
    """Return the bytes to store (a ``.npy`` file becomes its raw array bytes) or raise SampleRejected."""
    if not data:
        raise SampleRejected("corrupt", "empty file")
    if len(data) > max_bytes:
        raise SampleRejected("oversized", f"{len(data)} bytes > limit of {max_bytes}")
    if encoding.kind == "raw":
        return _raw_payload(data, encoding)
    _check_image_structure(data, encoding.kind)
    if full_decode:
        _decode(data, encoding.kind)
    return data


def _check_image_structure(data: bytes, kind: str) -> None:
    if kind == "jpeg":
        if not data.startswith(b"\xff\xd8\xff"):
            raise SampleRejected("corrupt", "not a JPEG (no start-of-image marker)")
        if problem := _jpeg_problem(data):
            raise SampleRejected("corrupt", problem)
    elif kind == "png":
        if not data.startswith(PNG_SIGNATURE):
            raise SampleRejected("corrupt", "not a PNG (bad signature)")
        if not _png_ends(data):
            raise SampleRejected("corrupt", "truncated PNG (no IEND chunk)")
    elif kind == "tiff":
        if data[:4] not in (b"II*\x00", b"MM\x00*"):
            raise SampleRejected("corrupt", "not a TIFF (bad header)")


def _jpeg_problem(data: bytes) -> str | None:
    """Why a JPEG's framing is broken, or None: an end-of-image marker must follow the image data. The header's
    segments are skipped by their lengths (an EXIF thumbnail in APP1 has an end marker of its own); in the
    entropy-coded data after the first start-of-scan a 0xFF byte is followed by 0x00 or a restart marker, so FF D9
    there is the end. Bytes after it are allowed: some encoders pad, and motion photos append a video."""
    position = 2
    while position + 4 <= len(data):
        if data[position] != 0xFF:
            return f"damaged JPEG header (no marker at byte {position})"
        marker = data[position + 1]
        if marker == 0xFF:  # fill byte before a marker
            position += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM and RSTn stand alone, without a length
            position += 2
            continue
        length = int.from_bytes(data[position + 2:position + 4], "big")
        if marker == 0xDA:  # start of scan: the image data follows its header
            if data.find(b"\xff\xd9", position + 2 + length) == -1:
                return "truncated JPEG (no end-of-image marker after its image data)"
            return None
        position += 2 + length
    return "truncated JPEG (its header ends before any image data)"


def _png_ends(data: bytes) -> bool:
    """Whether the chunks, walked by their lengths, reach IEND within the bytes (anything after it is allowed)."""
    position = len(PNG_SIGNATURE)
    while position + 8 <= len(data):
        length, kind = int.from_bytes(data[position:position + 4], "big"), data[position + 4:position + 8]
        end = position + 12 + length  # length, type, data, CRC
        if kind == b"IEND":
            return end <= len(data)
        position = end
    return False


def _decode(data: bytes, kind: str) -> None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
    except Exception as exc:  # Pillow raises many types for bad input; all mean "cannot decode".
        raise SampleRejected("corrupt", f"{kind} does not decode: {str(exc)[:120]}") from None


def _raw_payload(data: bytes, encoding: Encoding) -> bytes:
    import numpy as np

    if data.startswith(NPY_MAGIC):
        from numpy.lib import format as npy

        stream = io.BytesIO(data)
        try:
            version = npy.read_magic(stream)
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran_order, dtype = read_header(stream)
        except Exception as exc:  # a damaged header raises ValueError, SyntaxError, ...
            raise SampleRejected("corrupt", f"bad .npy header: {str(exc)[:120]}") from None
        expected_dtype, expected_shape = encoding.tensor
        if dtype != np.dtype(expected_dtype) or tuple(shape) != expected_shape:
            raise SampleRejected("schema mismatch", f".npy holds {dtype}{list(shape)}, the dataset expects "
                                 f"{expected_dtype}{list(expected_shape)}")
        payload = data[stream.tell():]
        if len(payload) != encoding.raw_nbytes:
            raise SampleRejected("corrupt", f"truncated .npy: {len(payload)} of {encoding.raw_nbytes} bytes")
        if fortran_order:
            array = np.frombuffer(payload, dtype=dtype).reshape(shape, order="F")
            payload = np.ascontiguousarray(array).tobytes()
        return payload
    if len(data) != encoding.raw_nbytes:
        expected_dtype, expected_shape = encoding.tensor
        raise SampleRejected("corrupt", f"{len(data)} bytes, a {expected_dtype}{list(expected_shape)} tensor "
                             f"has {encoding.raw_nbytes}")
    return data
