"""kopf's retries of a refused API request: spread out, for about two minutes, the same on every request."""

from __future__ import annotations

import random
import statistics

import kopf

from ringfeed_operator import main
from ringfeed_operator.api_retries import DELAYS, JitteredDelays


def test_each_request_gets_the_whole_jittered_sequence():
    delays = JitteredDelays(rng=random.Random(7))
    first, second = list(delays), list(delays)  # kopf iterates once per request
    assert len(first) == len(second) == len(delays) == len(DELAYS)
    assert first != second
    for drawn in (first, second):
        assert all(0.5 * nominal <= delay <= 1.5 * nominal for delay, nominal in zip(drawn, DELAYS, strict=True))
    assert 90 <= sum(DELAYS) <= 150  # about two minutes before a handler fails, not kopf's 54 s


def test_requests_refused_together_come_back_spread_out():
    delays = JitteredDelays(rng=random.Random(11))
    firsts = [next(iter(delays)) for _ in range(1000)]  # a burst of 1,000 requests refused at once
    assert 1.0 <= min(firsts) < 1.1 and 2.9 < max(firsts) <= 3.0
    assert statistics.pstdev(firsts) > 0.5  # uniform over 1-3 s: 0.577


def test_the_operator_retries_with_them():
    settings = kopf.OperatorSettings()
    main.configure(settings=settings)
    assert isinstance(settings.networking.error_backoffs, JitteredDelays)
