"""The preload's reading of a tree (ringfeed/cache/preload.py) on a plain directory: every file once, only new files
on later passes, unreadable files counted, a folder that cannot be listed raised. Through a real tier's FUSE mount:
tests/integration/test_cache_tier.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringfeed.cache.preload import Preloader, keep_warm, read_through, tree_files, wait_for_mount


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


FILES = {"train/0/a.jpg": b"x" * 3_000_000, "train/1/b.jpg": b"y" * 10, "val/0/c.jpg": b"", "val/labels.csv": b"f,l\n"}


def test_a_pass_reads_every_file_to_its_end_and_a_later_pass_only_new_ones(tmp_path: Path):
    make_tree(tmp_path, FILES)
    preloader = Preloader(tmp_path, threads=3)
    first = preloader.run_pass()
    assert (first.files, first.bytes, first.failed) == (4, sum(map(len, FILES.values())), 0)
    assert read_through(str(tmp_path / "train/0/a.jpg")) == 3_000_000  # more than one chunk
    again = preloader.run_pass()
    assert (again.files, again.bytes) == (0, 0)
    make_tree(tmp_path, {"later/all/0/d.jpg": b"z" * 7})
    new = preloader.run_pass()
    assert (new.files, new.bytes) == (1, 7)
    preloader.forget()  # a new mount: everything again
    assert preloader.run_pass().files == 5


def test_a_file_that_cannot_be_read_is_counted_and_read_again_next_pass(tmp_path: Path, caplog):
    root = tmp_path / "mnt"
    make_tree(root, {"train/0/a.jpg": b"abc"})
    os.symlink(tmp_path / "missing.jpg", root / "train/0/gone.jpg")  # listed, but opening it fails
    preloader = Preloader(root, threads=2)
    figures = preloader.run_pass()
    assert (figures.files, figures.bytes, figures.failed) == (1, 3, 1)
    assert "gone.jpg" in caplog.text and "1 failed" in figures.describe()
    (tmp_path / "missing.jpg").write_bytes(b"now")
    assert (preloader.run_pass().files, preloader.run_pass().failed) == (1, 0)


def test_a_folder_that_cannot_be_listed_fails_the_pass_rather_than_looking_empty(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        list(tree_files(tmp_path / "absent"))
    with pytest.raises(ValueError):
        Preloader(tmp_path, threads=0)


def test_keep_warm_writes_the_first_pass_figures_once_ready(tmp_path: Path, monkeypatch):
    make_tree(tmp_path / "mnt", FILES)
    monkeypatch.setattr("os.path.ismount", lambda path: Path(path) == tmp_path / "mnt")
    passes = []
    ready = tmp_path / "ready.json"
    keep_warm(tmp_path / "mnt", 2, 0.01, ready, lambda figures, first: passes.append((figures.files, first)),
              passes=2)
    assert passes == [(4, True), (0, False)]
    assert json.loads(ready.read_text())["files"] == 4


def test_waiting_for_a_mount_gives_up_at_its_deadline(tmp_path: Path):
    with pytest.raises(TimeoutError, match="not mounted"):
        wait_for_mount(tmp_path, poll_s=0.01, timeout_s=0.05)
    assert wait_for_mount(Path("/"), timeout_s=1) == os.stat("/").st_dev
