"""A Dataset's cache tier (spec.cache.alluxio): the master, worker and FUSE objects the operator applies, and
status.cache. Pure functions, checked without a cluster; the tier itself runs in e2e/tests/test_cache_tier.py."""

from __future__ import annotations

import copy

import pytest
from test_builders import DATASET

from ringfeed_operator.builders.cache import (
    CACHE_OBJECTS,
    PRELOAD_READY,
    cache_objects,
    cache_status,
    fuse_daemonset,
    legacy_object_name,
    master_address,
    master_statefulset,
    object_name,
    pod_selector,
    quantity_bytes,
    worker_daemonset,
)
from ringfeed_operator.config import CacheConfig, NetworkConfig
from ringfeed_operator.handlers.dataset import cache_namespace_index, not_allowed

CACHE = CacheConfig(image="registry.example/ringfeed/alluxio:9", host_dir="/srv/ringfeed-cache")


def cached(**alluxio) -> dict:
    dataset = copy.deepcopy(DATASET)
    dataset["spec"]["cache"] = {"alluxio": {"memory": "2Gi", **alluxio}}
    return dataset


def containers(obj: dict) -> list[dict]:
    return obj["spec"]["template"]["spec"]["containers"]


def args_of(obj: dict) -> dict[str, str]:
    return dict(arg.removeprefix("--").split("=", 1) for arg in containers(obj)[0]["args"][1:] if "=" in arg)


def env_names(obj: dict) -> set[str]:
    return {e["name"] for e in containers(obj)[0].get("env") or ()}


def test_every_object_is_owned_by_the_dataset_and_named_after_it():
    objects = cache_objects(cached(), "tumour_slides", CACHE, NetworkConfig(enabled=True))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("NetworkPolicy", "tumour-slides-cache-tier"),  # first: no Pod of the tier runs unguarded
        ("Service", "tumour-slides-cache-master"), ("StatefulSet", "tumour-slides-cache-master"),
        ("DaemonSet", "tumour-slides-cache-worker"), ("DaemonSet", "tumour-slides-cache-fuse")]
    assert {kind for kind, _ in CACHE_OBJECTS} == {o["kind"] for o in objects}  # all deleted with the tier
    assert [o["kind"] for o in cache_objects(cached(), "tumour_slides", CACHE, NetworkConfig())] == [
        "Service", "StatefulSet", "DaemonSet", "DaemonSet"]  # policies off: none
    for obj in objects:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == DATASET["metadata"]["uid"]
    long_names = "d" * 62 + "a", "d" * 62 + "b"
    assert len({object_name(name, "worker") for name in long_names}) == 2
    assert all(len(object_name(name, "worker")) <= 63 for name in long_names)
    # 0.1.0's names, which the operator deletes after an upgrade, differ only where a name was cut short
    assert legacy_object_name("tumour-slides", "fuse") == object_name("tumour-slides", "fuse")
    assert legacy_object_name(long_names[0], "fuse") != object_name(long_names[0], "fuse")


