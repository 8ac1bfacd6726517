"""A Ring's CassandraDatacenter, pure: cass-operator's spec of the nodes (image, volumes, heap, resources, logins
and grants, TLS from ``ring_tls``, always on, the restricted Pod Security profile), what deleting it does to the
volumes, at the size only a step changes (``builders.ring``)."""

from __future__ import annotations

import copy
from typing import Any

from ringfeed.ring import ProvisionedRing
from ringfeed_operator.builders.meta import owner_reference, pull_secrets, scrape_annotations
from ringfeed_operator.builders.ring import (
    DC_GROUP,
    DC_VERSION,
    LABEL_RING,
    MAAC_METRICS_PORT,
    TRACK_CLEANUP,
    ring_labels,
)
from ringfeed_operator.builders.ring_tls import encryption_settings, management_api_auth, node_volume
from ringfeed_operator.config import RingsConfig, quantity

AUTH_SETTINGS = {"authenticator": "PasswordAuthenticator", "authorizer": "CassandraAuthorizer",
                 "role_manager": "CassandraRoleManager"}
MIB = 1024 * 1024
# The init container that writes each node's configuration (k8ssandra-client `config build`) needs little; its
# default request of a whole CPU would count against each Cassandra Pod.
CONFIG_BUILDER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
# cass-operator deletes a datacenter's volumes with it unless this says "false".
DELETE_PVC = "cassandra.datastax.com/delete-pvc"
# The image's cassandra user, which cass-operator runs the nodes as when it writes the Pod's security context itself.
CASSANDRA_UID = 999
# The restricted Pod Security Standard: a given Pod security context replaces cass-operator's whole default one.
POD_SECURITY = {"runAsUser": CASSANDRA_UID, "runAsGroup": CASSANDRA_UID, "fsGroup": CASSANDRA_UID,
                "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# cass-operator's containers, found by name and completed by it: the node, and the init containers copying the
# image's base configuration and writing the node's (in that order).
SERVER_CONTAINER, BASE_CONFIG_CONTAINER, CONFIG_CONTAINER = "cassandra", "server-config-init-base", "server-config-init"
# cass-operator takes a decommission as done once the leaving node itself says LEFT, and stops its Pod at once; a
# node stopped before one gossip round told the others stays "down, leaving" in their ring, and reads of its ranges
# fail until someone removes it. So the node goes on gossiping this long before its Pod stops; then the drain that
# cass-operator's own preStop does (it adds none where one is given), over the Management API's mutual TLS.
LEFT_GOSSIP_S = 10
MAAC_CERTS = "/management-api-certs"
# cass-operator's Management API port where the container names no "mgmt-api-http" port, as ours does not.
DRAIN = (f"curl -X POST -s -k --cert {MAAC_CERTS}/tls.crt --key {MAAC_CERTS}/tls.key --cacert {MAAC_CERTS}/ca.crt "
         "-m 0 -o /dev/null --show-error --fail https://localhost:8080/api/v0/ops/node/drain")
SERVER_LIFECYCLE = {"preStop": {"exec": {"command": ["sh", "-c", f"sleep {LEFT_GOSSIP_S}; exec {DRAIN}"]}}}


def heap_option(value: str | int) -> str:
    """A heap size (1Gi, 512Mi, 2097152Ki, bytes: the CRD's pattern) as the JVM option cass-operator writes: 4Gi as
    4G, any other in MiB (512M, at least 1M), as always (another spelling would roll every node of a Ring); ValueError
    for what is not a positive quantity."""
    size = quantity(value)
    if size <= 0:
        raise ValueError(f"{value!r} is not a heap size (e.g. 1Gi, 512Mi)")
    if str(value).endswith("Gi") and size % (1024 * MIB) == 0:
        return f"{int(size) // (1024 * MIB)}G"
    return f"{max(1, int(size) // MIB)}M"


def datacenter_spec(ring: dict, rings: RingsConfig) -> dict:
    """The CassandraDatacenter's spec but for its size, which only a step changes."""
    spec = ring["spec"]
    name = ring["metadata"]["name"]
    provisioned = ProvisionedRing(name)
    storage = spec.get("storage") or {}
    claim: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": str(storage.get("size", "10Gi"))}}}
    if storage.get("storageClassName"):
        claim["storageClassName"] = storage["storageClassName"]
    heap = heap_option(spec.get("heapSize", "1Gi"))
    volume, mount = node_volume(name)
    return {
        "clusterName": provisioned.name,
        "serverType": "cassandra",
        "serverVersion": spec.get("serverVersion", "5.0.9"),
        "serverImage": spec.get("image") or rings.image,
        "superuserSecretName": provisioned.superuser_secret,
        # cass-operator creates the role of each Secret (LOGIN, not superuser); the operator grants it SELECT on
        # the keyspaces of the ring's Datasets.
        "users": [{"secretName": provisioned.reader_secret, "superuser": False}],
        # Mutual TLS: only cass-operator, which holds the client certificate, may call the Management API.
        "managementApiAuth": management_api_auth(name),
        "disableSystemLoggerSidecar": True,
        # A read-only root: cass-operator gives the node writable volumes for its configuration, logs and /tmp.
        "readOnlyRootFilesystem": True,
        "allowMultipleNodesPerWorker": bool(spec.get("allowMultipleNodesPerWorker", False)),
        "storageConfig": {"cassandraDataVolumeClaimSpec": claim},
        # The nodes' Pods name their Ring (the chart's PodMonitor selects them by it) and offer the Management API
        # agent's metrics (Cassandra's own) to an annotation-driven Prometheus. The schema requires a containers
        # list; cass-operator merges the "cassandra" container's mounts into its own (the nodes' certificate).
        "podTemplateSpec": {"metadata": {"labels": {LABEL_RING: name},
                                         "annotations": scrape_annotations(MAAC_METRICS_PORT)},
                            # resources: {} as the CRD's schema defaults it, else every reconcile would
                            # find a difference and restart the nodes.
                            # No API token: neither Cassandra nor its Management API calls Kubernetes.
                            "spec": {"securityContext": POD_SECURITY, "automountServiceAccountToken": False,
                                     "initContainers": [
                                         {"name": BASE_CONFIG_CONTAINER, "resources": CONFIG_BUILDER_RESOURCES,
                                          "securityContext": CONTAINER_SECURITY},
                                         {"name": CONFIG_CONTAINER, "resources": {},
                                          "securityContext": CONTAINER_SECURITY}],
                                     "containers": [{"name": SERVER_CONTAINER, "resources": {},
                                                     "securityContext": CONTAINER_SECURITY,
                                                     "lifecycle": SERVER_LIFECYCLE,
                                                     "volumeMounts": [mount]}],
                                     "volumes": [volume], **pull_secrets(rings.image_pull_secrets)}},
        "resources": node_resources(spec.get("resources") or rings.resources),
        "configBuilderResources": CONFIG_BUILDER_RESOURCES,
        "config": {"jvm-server-options": {"initial_heap_size": heap, "max_heap_size": heap},
                   # Logins and grants, whatever the image's defaults: the loaders' role may only read.
                   "cassandra-yaml": {**AUTH_SETTINGS, **encryption_settings()}},
    }


def node_resources(resources: dict) -> dict:
    """The nodes' resources, as given; ValueError where a request is above its limit, which the API server would
    refuse for every node's Pod, out of the Ring's sight, inside cass-operator."""
    limits = resources.get("limits") or {}
    for name, request in (resources.get("requests") or {}).items():
        if name in limits and quantity(request) > quantity(limits[name]):
            raise ValueError(f"resources.requests.{name} ({request}) is above resources.limits.{name} "
                             f"({limits[name]}): a request may not exceed its limit")
    return resources


def datacenter_update(current: dict, ring: dict, rings: RingsConfig) -> dict | None:
    """The settings to patch into a datacenter whose spec is `current`, or None when it runs as the Ring says. A
    datacenter made before its nodes had SERVER_LIFECYCLE counts as current when nothing else differs: adding it would
    restart every node for it; it comes with the next change that restarts them anyway."""
    wanted = datacenter_spec(ring, rings)
    compared = wanted
    if not stops_after_gossip(current):
        compared = copy.deepcopy(wanted)
        (_server_container(compared) or {}).pop("lifecycle")
    return None if all(current.get(key) == value for key, value in compared.items()) else wanted


def stops_after_gossip(dc_spec: dict) -> bool:
    """Whether a datacenter's nodes have SERVER_LIFECYCLE (one made by Ringfeed 0.1.0 has not)."""
    return (_server_container(dc_spec) or {}).get("lifecycle") == SERVER_LIFECYCLE


def _server_container(dc_spec: dict) -> dict | None:
    containers = ((dc_spec.get("podTemplateSpec") or {}).get("spec") or {}).get("containers") or []
    return next((c for c in containers if c.get("name") == SERVER_CONTAINER), None)


def volume_policy(ring: dict) -> dict[str, str]:
    """The datacenter's annotation saying whether cass-operator deletes the nodes' volumes with it (spec.deletionPolicy:
    only Delete does)."""
    return {DELETE_PVC: "true" if ring["spec"].get("deletionPolicy") == "Delete" else "false"}


def datacenter(ring: dict, rings: RingsConfig) -> dict:
    """The CassandraDatacenter that runs the ring, at spec.nodes (a new ring has no data to move: every node starts
    at once, as cass-operator brings them up one after another)."""
    name = ring["metadata"]["name"]
    return {
        "apiVersion": f"{DC_GROUP}/{DC_VERSION}", "kind": "CassandraDatacenter",
        "metadata": {"name": ProvisionedRing(name).datacenter, "labels": ring_labels(name),
                     "annotations": {TRACK_CLEANUP: "true", **volume_policy(ring)},
                     "ownerReferences": [owner_reference(ring)]},
        "spec": {**datacenter_spec(ring, rings), "size": ring["spec"].get("nodes", 1)},
    }
