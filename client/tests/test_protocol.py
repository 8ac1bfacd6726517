"""The handoff's pure parts: where arrays lie in a slot, and a batch read back as views of a file's mapping."""

from __future__ import annotations

import itertools
import mmap
from pathlib import Path

import numpy as np
import pytest

from ringfeed_client.batch import Blobs
from ringfeed_client.protocol import ALIGNMENT, ArraySpec, feed_dir, layout


def test_layout_aligns_every_array_and_counts_the_bytes():
    specs, size = layout([("x", "|u1", (3, 5, 5, 3)), ("y", "<i8", (3,)), ("uuids", "|u1", (3, 16))])
    assert [s.offset % ALIGNMENT for s in specs] == [0, 0, 0]
    assert [s.nbytes for s in specs] == [225, 24, 48]
    assert specs[1].offset == 256 and specs[2].offset == 320 and size == 368
    for first, second in itertools.pairwise(specs):
        assert first.offset + first.nbytes <= second.offset


def test_specs_survive_json():
    spec = ArraySpec("x", "<f4", (2, 3), 128)
    assert ArraySpec.from_json(spec.to_json()) == spec


@pytest.mark.parametrize("dtype", ["|u1", "<f4", "<i8", "<f2"])
def test_a_batch_written_at_its_layout_reads_back_in_place(tmp_path, dtype):
    x = (np.arange(2 * 3 * 4) % 7).astype(dtype).reshape(2, 3, 4)
    y = np.array([4, 9], dtype=np.int64)
    specs, size = layout([("x", x.dtype.str, x.shape), ("y", y.dtype.str, y.shape)])
    path = tmp_path / "slot"
    with open(path, "wb") as file:
        file.truncate(size)
    with open(path, "r+b") as file, mmap.mmap(file.fileno(), size) as writer:
        for spec, array in zip(specs, (x, y), strict=True):
            writer[spec.offset: spec.offset + spec.nbytes] = array.tobytes()
    with open(path, "rb") as file:
        reader = mmap.mmap(file.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    views = [np.frombuffer(reader, dtype=s.dtype, count=int(np.prod(s.shape)), offset=s.offset).reshape(s.shape)
             for s in specs]
    assert np.array_equal(views[0], x) and np.array_equal(views[1], y)
    views[0][0, 0, 0] = 1  # copy-on-write: the trainer's own page, the file keeps its bytes
    assert path.read_bytes()[specs[0].offset] == x.tobytes()[0]


def test_blobs_are_spans_of_one_buffer():
    data = np.frombuffer(b"abcdefgh", dtype=np.uint8)
    blobs = Blobs(data, np.array([[0, 3], [3, 8]], dtype=np.int64))
    assert len(blobs) == 2 and bytes(blobs[1]) == b"defgh" and blobs.nbytes == 8


def test_the_feed_directory_comes_from_the_argument_the_environment_or_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("RINGFEED_FEED_DIR", raising=False)
    assert str(feed_dir()) == "/var/run/ringfeed"
    monkeypatch.setenv("RINGFEED_FEED_DIR", str(tmp_path))
    assert feed_dir() == tmp_path and feed_dir("/x") == Path("/x")
