"""Which ring to talk to, as one value: read from a Dataset's ``spec.storage`` or from the environment and command-line
options, rendered into a Job's environment, so the operator, its Jobs and the CLI name a ring the same way.

A ``RingRef`` holds no secret: hashable and printable, it keys caches and travels in a Job's environment. What logs
in is resolved by whoever holds it (``RingRef.login``): the CLI from its options, the operator from the Secrets
``RingSecrets`` names. ``connect`` is the one way the operator opens a ring.

Two kinds of ring: ``external`` (contact points) and ``ring`` (a Ring object of the Dataset's namespace, which the
operator provisions through cass-operator; ``ProvisionedRing`` names what it is made of).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ringfeed.connection import ClusterAddress
from ringfeed.errors import RingfeedError, StorageNotSupported, ring_error, ring_failures

if TYPE_CHECKING:
    from ringfeed.store import Store

HOSTS_ENV = "RINGFEED_HOSTS"
PORT_ENV = "RINGFEED_PORT"
LOCAL_DC_ENV = "RINGFEED_LOCAL_DC"
TLS_CA_FILE_ENV = "RINGFEED_TLS_CA_FILE"
TLS_SERVER_NAME_ENV = "RINGFEED_TLS_SERVER_NAME"
USERNAME_ENV = "RINGFEED_USERNAME"
PASSWORD_ENV = "RINGFEED_PASSWORD"
# A folder holding the login as files `username` and `password` (a mounted Secret): how the operator's Pods get it,
# never as environment variables, which any process of the container's user can read (/proc/<pid>/environ).
LOGIN_DIR_ENV = "RINGFEED_LOGIN_DIR"
JOB_LOGIN_DIR = "/etc/ringfeed/login"
LOGIN_FILES = ("username", "password")
DEFAULT_HOSTS = "127.0.0.1"  # the ring of `ringfeed local up`
DEFAULT_PORT = 9042
JOB_TLS_CA_FILE = "/etc/ringfeed/tls/ca.crt"  # where a Job finds the nodes' CA certificate (its Secret mounted)


def _external(storage: Mapping) -> Mapping:
    """spec.storage.external, the ring of a Dataset without spec.storage.ring."""
    if "external" not in storage:
        raise StorageNotSupported("spec.storage.k8ssandra: a K8ssandraCluster is not a kind of ring Ringfeed "
                                  "reaches; use spec.storage.ring (a Ring the operator provisions) or "
                                  "spec.storage.external")
    return storage["external"]


@dataclasses.dataclass(frozen=True)
class ProvisionedRing:
    """A Ring object and the names of what the operator makes of it through cass-operator: the Cassandra cluster
    and its one datacenter (a CassandraDatacenter), both named after the Ring, the Service its clients connect to,
    and the Secrets of the superuser and of the read-only role."""

    name: str

    @property
    def datacenter(self) -> str:
        """The CassandraDatacenter's name, its Cassandra datacenter's and its cluster's."""
        return self.name

    @property
    def service(self) -> str:
        """cass-operator's Service of the datacenter's ready nodes: <cluster>-<datacenter>-service (headless)."""
        return f"{self.name}-{self.datacenter}-service"

    def host(self, namespace: str | None) -> str:
        """The Service's host name: qualified by the namespace where one is given (the operator runs in its own),
        relative otherwise (a Pod of the Ring's namespace resolves it through its DNS search path)."""
        return f"{self.service}.{namespace}.svc" if namespace else self.service

    @property
    def ca_secret(self) -> str:
        """The Ring's CA (certificate and key: the operator's alone; clients mount its ca.crt)."""
        return f"{self.name}-ca"

    @property
    def node_tls_secret(self) -> str:
        """The nodes' key and certificate for CQL and internode TLS (mounted into the Cassandra containers)."""
        return f"{self.name}-node-tls"

    @property
    def management_server_secret(self) -> str:
        """The Management API's server certificate (cass-operator's format: ca.crt, tls.crt, tls.key)."""
        return f"{self.name}-maac-server"

    @property
    def management_client_secret(self) -> str:
        """cass-operator's client certificate for the Management API (mutual TLS)."""
        return f"{self.name}-maac-client"

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every Secret the operator makes for the Ring (credentials and certificates)."""
        return (self.superuser_secret, self.reader_secret, self.ca_secret, self.node_tls_secret,
                self.management_server_secret, self.management_client_secret)

    def server_names(self, namespace: str) -> tuple[str, ...]:
        """Every name a client may reach the nodes by, as ``host`` gives it: what the nodes' certificate names."""
        return (self.service, f"{self.service}.{namespace}", f"{self.service}.{namespace}.svc",
                f"{self.service}.{namespace}.svc.cluster.local")

    @property
    def superuser_secret(self) -> str:
        return f"{self.name}-superuser"

    @property
    def reader_secret(self) -> str:
        return f"{self.name}-reader"

    @property
    def superuser_role(self) -> str:
        """The superuser's role in Cassandra (the superuser Secret's username)."""
        return f"{self.name.replace('-', '_')}_superuser"

    @property
    def reader_role(self) -> str:
        """The read-only role's name in Cassandra (the reader Secret's username)."""
        return f"{self.name.replace('-', '_')}_reader"


