"""Connections to the rings Datasets live on: one Store per ring and login, shared by handlers, opened through the
data plane's one seam (``ringfeed.ring.connect``), so no Cassandra driver is imported here."""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
import time
from pathlib import Path

from ringfeed.connection import ClusterAddress
from ringfeed.ring import RingRef, RingSecrets, connect
from ringfeed.store import Store
from ringfeed_operator.kube import Kube

# How long the login read from a Dataset's Secrets is used before they are read again: the timers of every Dataset
# and Split open their ring each tick, and a GET of the Secret each time was a fifth of the operator's requests at
# rest. A rotated password is picked up within this, or at once when the ring refuses the old one (forget).
LOGIN_TTL_S = 300.0


class Rings:
    """Open Stores keyed by ring and login (a changed Secret opens a new one); a failed Store is dropped and
    reopened."""

    def __init__(self, kube: Kube, login_ttl_s: float = LOGIN_TTL_S):
        self._kube = kube  # reads the credentials and CA Secrets a Dataset names
        self._login_ttl_s = login_ttl_s
        self._stores: dict[ClusterAddress, Store] = {}
        self._logins: dict[tuple[str, str], tuple[ClusterAddress, float]] = {}  # (namespace, storage) → until when
        self._lock = threading.Lock()

    def store(self, namespace: str, storage: dict) -> Store:
        """The Store of a Dataset's spec.storage; StorageNotSupported, SecretNotFound, or the RingfeedError of the
        ring (RingUnavailable when it cannot be reached)."""
        key = (namespace, json.dumps(storage, sort_keys=True))
        with self._lock:
            kept = self._logins.get(key)
        fresh = kept is None or kept[1] < time.monotonic()
        address = kept[0] if kept is not None and not fresh else self.address(namespace, storage)
        with self._lock:
            store = self._stores.get(address)
            if store is None:
                store = self._stores[address] = connect(address)
            if fresh:  # only a login the ring took is kept: a wrong password is read again at the next call
                self._logins[key] = (address, time.monotonic() + self._login_ttl_s)
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
            for address, known in list(self._stores.items()):
                if known is store:
                    del self._stores[address]
                    for key, (login, _) in list(self._logins.items()):
                        if login == address:  # read the Secrets again: the ring may have refused an old password
                            del self._logins[key]
        store.close()

    def close(self) -> None:
        with self._lock:
            for store in self._stores.values():
                store.close()
            self._stores.clear()
            self._logins.clear()
