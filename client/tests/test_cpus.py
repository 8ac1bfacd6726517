"""The CPUs a process may use: a container's CPU limit, not the node's cores."""

from __future__ import annotations

import os

import pytest

from ringfeed_client.cpus import cpu_count


@pytest.mark.parametrize(("cpu_max", "expected"), [("max 100000", None), ("150000 100000", 2), ("50000 100000", 1)])
def test_cpu_count_follows_the_containers_cpu_limit(tmp_path, cpu_max, expected):
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    available = len(os.sched_getaffinity(0))
    assert cpu_count(str(tmp_path)) == min(available, expected or available)
    assert cpu_count(str(tmp_path / "absent")) == available
