"""Fixtures: real Cassandra nodes on loopback, started by PID and stopped by PID.

The single node (127.0.10.1) is shared by the whole session; the 3-node ring (127.0.20.1..) starts only when a test
asks for it. Both run beside a developer's own `ringfeed local` ring (127.0.0.x) without conflict.
Set RINGFEED_TEST_KEEP=1 to leave them running and reuse them in the next run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from ringfeed.connection import ClusterAddress
from ringfeed.local import LocalRing, RingSettings
from ringfeed.local.jars import cache_dir

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("RINGFEED_TEST_STATE", REPO / ".state" / "test"))
KEEP = os.environ.get("RINGFEED_TEST_KEEP") == "1"
# Another address and JMX port for the shared node (and JMX ports for the ring): two test sessions side by side
# (with their own RINGFEED_TEST_STATE) each get one.
NODE_PREFIX = os.environ.get("RINGFEED_TEST_NODE_PREFIX", "127.0.10.")
NODE_JMX_BASE = int(os.environ.get("RINGFEED_TEST_NODE_JMX_BASE", "7300"))
RING_JMX_BASE = int(os.environ.get("RINGFEED_TEST_RING_JMX_BASE", "7400"))


def check_metrics(exposition: str) -> None:
    """Prometheus' own linter (`promtool check metrics`: naming, units, help, types) passes on an exposition; `make`
    installs promtool (make prometheus)."""
    promtool = cache_dir() / "prometheus" / "usr" / "bin" / "promtool"
    assert promtool.exists(), f"{promtool} is missing: run make prometheus"
    result = subprocess.run([str(promtool), "check", "metrics"], input=exposition, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0 and not result.stdout.strip(), f"promtool: {result.stdout}{result.stderr}"


class CassandraFixture:
    """A running local ring as tests see it: addresses, a driver session, and crash/restart controls."""

    def __init__(self, ring: LocalRing):
        self.ring = ring
        self.port = 9042
        self._cluster = None

    @property
    def hosts(self) -> list[str]:
        return self.ring.hosts

    @property
    def address(self) -> ClusterAddress:
        return ClusterAddress(tuple(self.hosts), self.port)

    def session(self):
        """A cassandra-driver session (shared, created on first use)."""
        if self._cluster is None:
            from cassandra.cluster import Cluster
            from cassandra.policies import ConstantReconnectionPolicy

            self._cluster = Cluster(self.hosts, port=self.port, protocol_version=5,
                                    reconnection_policy=ConstantReconnectionPolicy(0.5, max_attempts=None))
            self._session = self._cluster.connect()
        return self._session

    def kill(self, index: int = 1) -> None:
        self.ring.kill_node(index)

    def restart(self, index: int = 1) -> None:
        self.ring.start_node(index)

    @contextlib.contextmanager
    def frozen(self, index: int = 1):
        """A node that keeps its connections open and answers nothing (SIGSTOP), as a node stalled by a long GC pause
        or a hung disk does; it goes on (SIGCONT) when the block ends."""
        pid = self.ring.pid(index)
        assert pid is not None, f"node {index} is not running"
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    @staticmethod
    def wait_reachable(driver_session, timeout_s: float = 60) -> None:
        """Poll until a driver session reaches the ring again (after a restart), with a deadline."""
        from cassandra.cluster import NoHostAvailable

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                driver_session.execute("SELECT release_version FROM system.local")
                return
            except NoHostAvailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        if self._cluster is not None:
            self._cluster.shutdown()


def _start(name: str, nodes: int, settings: RingSettings) -> CassandraFixture:
    ring = LocalRing(STATE / name, settings)
    if not KEEP:
        ring.down(purge=True)
        ring = LocalRing(STATE / name, settings)
    ring.up(nodes)
    return CassandraFixture(ring)


def _stop(fixture: CassandraFixture) -> None:
    fixture.close()
    if not KEEP:
        fixture.ring.down(purge=True)


@pytest.fixture(scope="session")
def cassandra_node():
    # TLS is optional on this node: plain clients (most tests) and TLS clients (test_tls.py) both connect.
    fixture = _start("node", 1, RingSettings(cluster_name="ringfeed-test", address_prefix=NODE_PREFIX,
                                             jmx_base=NODE_JMX_BASE, heap="768M", ring_delay_ms=1000, tls=True))
    yield fixture
    _stop(fixture)


@pytest.fixture(scope="session")
def cassandra_ring():
    fixture = _start("ring", 3, RingSettings(cluster_name="ringfeed-test-ring", address_prefix="127.0.20.",
                                             jmx_base=RING_JMX_BASE, heap="512M", ring_delay_ms=5000))
    yield fixture
    _stop(fixture)


@pytest.fixture(scope="session")
def password_node():
    """A node of its own (127.0.31.1) that asks clients to log in: Cassandra's default superuser cassandra/cassandra.
    Tests may stop and restart it (never the shared node)."""
    fixture = _start("password-node", 1, RingSettings(cluster_name="ringfeed-test-auth", address_prefix="127.0.31.",
                                                      jmx_base=7500, heap="512M", ring_delay_ms=1000,
                                                      password_auth=True))
    yield fixture
    _stop(fixture)


@pytest.fixture
def store(cassandra_node):
    from ringfeed.store import Store

    with Store(cassandra_node.address) as s:
        yield s


@pytest.fixture
def dataset_name():
    """A fresh, valid dataset name per test."""
    return "t_" + uuid.uuid4().hex[:12]


def ingest_demo_slides(store, name: str, folder: Path, split: str = "s") -> None:
    """The demo slide set (6 patients) as dataset `name`, made again, with a 3:1 split (train, val) by patient."""
    from ringfeed.demo import make_demo_set
    from ringfeed.ingest import ingest
    from ringfeed.schema import Column, DatasetSchema, Encoding
    from ringfeed.splits import SplitSpec, create_split

    if name in {d.schema.name for d in store.datasets()}:  # left by an earlier run with RINGFEED_TEST_KEEP=1
        store.drop_dataset(name, force=True)
    demo = make_demo_set(folder, patients=6)
    store.create_dataset(DatasetSchema(
        name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
        Encoding("jpeg"), metadata=(Column("scanner", "text"),)))
    ingest(store, name, str(demo.manifest))
    create_split(store, name, split, SplitSpec(ratios=(3, 1), names=("train", "val"), group_by=("patient_id",)))
