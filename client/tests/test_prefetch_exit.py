"""A prefetch thread still running when the trainer's interpreter exits (it trained fewer epochs than its feed has,
without closing it) is stopped before the exit handlers registered ahead of it, such as torch's, run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TRAINER = textwrap.dedent("""
    import atexit, threading, time
    import ringfeed_client.feed as feed_module

    feed_module.EXIT_WAIT_S = 0.5
    # Registered before the prefetch starts, as torch's handlers are when torch is imported first.
    atexit.register(lambda: print("earlier handler: prefetch stopped",
                                  all(ahead.stopping.is_set() for ahead in feed_module._RUNNING)))

    class Stuck:  # a feed whose request never returns
        _lock = threading.Lock()
        def _next(self, **_):
            time.sleep(3600)

    stuck = Stuck()
    feed_module._Prefetch(stuck, lambda batch: batch, 1)
    time.sleep(0.2)
""")


def test_an_exiting_trainer_stops_its_prefetch_threads_first_and_does_not_wait_for_them_long():
    done = subprocess.run([sys.executable, "-c", TRAINER], capture_output=True, text=True, timeout=30,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "earlier handler: prefetch stopped True"
