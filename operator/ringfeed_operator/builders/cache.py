"""A Dataset's Alluxio cache tier (spec.cache.alluxio): the master (a StatefulSet of one and its headless Service), a
worker on every node (DaemonSet, memory tier in a memory emptyDir) and a FUSE process on every node (DaemonSet) that
mounts the dataset's splits under a host directory, where a TrainingJob with ``access: posix`` finds them. All run
the cache image's ``ringfeed cache serve`` with the tuned preset (ringfeed/cache/preset.py). Pure.

Credentials: the ring's read-only login reaches the master and the workers (they read the ring); the FUSE process
and the trainers never get it. The FUSE container is privileged (it mounts through /dev/fuse) and shares its mount
with the node through Bidirectional propagation; trainers see it through HostToContainer propagation, so a FUSE
process that restarts (and mounts again) is seen by trainers that started before."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from ringfeed.cache.runtime import METRICS_PATH, RPC_PORTS, WEB_PORTS
from ringfeed_operator.builders.meta import (
    LABEL_COMPONENT,
    LABEL_DATASET,
    LABEL_MANAGED_BY,
    MANAGER,
    bounded_name,
    owner_reference,
    pull_secrets,
)
from ringfeed_operator.builders.network import cache_policy
from ringfeed_operator.builders.ring import reader_login, ring_env, ring_volumes
from ringfeed_operator.config import CacheConfig, NetworkConfig, quantity

ROLES = ("master", "worker", "fuse")
# A namespace may run cache tiers (their FUSE DaemonSet is privileged) only when the cluster admin labels it so.
CACHE_TIER_LABEL, CACHE_TIER_ALLOWED = "ringfeed.io/cache-tier", "allowed"
SERVE_DIR = "/var/lib/ringfeed-cache"
MEMORY_DIR = f"{SERVE_DIR}/memory"
MOUNT_DIR = "/ringfeed-cache"  # the FUSE container's view of the dataset's host directory
MOUNT_NAME = "mnt"  # the mount point inside it: the host directory itself stays a plain folder to propagate through
DEFAULT_MEMORY = "1Gi"
HEAP_MIB = {"master": 1024, "worker": 1024, "fuse": 512}  # each JVM's -Xmx
# spec.cache.alluxio.preload: a container beside each FUSE process reads every file once through the node's mount
# (ringfeed/cache/preload.py), then every PRELOAD_INTERVAL_S the files of splits made since; ready once warm.
PRELOAD_CONTAINER, PRELOAD_STATE_DIR, PRELOAD_INTERVAL_S, PRELOAD_THREADS = "preload", "/var/run/preload", 60, 32
PRELOAD_READY = f"{PRELOAD_STATE_DIR}/ready.json"
JVM_OVERHEAD = 512 << 20  # metaspace, threads, direct buffers of one Alluxio JVM beyond its heap


def quantity_bytes(value: str | int) -> int:
    """A memory quantity (512Mi, 2Gi, 1G, bytes; the CRD's pattern allows no more) in bytes; ValueError unless it is
    a whole, positive number of bytes."""
    try:
        size = quantity(value)
    except ValueError:
        size = None
    if size is None or size <= 0 or size != size.to_integral_value():
        raise ValueError(f"{value!r} is not a memory size (e.g. 512Mi, 2Gi)")
    return int(size)


def cache_spec(dataset: Mapping[str, Any]) -> dict | None:
    """spec.cache.alluxio, or None when the Dataset has no cache tier."""
    return ((dataset.get("spec") or {}).get("cache") or {}).get("alluxio")


def object_name(dataset: str, role: str) -> str:
    return bounded_name(dataset, f"-cache-{role}")


def legacy_object_name(dataset: str, role: str) -> str:
    """The name Ringfeed 0.1.0 gave the object: cut short without a hash (two long names could share it)."""
    tail = f"-cache-{role}"
    return dataset[: 63 - len(tail)].rstrip("-.") + tail


def master_address(dataset: str, namespace: str) -> str:
    """The master's DNS name: its headless Service, which resolves to the master Pod."""
    return f"{object_name(dataset, 'master')}.{namespace}.svc"


def host_dir(config: CacheConfig, namespace: str, dataset: str) -> PurePosixPath:
    """The node's directory of a dataset's mount (its mount point is ``<host_dir>/mnt``)."""
    return PurePosixPath(config.host_dir) / namespace / dataset


def part_path(split: str, part: str) -> PurePosixPath:
    """A split part's folder under the mount point (the extension's tree below /<dataset>)."""
    return PurePosixPath(MOUNT_NAME) / split / part


def labels(dataset: str, role: str) -> dict[str, str]:
    return {LABEL_DATASET: dataset, LABEL_COMPONENT: f"cache-{role}", LABEL_MANAGED_BY: MANAGER}


def _selector(dataset: str, role: str) -> dict[str, str]:
    return {LABEL_DATASET: dataset, LABEL_COMPONENT: f"cache-{role}"}


def pod_selector(dataset: str, role: str) -> str:
    """The label selector of one role's Pods, as a list call takes it."""
    return ",".join(f"{key}={value}" for key, value in _selector(dataset, role).items())


def _metadata(dataset: dict, role: str) -> dict:
    name = dataset["metadata"]["name"]
    return {"name": object_name(name, role), "labels": labels(name, role),
            "ownerReferences": [owner_reference(dataset)]}


def _pod_metadata(name: str, role: str) -> dict:
    metadata: dict[str, Any] = {"labels": labels(name, role)}
    if role in ("master", "worker"):  # Alluxio's own Prometheus endpoint
        metadata["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": str(WEB_PORTS[role]),
                                   "prometheus.io/path": METRICS_PATH}
    return metadata


def _container(dataset: dict, role: str, config: CacheConfig, args: list[str], **fields) -> dict:
    spec = cache_spec(dataset) or {}
    name = dataset["metadata"]["name"]
    return {
        "name": role, "image": config.image, "imagePullPolicy": config.image_pull_policy,
        "args": [role, f"--master-host={master_address(name, dataset['metadata']['namespace'])}",
                 f"--heap={HEAP_MIB[role]}m", *([] if spec.get("tuned", True) else ["--alluxio-defaults"]), *args],
        "resources": (spec.get("resources") or {}).get(role) or _default_resources(role, spec),
        **fields,
    }


def _default_resources(role: str, spec: dict) -> dict:
    """Memory for the heap and the JVM's overhead, and for the worker its memory tier too (a memory emptyDir's pages
    count against the container that writes them)."""
    memory = (HEAP_MIB[role] << 20) + JVM_OVERHEAD
    if role == "worker":
        memory += quantity_bytes(spec.get("memory", DEFAULT_MEMORY))
    return {"requests": {"cpu": "100m", "memory": str(memory)}, "limits": {"memory": str(memory)}}


_NON_ROOT = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
             "seccompProfile": {"type": "RuntimeDefault"}}
_RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
_POD_ENV = [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
_SCRATCH = [{"name": "serve", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
_SCRATCH_MOUNTS = [{"name": "serve", "mountPath": SERVE_DIR}, {"name": "tmp", "mountPath": "/tmp"}]


def master_service(dataset: dict) -> dict:
    """Headless: the master's name resolves to its Pod, ready or not (workers register while it starts)."""
    name = dataset["metadata"]["name"]
    return {
        "apiVersion": "v1", "kind": "Service", "metadata": _metadata(dataset, "master"),
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": _selector(name, "master"),
                 "ports": [{"name": "rpc", "port": RPC_PORTS["master"]}, {"name": "web", "port": WEB_PORTS["master"]}]},
    }


def master_statefulset(dataset: dict, config: CacheConfig) -> dict:
    name = dataset["metadata"]["name"]
    storage = dataset["spec"]["storage"]
    tls_volumes, tls_mounts = ring_volumes(storage, reader_login(storage))
    container = _container(
        dataset, "master", config, [],
        env=ring_env(storage, reader_login(storage)),
        ports=[{"name": "rpc", "containerPort": RPC_PORTS["master"]},
               {"name": "web", "containerPort": WEB_PORTS["master"]}],
        readinessProbe={"tcpSocket": {"port": RPC_PORTS["master"]}, "periodSeconds": 5},
        livenessProbe={"tcpSocket": {"port": RPC_PORTS["master"]}, "initialDelaySeconds": 120, "periodSeconds": 20},
        volumeMounts=[*_SCRATCH_MOUNTS, *tls_mounts], securityContext=_RESTRICTED)
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": _metadata(dataset, "master"),
        "spec": {
            "serviceName": object_name(name, "master"), "replicas": 1,
            "selector": {"matchLabels": _selector(name, "master")},
            "template": {"metadata": _pod_metadata(name, "master"), "spec": {
                "automountServiceAccountToken": False, "securityContext": _NON_ROOT, "containers": [container],
                "volumes": [*_SCRATCH, *tls_volumes], **_placement(dataset, nodes=False),
                **pull_secrets(config.image_pull_secrets)}},
        },
    }


def worker_daemonset(dataset: dict, config: CacheConfig) -> dict:
    spec = cache_spec(dataset) or {}
    memory = str(spec.get("memory", DEFAULT_MEMORY))
    storage = dataset["spec"]["storage"]
    tls_volumes, tls_mounts = ring_volumes(storage, reader_login(storage))
    container = _container(
        dataset, "worker", config,
        ["--hostname=$(POD_IP)", "--node=$(NODE_NAME)", f"--memory={quantity_bytes(memory)}",
         f"--memory-dir={MEMORY_DIR}"],
        env=[*_POD_ENV, *ring_env(storage, reader_login(storage))],
        ports=[{"name": "rpc", "containerPort": RPC_PORTS["worker"]},
               {"name": "web", "containerPort": WEB_PORTS["worker"]}],
        readinessProbe={"tcpSocket": {"port": RPC_PORTS["worker"]}, "periodSeconds": 5},
        livenessProbe={"tcpSocket": {"port": RPC_PORTS["worker"]}, "initialDelaySeconds": 120, "periodSeconds": 20},
        volumeMounts=[*_SCRATCH_MOUNTS, {"name": "memory", "mountPath": MEMORY_DIR}, *tls_mounts],
        securityContext=_RESTRICTED)
    return _daemonset(dataset, "worker", config, [container],
                      [*_SCRATCH, {"name": "memory", "emptyDir": {"medium": "Memory", "sizeLimit": memory}},
                       *tls_volumes], _NON_ROOT)


def fuse_daemonset(dataset: dict, catalog: str, config: CacheConfig) -> dict:
    """The mount of /<catalog> (the dataset's splits) at <host dir>/mnt on every node."""
    name, namespace = dataset["metadata"]["name"], dataset["metadata"]["namespace"]
    mount = f"{MOUNT_DIR}/{MOUNT_NAME}"
    container = _container(
        dataset, "fuse", config,
        ["--hostname=$(POD_IP)", "--node=$(NODE_NAME)", f"--mount={mount}", f"--root=/{catalog}"],
        env=_POD_ENV,
        # Ready once the tree is mounted; the kubelet restarts a process whose mount went away.
        readinessProbe={"exec": {"command": ["mountpoint", "-q", mount]}, "periodSeconds": 5},
        livenessProbe={"exec": {"command": ["mountpoint", "-q", mount]}, "initialDelaySeconds": 120,
                       "periodSeconds": 20},
        # The mount goes with the process, not left behind answering ENOTCONN to the trainers.
        lifecycle={"preStop": {"exec": {"command": ["umount", "-l", mount]}}},
        volumeMounts=[*_SCRATCH_MOUNTS, {"name": "mounts", "mountPath": MOUNT_DIR,
                                         "mountPropagation": "Bidirectional"}],
        # Privileged for /dev/fuse and Bidirectional propagation; its root stays read-only (scratch mounts above).
        securityContext={"privileged": True, "runAsUser": 0, "runAsNonRoot": False, "readOnlyRootFilesystem": True})
    volumes = [*_SCRATCH, {"name": "mounts", "hostPath": {"path": str(host_dir(config, namespace, name)),
                                                          "type": "DirectoryOrCreate"}}]
    containers = [container]
    if (cache_spec(dataset) or {}).get("preload"):
        containers.append(preload_container(config))
        volumes.append({"name": PRELOAD_CONTAINER, "emptyDir": {}})
    return _daemonset(dataset, "fuse", config, containers, volumes, {"seccompProfile": {"type": "RuntimeDefault"}})


def preload_container(config: CacheConfig) -> dict:
    """Reads the node's mount whole once, then the new files every PRELOAD_INTERVAL_S; ready once the first pass
    is done. Unprivileged: it reads the mount (allow_other) as the trainers do, through HostToContainer
    propagation, so a FUSE process that mounts again is seen."""
    return {
        "name": PRELOAD_CONTAINER, "image": config.image, "imagePullPolicy": config.image_pull_policy,
        "command": ["ringfeed", "cache", "preload"],
        "args": [f"{MOUNT_DIR}/{MOUNT_NAME}", f"--threads={PRELOAD_THREADS}", f"--watch={PRELOAD_INTERVAL_S}",
                 f"--ready-file={PRELOAD_READY}"],
        "readinessProbe": {"exec": {"command": ["test", "-f", PRELOAD_READY]}, "periodSeconds": 5},
        # No memory limit: the page cache it fills is charged to it, and a limit would evict what it preloads.
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        "volumeMounts": [{"name": "mounts", "mountPath": MOUNT_DIR, "mountPropagation": "HostToContainer",
                          "readOnly": True},
                         {"name": PRELOAD_CONTAINER, "mountPath": PRELOAD_STATE_DIR}],
        "securityContext": {**_RESTRICTED, **{k: v for k, v in _NON_ROOT.items() if k != "seccompProfile"}},
    }


def _daemonset(dataset: dict, role: str, config: CacheConfig, containers: list[dict], volumes: list[dict],
               security: dict) -> dict:
    name = dataset["metadata"]["name"]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _metadata(dataset, role),
        "spec": {
            "selector": {"matchLabels": _selector(name, role)},
            "template": {"metadata": _pod_metadata(name, role), "spec": {
                "automountServiceAccountToken": False, "securityContext": security,
                "terminationGracePeriodSeconds": 30, "containers": containers, "volumes": volumes,
                **_placement(dataset, nodes=True), **pull_secrets(config.image_pull_secrets)}},
        },
    }


