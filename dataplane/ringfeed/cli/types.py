"""The value types of the CLI's options: a bad value is click's usage error (one line, exit 2), found before any
server is reached, never a traceback or a JVM that fails to start.

Every option that is a port, a count, a size or a list of numbers takes one of these instead of parsing its text in
the command (``dataplane/tests/unit/test_cli_values.py`` tries each kind of bad value on every command).
"""

from __future__ import annotations

import re

import click

PORT = click.IntRange(1, 65535)
COUNT = click.IntRange(min=1)  # nodes, workers, requests in flight, epochs, batch sizes: at least one
NON_NEGATIVE = click.IntRange(min=0)  # caps and seeds where 0 means "none" or is a value
SEED = click.IntRange(0, 2**64 - 1)
VERSION = click.IntRange(min=1)  # a stored split's version


class IntList(click.ParamType):
    """Comma-separated positive integers: ``3,224,224`` → (3, 224, 224)."""

    name = "N,N,…"

    def __init__(self, example: str):
        self.example = example

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        parts = [part.strip() for part in str(value).split(",") if part.strip()]
        if not parts or not all(part.isdigit() and int(part) > 0 for part in parts):
            self.fail(f"{value!r}: give comma-separated positive integers, e.g. {self.example}", param, ctx)
        return tuple(int(part) for part in parts)


class NumberRange(click.ParamType):
    """Two positive numbers ``MIN,MAX``, each a decimal or a fraction: ``0.08,1`` → (0.08, 1.0), ``3/4,4/3``."""

    name = "MIN,MAX"

    def __init__(self, example: str):
        self.example = example

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        parts = str(value).split(",")
        low, high = (_positive_number(part) for part in parts) if len(parts) == 2 else (None, None)
        if low is None or high is None or low > high:
            self.fail(f"{value!r}: give MIN,MAX, two positive numbers or fractions with MIN <= MAX, e.g. "
                      f"{self.example}", param, ctx)
        return low, high


def _positive_number(text: str) -> float | None:
    """A decimal or a fraction with an integer denominator, above zero; None for anything else."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:/(\d+))?\s*", text)
    if not match or match[2] is not None and int(match[2]) == 0:
        return None
    number = float(match[1]) / int(match[2] or 1)
    return number if number > 0 else None


_BYTE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


class ByteSize(click.ParamType):
    """A size in bytes: ``1GiB``, ``512MiB``, ``2G``, ``1500000``."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?\s*", str(value).lower())
        if not match or float(match[1]) <= 0:
            self.fail(f"{value!r} is not a size (e.g. 512MiB, 2GiB, 4G)", param, ctx)
        return int(float(match[1]) * _BYTE_UNITS[match[2] or ""])


class JvmSize(click.ParamType):
    """A JVM memory size as -Xmx takes it: ``768M``, ``1g``, ``2048m`` (checked here: a JVM given another would
    refuse to start, after the wait for it)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        text = str(value)
        if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]?", text):
            self.fail(f"{text!r} is not a JVM memory size (e.g. 768M, 1g, 2G)", param, ctx)
        return text
