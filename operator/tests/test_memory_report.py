"""The memory report: off unless Python traces allocations; then SIGUSR1 names the sites holding the memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def run(env: dict[str, str]) -> subprocess.CompletedProcess:
    script = textwrap.dedent("""
        import logging, os, signal
        from ringfeed_operator import memory_report
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        memory_report.install()
        held = [bytearray(4096) for _ in range(2000)]  # 8 MiB held by this line
        print("handler installed:", signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None), flush=True)
        if signal.getsignal(signal.SIGUSR1) is not signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGUSR1)
    """)
    return subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=60, check=True)


def test_without_tracing_sigusr1_is_left_alone():
    result = run({"PYTHONTRACEMALLOC": ""})
    assert "handler installed: False" in result.stdout and "memory report" not in result.stderr


def test_with_tracing_sigusr1_reports_the_site_that_holds_the_memory():
    result = run({"PYTHONTRACEMALLOC": "4"})
    lines = result.stderr.splitlines()
    assert "handler installed: True" in result.stdout
    assert lines[0].startswith("memory report: ") and "MiB traced" in lines[0]
    size, site = lines[1].removeprefix("memory report: ").split(" MiB in ")
    assert float(size) >= 7.5 and "<string>:6" in site  # the list of bytearrays, the largest holder
    assert any(line.startswith("memory report by file: ") for line in lines)