def _placement(dataset: dict, nodes: bool) -> dict:
    """spec.cache.alluxio.nodeSelector: the nodes of the workers and FUSE mounts (the master may run anywhere)."""
    selector = (cache_spec(dataset) or {}).get("nodeSelector")
    return {"nodeSelector": selector} if nodes and selector else {}


# (kind, role) of every object of a cache tier, for its removal when spec.cache goes
CACHE_OBJECTS = (("DaemonSet", "fuse"), ("DaemonSet", "worker"), ("StatefulSet", "master"), ("Service", "master"),
                 ("NetworkPolicy", "tier"))


def tier_selector(dataset: str) -> dict:
    """The label selector of every Pod of the tier: its master, workers and FUSE mounts."""
    return {"matchLabels": {LABEL_DATASET: dataset},
            "matchExpressions": [{"key": LABEL_COMPONENT, "operator": "In",
                                  "values": [f"cache-{role}" for role in ROLES]}]}


def cache_objects(dataset: dict, catalog: str, config: CacheConfig, network: NetworkConfig) -> list[dict]:
    """Everything the cache tier of a Dataset with spec.cache.alluxio is made of, in the order to apply."""
    name = dataset["metadata"]["name"]
    policy = ([cache_policy(dataset, object_name(name, "tier"), tier_selector(name), labels(name, "tier"), network)]
              if network.enabled else [])
    return [*policy, master_service(dataset), master_statefulset(dataset, config), worker_daemonset(dataset, config),
            fuse_daemonset(dataset, catalog, config)]


