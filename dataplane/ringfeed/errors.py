"""Errors that reach users: each carries a one-line message that names the problem."""


class RingfeedError(Exception):
    """A user-facing failure; the CLI prints its message on one line and exits non-zero."""


class DatasetNotFound(RingfeedError):
    pass
