"""A watching process of the benchmark's own: spawned (not forked from a process with threads), it sends what it
sees through a pipe, and a thread here hands each message on. In the benchmark's process a watch would wait for the
interpreter, busy with the create calls of a burst, and note events late."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any


class Spawned:
    """`target(*args, sending_end)` in a process of its own; `receive(message)` here for each message it sends."""

    def __init__(self, target: Callable[..., None], args: tuple, name: str, receive: Callable[[Any], None]):
        spawn = multiprocessing.get_context("spawn")
        self._receiving, self._sending = spawn.Pipe(duplex=False)
        self._process = spawn.Process(target=target, args=(*args, self._sending), daemon=True, name=name)
        self._receive = receive

    def start(self) -> None:
        self._process.start()
        self._sending.close()  # the child's end: held only there
        threading.Thread(target=self._relay, daemon=True).start()

    def stop(self) -> None:
        self._process.terminate()

    def _relay(self) -> None:
        try:
            while True:
                self._receive(self._receiving.recv())
        except EOFError:  # its process ended
            return
