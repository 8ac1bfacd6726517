"""How kopf retries a failed request to the API server: a 429 of API Priority and Fairness, a 5xx, a dropped
connection. kopf's default (1, 1, 2, 3, 5, 8, 13, 21 s, then the handler fails and is retried a minute later) sends
the requests a burst got refused back together, and gives up while the burst lasts (make bench-operator-scale)."""

from __future__ import annotations

import random
from collections.abc import Iterator

# 2 s doubling to 8 s, then every 10 s: about two minutes of retries before a handler fails. Not shorter: kopf waits
# at least the 429's Retry-After (whole seconds), which would bring shorter delays back together.
DELAYS = (2.0, 4.0, 8.0, *(10.0,) * 11)


class JitteredDelays:
    """The delays before each retry, each drawn from ±50 % of its DELAYS entry so that refused requests come back
    spread out. kopf iterates its `error_backoffs` once per request: this is iterable again and again."""

    def __init__(self, delays: tuple[float, ...] = DELAYS, rng: random.Random | None = None):
        self._delays = delays
        self._rng = rng or random.Random()

    def __len__(self) -> int:  # kopf logs "attempt #k/n"
        return len(self._delays)

    def __iter__(self) -> Iterator[float]:
        for delay in self._delays:
            yield delay * self._rng.uniform(0.5, 1.5)