@dataclasses.dataclass(frozen=True)
class RingRef:
    """A ring: its contact points and CQL port, the datacenter requests stay in, whether it is reached with TLS.

    ``tls``: connections verify each node's certificate against a CA certificate that the login supplies, and its
    name: the node's IP address, or ``tls_server_name`` where one is given (a Ring's: its Service's host name).
    ``local_dc``: requests go to that datacenter's nodes only (token-aware within it).
    """

    hosts: tuple[str, ...] = (DEFAULT_HOSTS,)
    port: int = DEFAULT_PORT
    local_dc: str | None = None
    tls: bool = False
    tls_server_name: str | None = None

    def __post_init__(self) -> None:
        if not self.hosts or not all(self.hosts):
            raise RingfeedError(f"no contact points in {self.hosts!r}: name at least one node of the ring",
                                f"--hosts ({HOSTS_ENV}) takes comma-separated host names or addresses")
        if not 0 < self.port < 65536:
            raise RingfeedError(f"port {self.port} is not a TCP port (1-65535)", f"--port ({PORT_ENV}) sets it")

    @classmethod
    def parse(cls, hosts: str, port: int | str, local_dc: str | None, tls: bool,
              tls_server_name: str | None = None) -> RingRef:
        """From the strings of the command line or the environment: comma-separated hosts, empty = no datacenter
        or server name."""
        try:
            number = int(port)
        except ValueError:
            raise RingfeedError(f"port {port!r} is not a number", f"--port ({PORT_ENV}) sets it") from None
        return cls(tuple(h.strip() for h in hosts.split(",") if h.strip()), number, local_dc or None, tls,
                   tls_server_name or None)

    @classmethod
    def from_spec(cls, storage: Mapping, namespace: str | None = None) -> RingRef:
        """A Dataset's spec.storage (the schema has validated it); StorageNotSupported for a K8ssandraCluster. A
        Ring is reached through its Service, in ``namespace`` (the Dataset's) when given (see
        ``ProvisionedRing.host``), with TLS, its nodes' certificates checked against that host name, and its
        datacenter is the local one."""
        if "ring" in storage:
            ring = ProvisionedRing(storage["ring"]["name"])
            host = ring.host(namespace)
            return cls((host,), DEFAULT_PORT, ring.datacenter, True, host)
        external = _external(storage)
        return cls(tuple(external["contactPoints"]), external.get("port", DEFAULT_PORT),
                   external.get("localDatacenter") or None, bool((external.get("tls") or {}).get("enabled")))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> RingRef:
        """What ``to_env`` wrote (a Job's environment), or a user's RINGFEED_* variables."""
        return cls.parse(environ.get(HOSTS_ENV, DEFAULT_HOSTS), environ.get(PORT_ENV, DEFAULT_PORT),
                         environ.get(LOCAL_DC_ENV), bool(environ.get(TLS_CA_FILE_ENV)),
                         environ.get(TLS_SERVER_NAME_ENV))

    def to_env(self) -> dict[str, str]:
        """The variables from which a Job's ``ringfeed`` finds this ring; the login (a Secret's values, the CA
        certificate mounted at JOB_TLS_CA_FILE) is the Job builder's to add."""
        env = {HOSTS_ENV: ",".join(self.hosts), PORT_ENV: str(self.port)}
        if self.local_dc:
            env[LOCAL_DC_ENV] = self.local_dc
        if self.tls:
            env[TLS_CA_FILE_ENV] = JOB_TLS_CA_FILE
        if self.tls_server_name:
            env[TLS_SERVER_NAME_ENV] = self.tls_server_name
        return env

    @property
    def identity(self) -> tuple:
        """What tells rings apart: the same contact points, in any order, and port are one ring."""
        return tuple(sorted(self.hosts)), self.port

    def login(self, username: str | None = None, password: str | None = None,
              tls_ca_file: str | None = None) -> ClusterAddress:
        """This ring with what logs in to it: the address a Store or native session connects to."""
        if self.tls != bool(tls_ca_file):
            raise RingfeedError("TLS needs a CA certificate file, and a CA certificate file means TLS: "
                                f"{self} with tls_ca_file={tls_ca_file!r}")
        return ClusterAddress(self.hosts, self.port, username, password, tls_ca_file, self.local_dc,
                              self.tls_server_name)


