"""Where the Cassandra ring is and how to log in: one value object shared by the control and the data path."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class ClusterAddress:
    """Contact points of a ring. Environment defaults match the local ring of ``ringfeed local up``.

    ``tls_ca_file``: a PEM CA certificate; when set, every connection uses TLS and verifies each node's certificate
    against that CA and the node's IP address.
    ``local_dc``: a datacenter name; when set, requests go to that datacenter's nodes only (token-aware within it),
    and connecting fails with the ring's datacenters when it has no node there.
    """

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    tls_ca_file: str | None = None
    local_dc: str | None = None

    @classmethod
    def from_env(cls) -> ClusterAddress:
        """``RINGFEED_HOSTS`` (comma-separated), ``RINGFEED_PORT``, ``RINGFEED_USERNAME``, ``RINGFEED_PASSWORD``,
        ``RINGFEED_TLS_CA_FILE``, ``RINGFEED_LOCAL_DC``."""
        hosts = os.environ.get("RINGFEED_HOSTS", "127.0.0.1")
        return cls(
            hosts=tuple(h.strip() for h in hosts.split(",") if h.strip()),
            port=int(os.environ.get("RINGFEED_PORT", "9042")),
            username=os.environ.get("RINGFEED_USERNAME") or None,
            password=os.environ.get("RINGFEED_PASSWORD") or None,
            tls_ca_file=os.environ.get("RINGFEED_TLS_CA_FILE") or None,
            local_dc=os.environ.get("RINGFEED_LOCAL_DC") or None,
        )

    @property
    def where(self) -> str:
        """The contact points as ``host:port, …``, for messages."""
        return ", ".join(f"{host}:{self.port}" for host in self.hosts)

    def native_session(self, consistency: str = "ONE"):
        """A native session (``ringfeed._native.Session``) to this ring; RingUnavailable or AuthenticationFailed
        (RingfeedError) when it cannot connect."""
        from ringfeed import _native
        from ringfeed.errors import ring_error, ring_failures

        try:
            return _native.Session(list(self.hosts), self.port, self.username, self.password, consistency,
                                   tls_ca_file=self.tls_ca_file, local_dc=self.local_dc or None)
        except ring_failures() as exc:
            raise ring_error(exc, where=self.where) from None
