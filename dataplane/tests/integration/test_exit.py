"""Processes that leave while native sessions, loaders and DataLoader workers are busy exit cleanly, never by a signal.

Each scenario is a child mode of scripts/stress-exit.py (which runs them by the thousand, outside CI); here each runs
a few times as a subprocess against the test node, and every exit code must be the expected one.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ringfeed.demo import make_demo_set
from ringfeed.ingest import ingest
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split, load_split
from ringfeed.store import Store

pytest.importorskip("torch")

STRESS = Path(__file__).resolve().parents[3] / "scripts" / "stress-exit.py"
RUNS_PER_CHILD = 6
# A deadline, so that a hang fails the test instead of blocking the run; never reached by a healthy exit.
HANG_S = 300


@pytest.fixture(scope="module")
def exit_dataset(cassandra_node, tmp_path_factory):
    """A small JPEG dataset with a by-patient split; its name and a few sample UUIDs."""
    name = "exit_" + uuid.uuid4().hex[:10]
    demo = make_demo_set(tmp_path_factory.mktemp("exit"), patients=4)
    with Store(cassandra_node.address) as store:
        store.create_dataset(DatasetSchema(
            name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
            Encoding("jpeg"), metadata=(Column("scanner", "text"),), label_names=("normal", "tumor")))
        ingest(store, name, str(demo.manifest))
        create_split(store, name, "by-patient", SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=1))
        samples = [str(uuid.UUID(bytes=u.tobytes())) for u in load_split(store, name, "by-patient").uuids("train")[:5]]
    yield name, samples
    with Store(cassandra_node.address) as store:
        store.drop_dataset(name, force=True)


def run_all(commands: list[list[str]], cassandra_node, cwd) -> list[tuple[str, int]]:
    """Runs the commands two at a time; returns (command, exit code) for each, a negative code being a signal."""
    env = dict(os.environ, RINGFEED_HOSTS=",".join(cassandra_node.hosts), RINGFEED_PORT=str(cassandra_node.port),
               PYTHONFAULTHANDLER="1")

    def run(argv: list[str]) -> tuple[str, int]:
        result = subprocess.run(argv, check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=HANG_S)
        if result.returncode < 0:
            print(f"{' '.join(argv)}: killed by {signal.Signals(-result.returncode).name}\n{result.stderr}")
        return " ".join(argv[1:]), result.returncode

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(run, commands))


@pytest.mark.parametrize(("child", "expected"), [
    ("loader-mid-epoch", 0),
    ("torch-workers", 0),
    ("fork-after-loader", 0),
    ("fork-reuses-loader", 0),
    ("daemon-thread", 0),
    ("daemon-decoders", 0),
    ("error-mid-epoch", 1),
])
def test_processes_leaving_busy_loaders_exit_cleanly(cassandra_node, exit_dataset, tmp_path, child, expected):
    name, _ = exit_dataset
    command = [sys.executable, str(STRESS), "--child", child, "--dataset", name]
    results = run_all([command] * RUNS_PER_CHILD, cassandra_node, tmp_path)
    assert [code for _, code in results] == [expected] * RUNS_PER_CHILD


def test_short_cli_commands_exit_cleanly(cassandra_node, exit_dataset, tmp_path):
    name, samples = exit_dataset
    ringfeed = [sys.executable, "-m", "ringfeed"]
    out = str(tmp_path / "sample.bin")
    commands = ([(ringfeed + ["get", name, sample, "-o", out], 0) for sample in samples * 2]
                + [(ringfeed + ["get", name, str(uuid.UUID(int=i)), "-o", out], 1) for i in range(3)]
                + [(ringfeed + ["load", name, "by-patient", "-b", "8", "--decode", "32x32"], 0)] * 3)
    results = run_all([argv for argv, _ in commands], cassandra_node, tmp_path)
    assert [(command, code) for command, code in results] == [(" ".join(argv[1:]), code) for argv, code in commands]