# -- status ------------------------------------------------------------------------------------------------------------

def cache_status(master: dict | None, workers: dict | None, fuse: dict | None, mount: PurePosixPath,
                 fuse_pods: list[dict] | None = None) -> dict:
    """status.cache from the master StatefulSet and the two DaemonSets as read now: ready when the master and every
    scheduled worker and FUSE Pod are. With a preload (``fuse_pods``, the FUSE Pods as read now), a FUSE Pod is
    ready only once warm, so its mount counts by its fuse container, and ``warm`` when every node's preload is."""
    def daemons(obj: dict | None) -> tuple[int, int]:
        status = (obj or {}).get("status") or {}
        return status.get("numberReady", 0), status.get("desiredNumberScheduled", 0)

    master_ready = bool(((master or {}).get("status") or {}).get("readyReplicas"))
    (workers_ready, workers_wanted), (fuse_ready, fuse_wanted) = daemons(workers), daemons(fuse)
    preload = None
    if fuse_pods is not None:
        fuse_ready = sum(container_ready(pod, "fuse") for pod in fuse_pods)
        warm = sum(container_ready(pod, PRELOAD_CONTAINER) for pod in fuse_pods)
        preload = {"warm": 0 < fuse_wanted == warm, "nodes": f"{warm}/{fuse_wanted}"}
    ready = master_ready and 0 < workers_wanted == workers_ready and 0 < fuse_wanted == fuse_ready
    return {"ready": ready, "masterReady": master_ready, "workers": f"{workers_ready}/{workers_wanted}",
            "mounts": f"{fuse_ready}/{fuse_wanted}", "hostPath": str(mount / MOUNT_NAME), "preload": preload}


def container_ready(pod: dict, name: str) -> bool:
    """Whether the named container of a Pod (as the API returns it) is ready; a Pod being deleted counts as not."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return any(status.get("name") == name and status.get("ready") for status in statuses)