@dataclasses.dataclass(frozen=True)
class SecretKey:
    """One key of a Kubernetes Secret in the Dataset's namespace."""

    name: str
    key: str


@dataclasses.dataclass(frozen=True)
class CredentialsSecret:
    """The Kubernetes Secret, in the Dataset's namespace, holding the username and password of the ring."""

    name: str
    username_key: str = "username"
    password_key: str = "password"


def _credentials(secret: Mapping | None) -> CredentialsSecret | None:
    if not secret:
        return None
    return CredentialsSecret(secret["name"], secret.get("usernameKey", "username"),
                             secret.get("passwordKey", "password"))


def writer_secret(dataset: str) -> CredentialsSecret:
    """The Secret of a Dataset's writer role on its Ring (made by the operator): its ingest and split Jobs' login."""
    return CredentialsSecret(f"{dataset}-writer")


def writer_role(keyspace: str) -> str:
    return f"{keyspace}_writer"


@dataclasses.dataclass(frozen=True)
class RingSecrets:
    """Where a Dataset keeps what logs in to its ring: Secrets the operator reads, and its Jobs get as
    ``secretKeyRef`` variables and a mounted CA certificate.

    ``credentials`` may write (the operator; ingest and split Jobs on an external ring); ``reader`` only reads (a
    loader, a cache tier): the read-only role of a Ring, or an external ring's readCredentialsSecret (without one,
    the credentials).
    """

    credentials: CredentialsSecret | None = None
    ca_certificate: SecretKey | None = None
    reader: CredentialsSecret | None = None

    @classmethod
    def from_spec(cls, storage: Mapping) -> RingSecrets:
        """spec.storage.external.credentialsSecret, readCredentialsSecret and tls.caSecret, defaults filled in; a
        Ring's superuser and reader Secrets."""
        if "ring" in storage:
            ring = ProvisionedRing(storage["ring"]["name"])
            return cls(credentials=CredentialsSecret(ring.superuser_secret),
                       ca_certificate=SecretKey(ring.ca_secret, "ca.crt"),
                       reader=CredentialsSecret(ring.reader_secret))
        external = _external(storage)
        tls = external.get("tls") or {}
        return cls(
            credentials=_credentials(external.get("credentialsSecret")),
            ca_certificate=(SecretKey(tls["caSecret"]["name"], tls["caSecret"].get("key", "ca.crt"))
                            if tls.get("enabled") else None),
            reader=_credentials(external.get("readCredentialsSecret")),
        )

    @property
    def read_only(self) -> CredentialsSecret | None:
        """What a loader logs in with: the reader where there is one, else the credentials."""
        return self.reader or self.credentials


def read_login(directory: str | os.PathLike) -> tuple[str, str]:
    """(username, password) from the files of a login folder (LOGIN_DIR_ENV), trailing newlines dropped."""
    folder = Path(directory)
    try:
        username, password = ((folder / name).read_text().rstrip("\n") for name in LOGIN_FILES)
    except OSError as error:
        raise RingfeedError(f"cannot read the ring login in {folder}: {error.strerror}: {error.filename}") from None
    return username, password


@contextlib.contextmanager
def ring_errors(address: ClusterAddress, doing: str | None = None) -> Iterator[None]:
    """Failures of the ring inside the block, from either client, raised as the RingfeedError of their kind."""
    try:
        yield
    except ring_failures() as exc:
        raise ring_error(exc, doing, address.where) from None


def connect(address: ClusterAddress) -> Store:
    """A Store on the ring at ``address``, or the RingfeedError saying why not (RingUnavailable: unreachable)."""
    from ringfeed.store import Store

    with ring_errors(address):
        return Store(address)
