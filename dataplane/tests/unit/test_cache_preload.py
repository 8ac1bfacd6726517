"""The preload's reading of a tree (ringfeed/cache/preload.py) on a plain directory: every file once, only new
folders on later passes, unreadable files counted and their folder read again, a folder that cannot be listed
raised. Through a real tier's FUSE mount: tests/integration/test_cache_tier.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ringfeed.cache.preload import Preloader, keep_warm, read_through, wait_for_mount


def make_tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


FILES = {"train/0/a.jpg": b"x" * 3_000_000, "train/1/b.jpg": b"y" * 10, "val/0/c.jpg": b"", "val/labels.csv": b"f,l\n"}


def test_a_pass_reads_every_file_to_its_end_and_a_later_pass_only_new_folders(tmp_path: Path):
    make_tree(tmp_path, FILES)
    preloader = Preloader(tmp_path, threads=3)
    pending = []
    first = preloader.run_pass(on_pending=lambda: pending.append(1))
    assert (first.files, first.bytes, first.failed) == (4, sum(map(len, FILES.values())), 0) and pending == [1]
    assert read_through(str(tmp_path / "train/0/a.jpg")) == 3_000_000  # more than one chunk
    again = preloader.run_pass(on_pending=lambda: pending.append(2))
    assert (again.files, again.bytes) == (0, 0) and pending == [1]  # nothing to read: no call
    make_tree(tmp_path, {"later/all/0/d.jpg": b"z" * 7})  # a new split
    new = preloader.run_pass()
    assert (new.files, new.bytes) == (1, 7)
    preloader.forget()  # a new mount: everything again
    assert preloader.run_pass().files == 5


def test_many_files_are_read_with_few_reads_queued(tmp_path: Path):
    make_tree(tmp_path, {f"train/{n % 7}/{n}.jpg": bytes(n % 13) for n in range(3000)})
    figures = Preloader(tmp_path, threads=4).run_pass()
    assert (figures.files, figures.bytes) == (3000, sum(n % 13 for n in range(3000)))


def test_a_file_that_cannot_be_read_is_counted_and_its_folder_read_again_next_pass(tmp_path: Path, caplog):
    root = tmp_path / "mnt"
    make_tree(root, {"train/0/a.jpg": b"abc", "train/1/b.jpg": b"de"})
    os.symlink(tmp_path / "missing.jpg", root / "train/0/gone.jpg")  # listed, but opening it fails
    preloader = Preloader(root, threads=2)
    figures = preloader.run_pass()
    assert (figures.files, figures.bytes, figures.failed) == (2, 5, 1)
    assert "gone.jpg" in caplog.text and "1 failed" in figures.describe()
    (tmp_path / "missing.jpg").write_bytes(b"now")
    again = preloader.run_pass()  # train/0 again (its a.jpg too), not train/1
    assert (again.files, again.bytes, again.failed) == (2, 6, 0)
    assert preloader.run_pass().files == 0


def test_a_folder_that_cannot_be_listed_fails_the_pass_rather_than_looking_empty(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        Preloader(tmp_path / "absent").run_pass()
    with pytest.raises(ValueError):
        Preloader(tmp_path, threads=0)


def test_keep_warm_is_ready_after_its_first_pass_and_not_while_a_pass_reads(tmp_path: Path, monkeypatch):
    make_tree(tmp_path / "mnt", FILES)
    monkeypatch.setattr("os.path.ismount", lambda path: Path(path) == tmp_path / "mnt")
    ready = tmp_path / "ready.json"
    ready.write_text("left by an earlier container")
    passes = []

    def on_pass(figures, first):
        passes.append((figures.files, first, ready.exists()))
        if len(passes) == 1:
            make_tree(tmp_path / "mnt", {"later/all/x.jpg": b"12"})

    keep_warm(tmp_path / "mnt", 2, 0.01, ready, on_pass, passes=3)
    assert passes == [(4, True, False), (1, False, False), (0, False, True)]
    assert json.loads(ready.read_text())["files"] == 1  # written after the pass that read the new split


def test_waiting_for_a_mount_gives_up_at_its_deadline(tmp_path: Path):
    with pytest.raises(TimeoutError, match="not mounted"):
        wait_for_mount(tmp_path, poll_s=0.01, timeout_s=0.05)
    wait_for_mount(Path("/"), timeout_s=1)
