"""The acceptor (acceptor.py) in a process of its own, so that its threads never wait for the operator's interpreter.

In a burst the operator's one interpreter lock is held by kopf's event loop and its 16 handler threads. With the
acceptor's threads in the same process, the Datasets of a burst of 1,000 got their first status 4.5 s (p50) after
their event reached the benchmark, while the API server answered the benchmark's own create calls in 0.04 s (make
bench-operator-scale). In a child process the acceptor's watches and PATCHes have an interpreter of their own.

The child (`python -m ringfeed_operator.acceptor_process`) loads the kubernetes client's configuration as the
operator does, and writes one line per first status to its standard output: `<kind> <result> <seconds or ->`. The
operator reads them into its metrics, and starts the child again if it ends. The child ends when its standard input
closes: when the operator ends, however it ends.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ringfeed_operator.acceptor import RETRY_S, Acceptor, Report
from ringfeed_operator.kube import load_configuration

if TYPE_CHECKING:  # the child never imports kopf, which the metrics module does: ~40 MiB less
    from ringfeed_operator.metrics import Metrics

# A child that ran this long before it ended is started again after RETRY_S[0]; one that ended sooner waits longer.
STEADY_S = 60.0
STOP_S = 5.0  # how long close() waits for the child to end after SIGTERM
logger = logging.getLogger(__name__)


def recorded_in(metrics: Metrics) -> Report:
    """A report that counts each result and observes the wait of each status written."""
    def record(kind: str, result: str, seconds: float | None) -> None:
        metrics.first_statuses.labels(kind, result).inc()
        if seconds is not None:
            metrics.first_status_seconds.labels(kind).observe(seconds)
    return record


def report_line(kind: str, result: str, seconds: float | None) -> bytes:
    return f"{kind} {result} {'-' if seconds is None else f'{seconds:.3f}'}\n".encode()


def parse_report(line: bytes) -> tuple[str, str, float | None]:
    kind, result, seconds = line.decode().split()
    return kind, result, None if seconds == "-" else float(seconds)


class AcceptorProcess:
    """Runs the acceptor in a child process and relays its reports to `report`."""

    def __init__(self, report: Report, namespaces: Sequence[str], verbose: bool = False):
        self._report = report
        self._command = [sys.executable, "-m", __name__, *(["--verbose"] if verbose else []),
                         *(f"--namespace={namespace}" for namespace in namespaces)]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self._relay = threading.Thread(target=self._run, daemon=True, name="acceptor-relay")

    @classmethod
    def connect(cls, metrics: Metrics, namespaces: Sequence[str], verbose: bool = False) -> AcceptorProcess:
        return cls(recorded_in(metrics), namespaces, verbose)

    @property
    def pid(self) -> int | None:
        with self._lock:
            return self._child.pid if self._child is not None else None

    def start(self) -> None:
        self._relay.start()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            child = self._child
        if child is not None:
            child.terminate()
            try:
                child.wait(STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
        self._relay.join(STOP_S)

    def _run(self) -> None:
        retry_s = RETRY_S[0]
        while not self._stop.is_set():
            started = time.monotonic()
            # stdin: the child reads it to its end, which comes when this process ends (its write end closes).
            child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            with self._lock:
                self._child = child
            if self._stop.is_set():  # closed while it started
                child.terminate()
            assert child.stdout is not None
            for line in child.stdout:
                try:
                    self._report(*parse_report(line))
                except ValueError:
                    logger.warning("The acceptor reported what it should not: %r", line[:200])
            code = child.wait()
            assert child.stdin is not None
            child.stdin.close()
            if self._stop.is_set():
                return
            retry_s = RETRY_S[0] if time.monotonic() - started >= STEADY_S else min(2 * retry_s, RETRY_S[1])
            logger.error("The acceptor's process ended (exit code %s); it starts again in %.0f s", code, retry_s)
            self._stop.wait(retry_s)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", action="append", default=[], help="a watched namespace (default: all)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    # The reports keep the standard output to themselves: anything else printed goes to the standard error.
    reports = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    load_configuration()

    def report(kind: str, result: str, seconds: float | None) -> None:
        os.write(reports, report_line(kind, result, seconds))  # one write under PIPE_BUF: whole, from any thread

    Acceptor.connect(report, args.namespace).start()
    sys.stdin.buffer.read()  # until the operator ends
    os._exit(0)  # the acceptor's threads are daemons mid-request: nothing of theirs is to be finished


if __name__ == "__main__":
    main()
