"""Connections to the rings Datasets live on: one Store per ring address and credentials, shared by handlers."""

from __future__ import annotations

import threading

from ringfeed.store import Store

from ringfeed_operator import kube
from ringfeed_operator.datasets import ring_address


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
            username = kube.secret_value(namespace, secret["name"], secret.get("usernameKey", "username"))
            password = kube.secret_value(namespace, secret["name"], secret.get("passwordKey", "password"))
        address = ring_address(storage, username, password)
        key = (address.hosts, address.port, username, password)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = Store(address)
            return store

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
