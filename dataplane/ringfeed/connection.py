"""Where the Cassandra ring is and how to log in: one value object shared by the control and the data path."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class ClusterAddress:
    """Contact points of a ring. Environment defaults match the local ring of ``ringfeed local up``."""

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_env(cls) -> ClusterAddress:
        """``RINGFEED_HOSTS`` (comma-separated), ``RINGFEED_PORT``, ``RINGFEED_USERNAME``, ``RINGFEED_PASSWORD``."""
        hosts = os.environ.get("RINGFEED_HOSTS", "127.0.0.1")
        return cls(
            hosts=tuple(h.strip() for h in hosts.split(",") if h.strip()),
            port=int(os.environ.get("RINGFEED_PORT", "9042")),
            username=os.environ.get("RINGFEED_USERNAME") or None,
            password=os.environ.get("RINGFEED_PASSWORD") or None,
        )
