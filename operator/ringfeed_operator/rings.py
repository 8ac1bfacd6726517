"""Connections to the rings Datasets live on: one Store per ring address and credentials, shared by handlers."""

from __future__ import annotations

import hashlib
import tempfile
import threading
from pathlib import Path

from cassandra import DriverException, OperationTimedOut
from cassandra.cluster import NoHostAvailable

from ringfeed.errors import RingfeedError
from ringfeed.store import Store
from ringfeed_operator.builders.ring import credentials_secret, ring_address, tls_secret
from ringfeed_operator.kube import Kube

# A ring that cannot answer: the data plane's errors and the Python driver's own.
RING_ERRORS = (RingfeedError, DriverException, NoHostAvailable, OperationTimedOut)


class StorageNotSupported(Exception):
    """spec.storage names a kind of ring this operator cannot reach yet (K8ssandra)."""


class Rings:
    """Open Stores keyed by (namespace, storage spec, credentials); a failed Store is dropped and reopened."""

    def __init__(self, kube: Kube):
        self._kube = kube  # reads the credentials and CA Secrets a Dataset names
        self._stores: dict[tuple, Store] = {}
        self._lock = threading.Lock()

    def store(self, namespace: str, storage: dict) -> Store:
        if "external" not in storage:
            raise StorageNotSupported("spec.storage.k8ssandra: K8ssandra-provisioned rings come in a later "
                                      "Ringfeed release; use spec.storage.external")
        username = password = None
        secret = credentials_secret(storage)
        if secret:
            username, password = self._kube.secret_values(namespace, secret["name"], secret["usernameKey"],
                                                          secret["passwordKey"])
        ca_file = None
        ca_secret = tls_secret(storage)
        if ca_secret:
            ca_file = self._ca_file(*self._kube.secret_values(namespace, ca_secret["name"], ca_secret["key"]))
        address = ring_address(storage, username, password, ca_file)
        key = (address.hosts, address.port, username, password, ca_file, address.local_dc)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = Store(address)
            return store

    @staticmethod
    def _ca_file(pem: str) -> str:
        """The CA certificate as a file (the drivers read files), named by its content."""
        path = Path(tempfile.gettempdir()) / "ringfeed-ca" / f"{hashlib.sha256(pem.encode()).hexdigest()[:16]}.crt"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{threading.get_ident()}.tmp")
            partial.write_text(pem)
            partial.replace(path)  # atomic: a concurrent reader never sees half a certificate
        return str(path)

    def forget(self, store: Store) -> None:
        """Drop a Store whose ring failed, so the next call reconnects."""
        with self._lock:
            for key, known in list(self._stores.items()):
                if known is store:
                    del self._stores[key]
        store.close()

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
