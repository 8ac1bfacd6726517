"""Connections to the rings Datasets live on: one Store per ring address and credentials, shared by handlers."""

from __future__ import annotations

import hashlib
import tempfile
import threading
from pathlib import Path

from ringfeed.store import Store

from ringfeed_operator import kube
from ringfeed_operator.datasets import ring_address, tls_secret


class StorageNotSupported(Exception):
    pass


class Rings:
    """Open Stores keyed by (namespace, storage spec, credentials); a failed Store is dropped and reopened."""

    def __init__(self):
        self._stores: dict[tuple, Store] = {}
        self._lock = threading.Lock()

    def store(self, namespace: str, storage: dict) -> Store:
        if "external" not in storage:
            raise StorageNotSupported("spec.storage.k8ssandra: K8ssandra-provisioned rings come in a later "
                                      "Ringfeed release; use spec.storage.external")
        external = storage["external"]
        username = password = None
        secret = external.get("credentialsSecret")
        if secret:
            username, password = kube.secret_values(namespace, secret["name"], secret.get("usernameKey", "username"),
                                                    secret.get("passwordKey", "password"))
        ca_file = None
        ca_secret = tls_secret(storage)
        if ca_secret:
            ca_file = self._ca_file(*kube.secret_values(namespace, ca_secret["name"], ca_secret["key"]))
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
