"""The memory report: a SIGUSR1 starts tracing, the next names the sites holding what was allocated since and stops
tracing."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_the_first_signal_starts_tracing_the_second_reports_what_is_held_since():
    script = textwrap.dedent("""\
        import logging, os, signal, threading, tracemalloc
        from ringfeed_operator import memory_report
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        memory_report.install()
        before = [bytearray(4096) for _ in range(4000)]  # 16 MiB allocated before tracing: not in the report
        print("tracing before:", tracemalloc.is_tracing(), flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
        print("tracing after:", tracemalloc.is_tracing(), flush=True)
        held = [bytearray(4096) for _ in range(2000)]  # 8 MiB held by line 9
        os.kill(os.getpid(), signal.SIGUSR1)
        for thread in threading.enumerate():
            if thread.name == "memory-report":
                thread.join()
        print("tracing at the end:", tracemalloc.is_tracing(), flush=True)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "tracing before: False" in result.stdout and "tracing after: True" in result.stdout
    assert "tracing at the end: False" in result.stdout  # the report ends the tracing
    lines = result.stderr.splitlines()
    assert lines[0].startswith("memory report: tracing allocations from now on")
    assert lines[1].startswith("memory report: ") and "MiB traced" in lines[1]
    assert float(lines[1].split()[2]) < 12  # the 16 MiB from before tracing are not counted
    size, site = lines[2].removeprefix("memory report: ").split(" MiB in ")
    assert float(size) >= 7.5 and site.endswith("at <string>:9 <- <string>:9")  # the largest holder first
    assert any(line.startswith("memory report by file: ") for line in lines)
