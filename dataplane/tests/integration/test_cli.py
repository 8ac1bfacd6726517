"""The `ringfeed` command as users run it: real process, real node, exit codes and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ringfeed.demo import make_demo_set
from ringfeed.ids import sample_uuid

RINGFEED = str(Path(sys.executable).with_name("ringfeed"))


def run(node, *args, check=True):
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(node.hosts), "COLUMNS": "160"}
    proc = subprocess.run([RINGFEED, *args], capture_output=True, text=True, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_help_explains_the_commands():
    out = subprocess.run([RINGFEED, "--help"], capture_output=True, text=True, check=True).stdout
    for command in ("local", "dataset", "ingest", "datasets", "inspect", "get", "split", "demo"):
        assert command in out
    ingest_help = subprocess.run([RINGFEED, "ingest", "--help"], capture_output=True, text=True, check=True).stdout
    assert "ImageFolder" in ingest_help and "WebDataset" in ingest_help


def test_create_ingest_list_inspect_get(cassandra_node, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "patient_id", "--key", "slide_num:int",
        "--key", "x:int", "--key", "y:int", "--meta", "scanner", "--encoding", "jpeg",
        "--label-names", "normal,tumor")
    out = run(cassandra_node, "ingest", dataset_name, str(demo.manifest)).stdout
    assert f"ingested {demo.images:,} samples" in out
    assert "rejected 5 inputs: corrupt 3, unreadable 1, bad metadata 1" in out
    assert "truncated JPEG" in out and "tumor" in out

    listing = run(cassandra_node, "datasets").stdout
    assert dataset_name in listing and f"{demo.images:,}" in listing
    inspected = run(cassandra_node, "inspect", dataset_name).stdout
    assert "natural key: patient_id text, slide_num int, x int, y int" in inspected
    assert f"samples: {demo.images:,}" in inspected

    first = demo.manifest.read_text().splitlines()[1].split(",")
    uid = sample_uuid(dataset_name, (first[1], int(first[2]), int(first[3]), int(first[4])))
    target = tmp_path / "out.jpg"
    run(cassandra_node, "get", dataset_name, str(uid), "-o", str(target))
    assert target.read_bytes() == (tmp_path / first[0]).read_bytes()


def test_errors_are_one_line_with_non_zero_exit(cassandra_node, dataset_name, tmp_path):
    cases = [
        (["ingest", dataset_name, str(tmp_path)], f"error: unknown dataset '{dataset_name}'"),
        (["inspect", dataset_name], f"error: unknown dataset '{dataset_name}'"),
        (["get", dataset_name, "not-a-uuid", "-o", str(tmp_path / "x")], "error: 'not-a-uuid' is not a UUID"),
        (["dataset", "create", "Bad-Name", "--key", "k", "--encoding", "png"], "error: invalid dataset name"),
    ]
    for args, message in cases:
        proc = run(cassandra_node, *args, check=False)
        assert proc.returncode == 1, args
        assert proc.stderr.startswith(message), proc.stderr
        assert "Traceback" not in proc.stderr
    run(cassandra_node, "dataset", "create", dataset_name, "--key", "path", "--meta", "patient_id",
        "--encoding", "jpeg")
    missing = run(cassandra_node, "ingest", dataset_name, str(tmp_path / "missing.csv"), check=False)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    (tmp_path / "m.csv").write_text("path,label\nx.jpg,0\n")
    mismatch = run(cassandra_node, "ingest", dataset_name, str(tmp_path / "m.csv"), check=False)
    assert mismatch.returncode == 1
    assert "does not match dataset" in mismatch.stderr and "missing column(s) patient_id" in mismatch.stderr


def test_unreachable_ring_is_a_clear_error():
    proc = subprocess.run([RINGFEED, "--hosts", "127.0.99.1", "datasets"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: connecting to 127.0.99.1:9042: cannot reach Cassandra (")
    assert "is the ring up and --hosts (RINGFEED_HOSTS) right?" in proc.stderr
