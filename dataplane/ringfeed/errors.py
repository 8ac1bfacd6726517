"""Errors that reach users: each carries a one-line message that says what happened and what to do.

Failures of the ring come from two clients, the native extension (``ringfeed._native``: one exception class per kind
of failure) and the Python driver (control path); ``ring_error`` turns either into the subclass below that names
the kind, in one place.
"""

from __future__ import annotations


class RingfeedError(Exception):
    """A user-facing failure; the CLI prints its message on one line and exits non-zero.

    ``cli_hint`` names the command-line options that fix it: the CLI prints it after the message, while other
    readers of the message (the operator's conditions, Python callers) have no such options."""

    def __init__(self, message: str = "", cli_hint: str = ""):
        super().__init__(message)
        self.cli_hint = cli_hint


class RingUnavailable(RingfeedError):
    """No node of the ring answered, connections broke, or too few replicas are alive."""


class StorageNotSupported(RingfeedError):
    """A Dataset's spec.storage names a kind of ring this release cannot reach (K8ssandra)."""


class AuthenticationFailed(RingfeedError):
    """The ring refused the credentials (or needs some and none were given)."""


class RingTimeout(RingfeedError):
    """The ring did not answer in time (overloaded, or a node stalls)."""


class SchemaMismatch(RingfeedError):
    """Data or tables do not have the shape the dataset's schema says."""


class DatasetNotFound(RingfeedError):
    pass


class SplitNotFound(RingfeedError):
    pass


class PartNotFound(RingfeedError):
    pass


class SampleNotFound(RingfeedError):
    pass


CREDENTIALS = "check the username and password"
CREDENTIALS_HINT = "--username/--password (RINGFEED_USERNAME/RINGFEED_PASSWORD) set them"
RING_DOWN = "is the ring up and are its contact points right?"
RING_DOWN_HINT = ("--hosts (RINGFEED_HOSTS) names the contact points; `ringfeed local status` shows a local ring, "
                  "`ringfeed local up` starts one")


def ring_failures() -> tuple[type[BaseException], ...]:
    """The exception classes that ``ring_error`` translates."""
    import cassandra
    from cassandra.cluster import NoHostAvailable

    from ringfeed import _native

    return _native.RingError, ConnectionError, NoHostAvailable, cassandra.DriverException


def ring_error(exc: BaseException, doing: str | None = None, where: str | None = None) -> RingfeedError:
    """The RingfeedError for a failure of the ring at ``where`` (its contact points, when known) while ``doing``
    something (e.g. "reading demo.data_by_uuid"; None when connecting)."""
    import cassandra
    from cassandra.cluster import NoHostAvailable

    from ringfeed import _native

    if isinstance(exc, RingfeedError):
        return exc
    prefix = f"{doing}: " if doing else ""
    ring = f"Cassandra at {where}" if where else "Cassandra"
    detail = _one_line(exc)
    if isinstance(exc, NoHostAvailable):
        causes = list((exc.errors or {}).values())
        if causes and all(isinstance(cause, cassandra.AuthenticationFailed) for cause in causes):
            return AuthenticationFailed(f"{prefix}{ring} refused the credentials ({_one_line(causes[0])}); "
                                        f"{CREDENTIALS}", CREDENTIALS_HINT)
        return RingUnavailable(f"{prefix}cannot reach {ring} ({_one_line(causes[0] if causes else exc)}); "
                               f"{RING_DOWN}", RING_DOWN_HINT)
    if isinstance(exc, (_native.AuthenticationFailed, cassandra.AuthenticationFailed, cassandra.Unauthorized)):
        return AuthenticationFailed(f"{prefix}{ring} refused the credentials or their permissions ({detail}); "
                                    f"{CREDENTIALS}", CREDENTIALS_HINT)
    if isinstance(exc, (_native.Unreachable, cassandra.Unavailable)):
        return RingUnavailable(f"{prefix}cannot reach {ring}, or too few replicas are up ({detail}); "
                               f"{RING_DOWN}", RING_DOWN_HINT)
    if isinstance(exc, (_native.Timeout, cassandra.OperationTimedOut, cassandra.Timeout)):
        return RingTimeout(f"{prefix}{ring} did not answer in time ({detail}); it may be overloaded or a node "
                           "failing: run it again, with less concurrency if it persists")
    if isinstance(exc, (_native.Rejected, cassandra.RequestValidationException)):
        return SchemaMismatch(f"{prefix}{ring} rejected the request ({detail}); the tables no longer match the "
                              "dataset's schema (changed outside Ringfeed?): restore them, or drop and re-create "
                              "the dataset")
    if isinstance(exc, ConnectionError):  # native connect problems of configuration (TLS, datacenter)
        return RingUnavailable(prefix + detail)
    return RingfeedError(f"{prefix}{ring} failed ({detail}); run it again once the ring is healthy")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
