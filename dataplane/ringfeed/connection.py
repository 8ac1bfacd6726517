"""Where the Cassandra ring is and how to log in: what the control and the data path connect to.

Which ring (``ringfeed.ring.RingRef``) and what logs in to it are resolved apart; ``RingRef.login`` joins them here."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ringfeed.ring import RingRef

# Seconds a new connection keeps trying while the ring refuses it (set in the operator's Pods; 0 by hand).
CONNECT_RETRY_ENV = "RINGFEED_CONNECT_RETRY_S"


@dataclasses.dataclass(frozen=True)
class ClusterAddress:
    """Contact points of a ring. Environment defaults match the local ring of ``ringfeed local up``.

    ``tls_ca_file``: a PEM CA certificate; when set, every connection uses TLS and verifies each node's certificate
    against that CA and the node's IP address, or ``tls_server_name`` where one is given (every node of a Ring
    carries its Service's name: the Pods' addresses are not known when their certificates are made).
    ``local_dc``: a datacenter name; when set, requests go to that datacenter's nodes only (token-aware within it),
    and connecting fails with the ring's datacenters when it has no node there.
    """

    hosts: tuple[str, ...] = ("127.0.0.1",)
    port: int = 9042
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    tls_ca_file: str | None = None
    local_dc: str | None = None
    tls_server_name: str | None = None

    @classmethod
    def from_env(cls) -> ClusterAddress:
        """The ring of ``RingRef.from_env`` (``RINGFEED_HOSTS``, comma-separated, ``RINGFEED_PORT``,
        ``RINGFEED_LOCAL_DC``, ``RINGFEED_TLS_CA_FILE``), logged in with ``RINGFEED_USERNAME``/``RINGFEED_PASSWORD``,
        else with the files of ``RINGFEED_LOGIN_DIR``."""
        from ringfeed.ring import LOGIN_DIR_ENV, PASSWORD_ENV, TLS_CA_FILE_ENV, USERNAME_ENV, RingRef, read_login

        username, password = os.environ.get(USERNAME_ENV) or None, os.environ.get(PASSWORD_ENV) or None
        if username is None and password is None and os.environ.get(LOGIN_DIR_ENV):
            username, password = read_login(os.environ[LOGIN_DIR_ENV])
        return RingRef.from_env().login(username, password, os.environ.get(TLS_CA_FILE_ENV) or None)

    @property
    def ring(self) -> RingRef:
        """Which ring this is, without what logs in to it."""
        from ringfeed.ring import RingRef

        return RingRef(self.hosts, self.port, self.local_dc, tls=bool(self.tls_ca_file),
                       tls_server_name=self.tls_server_name)

    @property
    def where(self) -> str:
        """The contact points as ``host:port, …``, for messages."""
        return ", ".join(f"{host}:{self.port}" for host in self.hosts)

    def native_session(self, consistency: str = "ONE", connections_per_node: int = 1):
        """A native session (``ringfeed._native.Session``) to this ring, with `connections_per_node` connections to
        each node; RingUnavailable or AuthenticationFailed (RingfeedError) when it cannot connect."""
        from ringfeed import _native
        from ringfeed.errors import ring_error, ring_failures

        try:
            return _native.Session(list(self.hosts), self.port, self.username, self.password, consistency,
                                   tls_ca_file=self.tls_ca_file, local_dc=self.local_dc or None,
                                   connections_per_node=connections_per_node, tls_server_name=self.tls_server_name)
        except ring_failures() as exc:
            raise ring_error(exc, where=self.where) from None
