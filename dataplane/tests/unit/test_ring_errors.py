"""ring_error: every failure of the ring, from the native client or the Python driver, becomes the RingfeedError
of its kind with one line that says what to do."""

from __future__ import annotations

import cassandra
import pytest
from cassandra.cluster import NoHostAvailable

from ringfeed import _native
from ringfeed.errors import (
    AuthenticationFailed,
    RingfeedError,
    RingTimeout,
    RingUnavailable,
    SchemaMismatch,
    ring_error,
)

WHERE = "127.0.0.9:9042"


@pytest.mark.parametrize("failure, kind, message", [
    (_native.Unreachable("cannot connect to 127.0.0.9:9042: refused"), RingUnavailable,
     "reading: cannot reach Cassandra at 127.0.0.9:9042, or too few replicas are up (cannot connect"),
    (_native.AuthenticationFailed("bad login"), AuthenticationFailed,
     "reading: Cassandra at 127.0.0.9:9042 refused the credentials or their permissions (bad login); check"),
    (_native.Timeout("read timed out"), RingTimeout,
     "reading: Cassandra at 127.0.0.9:9042 did not answer in time (read timed out); it may be overloaded"),
    (_native.Rejected("unconfigured table"), SchemaMismatch,
     "reading: Cassandra at 127.0.0.9:9042 rejected the request (unconfigured table); the tables no longer match"),
    (_native.RingError("server error"), RingfeedError,
     "reading: Cassandra at 127.0.0.9:9042 failed (server error); run it again once the ring is healthy"),
    (NoHostAvailable("Unable to connect", {"127.0.0.9:9042": ConnectionRefusedError(111, "refused")}),
     RingUnavailable, "reading: cannot reach Cassandra at 127.0.0.9:9042 ([Errno 111] refused); is the ring up"),
    (NoHostAvailable("Unable to connect", {"127.0.0.9:9042": cassandra.AuthenticationFailed("bad password")}),
     AuthenticationFailed, "reading: Cassandra at 127.0.0.9:9042 refused the credentials (bad password); check"),
    (cassandra.OperationTimedOut("no response"), RingTimeout, "reading: Cassandra at 127.0.0.9:9042 did not answer"),
    (cassandra.Unavailable("2 replicas needed"), RingUnavailable, "reading: cannot reach Cassandra at 127.0.0.9"),
    (cassandra.InvalidRequest("Undefined column name x"), SchemaMismatch,
     "reading: Cassandra at 127.0.0.9:9042 rejected the request (Undefined column name x)"),
])
def test_each_kind_of_failure_becomes_its_ringfeed_error(failure, kind, message):
    error = ring_error(failure, "reading", WHERE)
    assert type(error) is kind
    assert str(error).startswith(message)
    assert "\n" not in str(error)


def test_an_error_already_ringfeeds_own_is_kept():
    original = SchemaMismatch("as it was")
    assert ring_error(original, "reading") is original
