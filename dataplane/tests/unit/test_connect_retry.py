"""A Store's first connection keeps trying for RINGFEED_CONNECT_RETRY_S while the ring refuses it (a new Pod not yet
admitted by the NetworkPolicy engine), and gives up at once without it. A closed port on loopback stands for the
refusing ring: no server is needed."""

from __future__ import annotations

import socket
import time

import pytest

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError
from ringfeed.store import Store


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed once the block ends: connections are refused


@pytest.mark.parametrize("retry_s", ["", "0", "2"])
def test_a_refused_first_connection_is_retried_for_the_time_given(retry_s, monkeypatch):
    monkeypatch.setenv("RINGFEED_CONNECT_RETRY_S", retry_s)
    started = time.monotonic()
    with pytest.raises(RingfeedError, match="cannot reach Cassandra"):
        Store(ClusterAddress(("127.0.0.1",), closed_port()), connect_timeout_s=1)
    elapsed = time.monotonic() - started
    if retry_s in ("", "0"):
        assert elapsed < 2, elapsed
    else:
        assert 2 <= elapsed < 8, elapsed
