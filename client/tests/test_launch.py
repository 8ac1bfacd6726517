"""ringfeed-launch: one trainer process per local rank, torchrun's environment, the first failure stops the rest."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from ringfeed_client.launch import rank_environment, run

POD = {"GROUP_RANK": "2", "WORLD_SIZE": "12", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "job-0.job"}


@pytest.mark.parametrize(("local_rank", "rank"), [(0, 8), (3, 11)])
def test_each_process_gets_torchruns_rank_numbering(local_rank, rank):
    env = rank_environment(POD, local_rank, 4)
    assert (env["RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == (str(rank), str(local_rank), "4")
    assert env["WORLD_SIZE"] == "12" and env["MASTER_ADDR"] == "job-0.job"


def test_every_local_rank_runs_once_with_its_environment(tmp_path, monkeypatch):
    for key, value in POD.items():
        monkeypatch.setenv(key, value)
    script = (f"import os; open(os.path.join({str(tmp_path)!r}, os.environ['RANK']), 'w')"
              ".write(os.environ['LOCAL_RANK'])")
    assert run([sys.executable, "-c", script], 4) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"8": "0", "9": "1", "10": "2", "11": "3"}


def test_a_failed_local_rank_stops_the_others_and_its_status_is_the_launchers(tmp_path):
    script = ("import os, sys, time\n"
              "if os.environ['LOCAL_RANK'] == '1': sys.exit(7)\n"
              "time.sleep(60)\n")
    started = time.monotonic()
    assert run([sys.executable, "-c", script], 3) == 7
    assert time.monotonic() - started < 30  # the sleeping ranks were stopped, not waited for


def test_the_command_line_needs_a_command():
    result = subprocess.run([sys.executable, "-m", "ringfeed_client.launch", "--local-ranks", "2"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "give the trainer's command after --" in result.stderr


def test_the_command_line_runs_what_follows_the_double_dash():
    result = subprocess.run([sys.executable, "-m", "ringfeed_client.launch", "--local-ranks", "2", "--",
                             sys.executable, "-c", "import os; print('rank', os.environ['RANK'])"],
                            capture_output=True, text=True, env={"GROUP_RANK": "1", "PATH": "/usr/bin"})
    assert result.returncode == 0 and sorted(result.stdout.split("\n")[:2]) == ["rank 2", "rank 3"]
