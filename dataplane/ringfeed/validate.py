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
        # Some encoders pad after the end-of-image marker with zeros.
        if not data.rstrip(b"\x00").endswith(b"\xff\xd9"):
            raise SampleRejected("corrupt", "truncated JPEG (no end-of-image marker)")
    elif kind == "png":
        if not data.startswith(PNG_SIGNATURE):
            raise SampleRejected("corrupt", "not a PNG (bad signature)")
        if data[-12:-8] != b"\x00\x00\x00\x00" or data[-8:-4] != b"IEND":
            raise SampleRejected("corrupt", "truncated PNG (no IEND chunk)")
    elif kind == "tiff":
        if data[:4] not in (b"II*\x00", b"MM\x00*"):
            raise SampleRejected("corrupt", "not a TIFF (bad header)")


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
