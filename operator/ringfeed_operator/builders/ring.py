"""spec.storage → how the operator and its Jobs reach a Dataset's ring: the one place that reads spec.storage. Pure."""

from __future__ import annotations

from typing import Any

from ringfeed.connection import ClusterAddress

TLS_MOUNT = "/etc/ringfeed/tls"


def ring_identity(namespace: str, storage: dict) -> tuple:
    """A ring as far as specs tell rings apart: an external ring by its sorted contact points and port, a
    K8ssandraCluster by namespace and name."""
    if "external" in storage:
        external = storage["external"]
        return "external", tuple(sorted(external["contactPoints"])), external.get("port", 9042)
    return "k8ssandra", namespace, storage["k8ssandra"]["clusterName"]


def credentials_secret(storage: dict) -> dict | None:
    """{name, usernameKey, passwordKey} of the Secret holding the ring's credentials, defaults filled in."""
    secret = storage["external"].get("credentialsSecret")
    if not secret:
        return None
    return {"name": secret["name"], "usernameKey": secret.get("usernameKey", "username"),
            "passwordKey": secret.get("passwordKey", "password")}


def tls_secret(storage: dict) -> dict | None:
    """{name, key} of the Secret holding the nodes' CA certificate, when the ring is reached with TLS."""
    tls = storage.get("external", {}).get("tls") or {}
    if not tls.get("enabled"):
        return None
    return {"name": tls["caSecret"]["name"], "key": tls["caSecret"].get("key", "ca.crt")}


def ring_address(storage: dict, username: str | None = None, password: str | None = None,
                 tls_ca_file: str | None = None) -> ClusterAddress:
    external = storage["external"]
    return ClusterAddress(tuple(external["contactPoints"]), external.get("port", 9042), username, password,
                          tls_ca_file, external.get("localDatacenter") or None)


def ring_env(storage: dict) -> list[dict]:
    """How a data-plane container finds the ring: contact points, port, and credentials from the Secret."""
    external = storage["external"]
    env: list[dict[str, Any]] = [{"name": "RINGFEED_HOSTS", "value": ",".join(external["contactPoints"])},
           {"name": "RINGFEED_PORT", "value": str(external.get("port", 9042))}]
    secret = credentials_secret(storage)
    if secret:
        for variable, key in (("RINGFEED_USERNAME", secret["usernameKey"]),
                              ("RINGFEED_PASSWORD", secret["passwordKey"])):
            env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret["name"], "key": key}}})
    if tls_secret(storage):
        env.append({"name": "RINGFEED_TLS_CA_FILE", "value": f"{TLS_MOUNT}/ca.crt"})
    if external.get("localDatacenter"):
        env.append({"name": "RINGFEED_LOCAL_DC", "value": external["localDatacenter"]})
    return env


def ring_volumes(storage: dict) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) that put the nodes' CA certificate where RINGFEED_TLS_CA_FILE points."""
    ca = tls_secret(storage)
    if not ca:
        return [], []
    volume = {"name": "ring-ca", "secret": {"secretName": ca["name"], "items": [{"key": ca["key"], "path": "ca.crt"}]}}
    return [volume], [{"name": "ring-ca", "mountPath": TLS_MOUNT, "readOnly": True}]
