"""The operator reaches rings through the data plane only: spec.storage is read by ringfeed.ring, the login comes
from the Secrets it names, and no module of the operator imports the Cassandra driver."""

from __future__ import annotations

import ast
from pathlib import Path

import kopf
import pytest
from prometheus_client import CollectorRegistry

import ringfeed_operator
from ringfeed.errors import RingfeedError, StorageNotSupported
from ringfeed.ring import RingRef
from ringfeed_operator import main
from ringfeed_operator import rings as rings_module
from ringfeed_operator.config import Config
from ringfeed_operator.context import Context
from ringfeed_operator.handlers.dataset import keyspace_index
from ringfeed_operator.metrics import Metrics
from ringfeed_operator.rings import Rings

STORAGE = {"external": {"contactPoints": ["cass-0.db"], "port": 9142,
                        "credentialsSecret": {"name": "cass", "usernameKey": "user", "passwordKey": "pass"},
                        "tls": {"enabled": True, "caSecret": {"name": "ring-ca", "key": "ca.pem"}}}}
K8SSANDRA = {"k8ssandra": {"clusterName": "ring"}}
SCHEMA = {"naturalKeys": [{"name": "path", "type": "text"}], "encoding": {"kind": "png"}}


class Secrets:
    """The Secrets of one namespace, as Kube.secret_values reads them."""

    def __init__(self, secrets: dict[str, dict[str, str]]):
        self.secrets = secrets

    def secret_values(self, namespace: str, name: str, *keys: str) -> list[str]:
        return [self.secrets[name][key] for key in keys]


def test_the_login_comes_from_the_secrets_the_spec_names():
    kube = Secrets({"cass": {"user": "u", "pass": "p"}, "ring-ca": {"ca.pem": "-----BEGIN CERTIFICATE-----"}})
    address = Rings(kube).address("ml", STORAGE)
    assert address.ring == RingRef.from_spec(STORAGE)
    assert (address.username, address.password) == ("u", "p")
    assert address.tls_ca_file and Path(address.tls_ca_file).read_text() == "-----BEGIN CERTIFICATE-----"
    kube.secrets["cass"]["pass"] = "rotated"
    assert Rings(kube).address("ml", STORAGE) != address  # a rotated password opens a new Store


class CountedSecrets(Secrets):
    def __init__(self, secrets: dict[str, dict[str, str]]):
        super().__init__(secrets)
        self.reads = 0

    def secret_values(self, namespace: str, name: str, *keys: str) -> list[str]:
        self.reads += 1
        return super().secret_values(namespace, name, *keys)


class Ring:
    """Stands in for the data plane's connect: takes the password it holds, refuses any other."""

    def __init__(self, password: str):
        self.password = password
        self.opened: list[str] = []

    def connect(self, address):
        if address.password != self.password:
            raise RingfeedError("Bad credentials")
        self.opened.append(address.password)
        return Opened()


class Opened:
    def close(self) -> None:
        pass


LOGIN = {"external": {"contactPoints": ["cass-0.db"], "credentialsSecret": {"name": "cass"}}}


def test_a_login_is_read_once_per_ttl_not_at_every_tick(monkeypatch):
    ring, kube = Ring("p"), CountedSecrets({"cass": {"username": "u", "password": "p"}})
    monkeypatch.setattr(rings_module, "connect", ring.connect)
    rings = Rings(kube)
    first = rings.store("ml", LOGIN)
    assert all(rings.store("ml", LOGIN) is first for _ in range(10))
    assert (kube.reads, ring.opened) == (1, ["p"])
    expiring = Rings(kube, login_ttl_s=0)
    expiring.store("ml", LOGIN)
    expiring.store("ml", LOGIN)
    assert kube.reads == 3  # read at each call once the TTL is over


def test_a_refused_or_failed_login_is_read_again_at_the_next_call(monkeypatch):
    ring, kube = Ring("new"), CountedSecrets({"cass": {"username": "u", "password": "old"}})
    monkeypatch.setattr(rings_module, "connect", ring.connect)
    rings = Rings(kube)
    with pytest.raises(RingfeedError):
        rings.store("ml", LOGIN)
    kube.secrets["cass"]["password"] = "new"  # the admin fixes the Secret: taken at once, not after the TTL
    store = rings.store("ml", LOGIN)
    assert ring.opened == ["new"]
    rings.forget(store)  # the ring failed: its login is read again with the reconnection
    rings.store("ml", LOGIN)
    assert kube.reads == 3 and ring.opened == ["new", "new"]


def test_a_k8ssandra_dataset_claims_no_keyspace_and_is_told_why():
    assert keyspace_index("ml", "slides", {"storage": K8SSANDRA}, {}, {"creationTimestamp": "x"}) == {}
    memo = Context(config=Config(), kube=None, rings=None, metrics=Metrics(CollectorRegistry()))
    patch = kopf.Patch()
    with pytest.raises(kopf.PermanentError,
                       match="a K8ssandraCluster is not a kind of ring Ringfeed reaches; use spec.storage.ring"):
        main.reconcile_dataset(name="slides", namespace="ml", spec={"storage": K8SSANDRA, "schema": SCHEMA},
                               status={}, meta={"generation": 1, "creationTimestamp": "2026-11-22T10:00:00Z"},
                               body={}, memo=memo, patch=patch, splits_by_dataset={}, datasets_by_keyspace={},
                               cache_namespaces={}, jobs_by_name={}, logger=None)
    [ready] = patch.status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "StorageNotSupported")
    with pytest.raises(StorageNotSupported):
        Rings(Secrets({})).store("ml", K8SSANDRA)


def test_the_operator_does_not_import_the_cassandra_driver():
    package = Path(ringfeed_operator.__file__).parent
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(name.split(".")[0] == "cassandra" for name in names), source
