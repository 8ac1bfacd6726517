"""Connections to the rings Datasets live on: one Store per ring and login, shared by handlers, opened through the
data plane's one seam (``ringfeed.ring.connect``), so no Cassandra driver is imported here."""

from __future__ import annotations

import hashlib
import tempfile
import threading
from pathlib import Path

from ringfeed.connection import ClusterAddress
from ringfeed.ring import RingRef, RingSecrets, connect
from ringfeed.store import Store
from ringfeed_operator.kube import Kube


class Rings:
    """Open Stores keyed by ring and login (a changed Secret opens a new one); a failed Store is dropped and
    reopened."""

    def __init__(self, kube: Kube):
        self._kube = kube  # reads the credentials and CA Secrets a Dataset names
        self._stores: dict[ClusterAddress, Store] = {}
        self._lock = threading.Lock()

    def store(self, namespace: str, storage: dict) -> Store:
        """The Store of a Dataset's spec.storage; StorageNotSupported, SecretNotFound, or the RingfeedError of the
        ring (RingUnavailable when it cannot be reached)."""
        address = self.address(namespace, storage)
        with self._lock:
            store = self._stores.get(address)
            if store is None:
                store = self._stores[address] = connect(address)
            return store

    def address(self, namespace: str, storage: dict) -> ClusterAddress:
        """The ring of spec.storage, logged in with the values of the Secrets it names."""
        secrets = RingSecrets.from_spec(storage)
        username = password = ca_file = None
        if credentials := secrets.credentials:
            username, password = self._kube.secret_values(namespace, credentials.name, credentials.username_key,
                                                          credentials.password_key)
        if ca := secrets.ca_certificate:
            ca_file = self._ca_file(*self._kube.secret_values(namespace, ca.name, ca.key))
        return RingRef.from_spec(storage, namespace).login(username, password, ca_file)

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