def test_the_master_and_workers_read_the_ring_the_fuse_process_never_does():
    dataset = cached()
    master, worker, fuse = (master_statefulset(dataset, CACHE), worker_daemonset(dataset, CACHE),
                            fuse_daemonset(dataset, "tumour_slides", CACHE))
    assert {"RINGFEED_HOSTS", "RINGFEED_LOGIN_DIR"} <= env_names(master)
    assert {"RINGFEED_HOSTS", "RINGFEED_LOGIN_DIR"} <= env_names(worker)
    assert not any(name.startswith("RINGFEED_") for name in env_names(fuse))
    for obj in (master, worker, fuse):
        assert args_of(obj)["master-host"] == master_address("tumour-slides", "ml")
        assert master_address("tumour-slides", "ml") == "tumour-slides-cache-master.ml.svc"
        assert containers(obj)[0]["image"] == "registry.example/ringfeed/alluxio:9"
        assert obj["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    for obj in (master, worker):  # non-root, read-only root file system
        assert obj["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
        assert containers(obj)[0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert obj["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"] == "/metrics/prometheus/"


def test_the_worker_keeps_its_memory_tier_in_memory_and_its_limit_counts_it():
    worker = worker_daemonset(cached(memory="2Gi"), CACHE)
    assert args_of(worker)["memory"] == str(2 << 30)
    memory = next(v for v in worker["spec"]["template"]["spec"]["volumes"] if v["name"] == "memory")
    assert memory["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    limit = int(containers(worker)[0]["resources"]["limits"]["memory"])
    assert limit > 2 << 30
    given = {"limits": {"memory": "8Gi"}}
    assert containers(worker_daemonset(cached(resources={"worker": given}), CACHE))[0]["resources"] == given
    assert args_of(worker)["hostname"] == "$(POD_IP)" and args_of(worker)["node"] == "$(NODE_NAME)"


def test_the_fuse_mount_of_one_dataset_propagates_to_the_node_under_the_host_dir():
    fuse = fuse_daemonset(cached(nodeSelector={"gpu": "a100"}), "tumour_slides", CACHE)
    pod = fuse["spec"]["template"]["spec"]
    assert args_of(fuse)["root"] == "/tumour_slides" and args_of(fuse)["mount"] == "/ringfeed-cache/mnt"
    host = next(v for v in pod["volumes"] if v["name"] == "mounts")["hostPath"]
    assert host == {"path": "/srv/ringfeed-cache/ml/tumour-slides", "type": "DirectoryOrCreate"}
    container = containers(fuse)[0]
    assert next(m for m in container["volumeMounts"] if m["name"] == "mounts")["mountPropagation"] == "Bidirectional"
    assert container["securityContext"]["privileged"] is True
    assert container["lifecycle"]["preStop"]["exec"]["command"] == ["umount", "-l", "/ringfeed-cache/mnt"]
    assert container["readinessProbe"]["exec"]["command"] == ["mountpoint", "-q", "/ringfeed-cache/mnt"]
    assert pod["nodeSelector"] == {"gpu": "a100"}


def test_alluxios_defaults_on_request():
    assert "--alluxio-defaults" not in containers(worker_daemonset(cached(), CACHE))[0]["args"]
    assert "--alluxio-defaults" in containers(worker_daemonset(cached(tuned=False), CACHE))[0]["args"]


@pytest.mark.parametrize(("quantity", "size"), [("512Mi", 512 << 20), ("2Gi", 2 << 30), ("1G", 10**9), ("4096", 4096),
                                                ("1.5Gi", 3 << 29), (4096, 4096)])
def test_memory_quantities(quantity, size):
    assert quantity_bytes(quantity) == size


@pytest.mark.parametrize("quantity", ["1.5", "0", "-1Gi", "4 GB", "1_000", "NaN", "Infinity", "lots", True])
def test_what_is_not_a_whole_positive_number_of_bytes_is_refused(quantity):
    with pytest.raises(ValueError, match="not a memory size"):
        quantity_bytes(quantity)


def test_status_is_ready_only_with_the_master_and_every_scheduled_worker_and_mount():
    master = {"status": {"readyReplicas": 1}}
    def daemons(ready, wanted):
        return {"status": {"numberReady": ready, "desiredNumberScheduled": wanted}}
    from pathlib import PurePosixPath
    host = PurePosixPath("/srv/c/ml/d")
    ready = cache_status(master, daemons(2, 2), daemons(2, 2), host)
    assert ready == {"ready": True, "masterReady": True, "workers": "2/2", "mounts": "2/2",
                     "hostPath": "/srv/c/ml/d/mnt", "preload": None}
    assert not cache_status(master, daemons(2, 2), daemons(1, 2), host)["ready"]
    assert not cache_status(None, daemons(2, 2), daemons(2, 2), host)["ready"]
    assert not cache_status(master, daemons(0, 0), daemons(0, 0), host)["ready"]  # no node to run on


def test_only_namespaces_the_admin_labelled_are_opted_in_to_cache_tiers():
    assert cache_namespace_index(name="ml", labels={"ringfeed.io/cache-tier": "allowed"}) == {"ml": True}
    for labels in ({}, {"ringfeed.io/cache-tier": "yes"}, {"pod-security.kubernetes.io/enforce": "privileged"}):
        assert cache_namespace_index(name="ml", labels=labels) == {}
    assert "ringfeed.io/cache-tier=allowed" in not_allowed("ml") and "namespace ml" in not_allowed("ml")


def test_a_preload_runs_unprivileged_beside_each_fuse_mount_and_is_ready_once_warm():
    assert [c["name"] for c in containers(fuse_daemonset(cached(), "tumour_slides", CACHE))] == ["fuse"]
    fuse = fuse_daemonset(cached(preload=True), "tumour_slides", CACHE)
    mount, preload = containers(fuse)
    assert mount["name"] == "fuse" and preload["name"] == "preload" and preload["image"] == CACHE.image
    assert preload["command"] == ["ringfeed", "cache", "preload"]
    assert preload["args"][0] == "/ringfeed-cache/mnt" and "--watch=60" in preload["args"]
    assert f"--ready-file={PRELOAD_READY}" in preload["args"]
    assert preload["readinessProbe"]["exec"]["command"] == ["test", "-f", PRELOAD_READY]
    # It reads the node's mount as a trainer does: read-only, HostToContainer (a FUSE restart's new mount shows).
    mounts = {m["name"]: m for m in preload["volumeMounts"]}
    assert mounts["mounts"]["mountPropagation"] == "HostToContainer" and mounts["mounts"]["readOnly"] is True
    assert PRELOAD_READY.startswith(mounts["preload"]["mountPath"] + "/")
    assert "preload" in {v["name"] for v in fuse["spec"]["template"]["spec"]["volumes"]}
    security = preload["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 10001
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]} and "privileged" not in security
    # The page cache it fills is charged to it: a memory limit would evict what it preloads.
    assert not preload.get("env") and "limits" not in preload["resources"]


def pod(fuse_ready: bool, preload_ready: bool | None, deleting: bool = False) -> dict:
    statuses = [{"name": "fuse", "ready": fuse_ready}]
    if preload_ready is not None:
        statuses.append({"name": "preload", "ready": preload_ready})
    return {"metadata": {"deletionTimestamp": "2026-11-27T12:00:00Z"} if deleting else {},
            "status": {"containerStatuses": statuses}}


def test_with_a_preload_mounts_count_by_the_fuse_container_and_warm_needs_every_node():
    from pathlib import PurePosixPath
    master, host = {"status": {"readyReplicas": 1}}, PurePosixPath("/srv/c/ml/d")
    workers = {"status": {"numberReady": 2, "desiredNumberScheduled": 2}}
    fuse = {"status": {"numberReady": 1, "desiredNumberScheduled": 2}}  # a Pod is ready only once warm
    status = cache_status(master, workers, fuse, host, [pod(True, True), pod(True, False)])
    assert status["ready"] and status["mounts"] == "2/2"
    assert status["preload"] == {"warm": False, "nodes": "1/2"}
    status = cache_status(master, workers, fuse, host, [pod(True, True), pod(True, True)])
    assert status["preload"] == {"warm": True, "nodes": "2/2"}
    status = cache_status(master, workers, fuse, host, [pod(True, True), pod(True, True, deleting=True)])
    assert status["preload"] == {"warm": False, "nodes": "1/2"} and status["mounts"] == "1/2"
    status = cache_status(master, workers, fuse, host, [pod(True, True)])  # a node's Pod not made yet
    assert not status["preload"]["warm"] and not status["ready"]
    none_scheduled = {"status": {"numberReady": 0, "desiredNumberScheduled": 0}}
    assert not cache_status(master, workers, none_scheduled, host, [])["preload"]["warm"]
    assert pod_selector("tumour-slides", "fuse") == ("ringfeed.io/dataset=tumour-slides,"
                                                     "app.kubernetes.io/component=cache-fuse")
