"""A Dataset's Alluxio cache tier on the real local cluster (spec.cache.alluxio): the operator's master, worker and
FUSE DaemonSet from the project's image, its preload (every file read into the tier before a posix TrainingJob may
start), the split as a directory tree on the node, a TrainingJob with
``access: posix`` training 2 epochs with torchvision's ImageFolder over the mount (every file of the part read once
per epoch across 2 ranks, byte-identical with the ring), Alluxio's metrics scraped by Prometheus, and the tier gone
with spec.cache.

The chart, the ring (a Cassandra node outside the cluster) and the samples are conftest's module fixtures.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path

import pytest

from probes import check_isolated
from ringfeed.splits import load_split
from test_trainingjob import trained_by_rank, wait_phase

from conftest import CUDA_CLAIM
from kubecluster import CACHE_HOST_DIR, GROUP, PULL, VERSION, Cluster
from test_operator import condition, create, dataset_manifest, events, get, wait_ready

DATASET, SPLIT = "cached-slides", "cached-by-patient"
CATALOG = DATASET.replace("-", "_")
PASSWORD = "cache-e2e-password-7a2d"  # reaches the master and the workers only
CLASSES = ["normal", "tumor"]
RING_BYTES_METRIC = "Cluster_BytesReadUfsAll"  # Alluxio's count of bytes its workers read from the under-storage
# The one namespace of the suite that may run a cache tier: opted in by its label, privileged for the FUSE Pods.
NAMESPACE_LABELS = {"ringfeed.io/cache-tier": "allowed", "pod-security.kubernetes.io/enforce": "privileged"}


@pytest.fixture(scope="module")
def split(cluster: Cluster, ns: str, ring, store, source, cuda_libraries: str) -> dict:
    cluster.kubectl("create", "secret", "generic", "ring-credentials", "-n", ns, "--from-literal=username=cassandra",
                    f"--from-literal=password={PASSWORD}")
    manifest = dataset_manifest(DATASET, ring, cache={"alluxio": {"memory": "256Mi", "preload": True}})
    create(cluster, ns, "datasets", manifest)
    wait_ready(cluster, ns, "datasets", DATASET)
    create(cluster, ns, "splits", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": SPLIT},
                                   "spec": {"dataset": DATASET, "ratios": [3, 1], "names": ["train", "val"],
                                            "groupBy": ["patient_id"], "seed": 5}})
    return wait_ready(cluster, ns, "splits", SPLIT)


def wait_cache_ready(cluster: Cluster, ns: str) -> dict:
    def ready():
        dataset = get(cluster, ns, "datasets", DATASET)
        return dataset if condition(dataset, "CacheReady").get("status") == "True" else None
    return cluster.wait(f"the cache tier of {DATASET}", ready, timeout_s=360)


def ring_files(store, part: str, split_name: str = SPLIT) -> dict[str, str]:
    """<class>/<uuid>.jpg → SHA-256 of the sample's bytes in the ring, for every sample of the part."""
    files = {}
    for raw in load_split(store, CATALOG, split_name).uuids(part):
        record = store.sample(CATALOG, uuid.UUID(bytes=raw.tobytes()))
        files[f"{CLASSES[record.label]}/{record.uuid}.jpg"] = hashlib.sha256(record.data).hexdigest()
    return files


def tree(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def posix_trainingjob(name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name},
        "spec": {
            "split": {"name": SPLIT, "part": "train"}, "replicas": 2, "epochs": 2, "access": "posix",
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "trainer", "image": Cluster.image("trainer"),
                    "volumeMounts": [{"name": "cuda-libraries", "readOnly": True,
                                      "mountPath": "/opt/trainer/lib/python3.11/site-packages/nvidia"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }],
                "volumes": [{"name": "cuda-libraries",
                             "persistentVolumeClaim": {"claimName": CUDA_CLAIM, "readOnly": True}}],
            }},
        },
    }


def ring_reads(ring) -> int:
    """The node's local read count of the dataset's data_by_uuid: what anything took from the ring."""
    out = ring.nodetool(1, "tablestats", f"{CATALOG}.data_by_uuid")
    return int(re.search(r"Local read count: (\d+)", out)[1])


def test_the_preload_reads_every_file_into_the_tier_and_the_node_then_reads_none_from_the_ring(
        cluster: Cluster, ns: str, split: dict, ring, store):
    """First of the module: nothing has read the tree but the preload container beside the FUSE mount. Its first
    pass may have run before the Split was made; a later pass (every minute) reads the Split's files."""
    files = sum(part["samples"] for part in split["status"]["parts"])
    [pod] = cluster.core.list_namespaced_pod(
        ns, label_selector=f"ringfeed.io/dataset={DATASET},app.kubernetes.io/component=cache-fuse").items
    preload = next(c for c in pod.spec.containers if c.name == "preload")
    assert preload.security_context.run_as_non_root and not preload.security_context.privileged

    def warm():
        # Until the container starts (the node may still be pulling the image, and retries a failed pull after a
        # back-off, as on any cold node) it has no log to read.
        found = cluster.core.read_namespaced_pod(pod.metadata.name, ns)
        status = next((s for s in found.status.container_statuses or [] if s.name == "preload"), None)
        if status is None or status.state.waiting:
            return None
        log = cluster.core.read_namespaced_pod_log(pod.metadata.name, ns, container="preload")
        read = sum(int(n.replace(",", "")) for n in re.findall(r"^(?:preloaded|new files): ([\d,]+) files", log,
                                                                  re.MULTILINE))
        dataset = get(cluster, ns, "datasets", DATASET)
        return (dataset, log) if read == files and condition(dataset, "CacheWarm").get("status") == "True" else None
    dataset, log = cluster.wait(f"the preload of {DATASET}'s {files} files", warm, timeout_s=420)
    assert "failed" not in log, log
    cache = dataset["status"]["cache"]
    assert cache["preload"] == {"warm": True, "nodes": "1/1"} and cache["mounts"] == "1/1" and cache["ready"]
    assert condition(dataset, "CacheWarm")["reason"] == "Preloaded"
    cluster.wait("the CacheWarm event", lambda: "CacheWarm" in {e.reason for e in events(cluster, ns, DATASET)},
                 timeout_s=60)  # kopf posts events after the status patch
    # Every file of both parts, read now through the node's mount, comes from the tier: not one read of the ring.
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt"
    before = ring_reads(ring)
    read = {part: tree(mount / SPLIT / part) for part in ("train", "val")}
    assert ring_reads(ring) == before
    assert sum(map(len, read.values())) == files
    for part in ("train", "val"):
        assert read[part] == ring_files(store, part), part


def test_the_split_is_a_directory_tree_on_the_node_identical_to_the_ring(cluster: Cluster, ns: str, split: dict,
                                                                           store):
    dataset = wait_cache_ready(cluster, ns)
    cache = dataset["status"]["cache"]
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt"
    assert cache["hostPath"] == str(mount) and cache["workers"] == cache["mounts"] == "1/1"
    assert "CacheReady" in {e.reason for e in events(cluster, ns, DATASET)}
    assert sorted(p.name for p in (mount / SPLIT).iterdir()) == ["train", "val"]
    for part in ("train", "val"):
        assert sorted(p.name for p in (mount / SPLIT / part).iterdir()) == CLASSES
        assert tree(mount / SPLIT / part) == ring_files(store, part), part
    with pytest.raises(OSError):  # read-only for everyone
        (mount / SPLIT / "train" / "normal" / "new.jpg").write_bytes(b"x")
    # The tier's Pods: credentials in the master and the workers only, never in the FUSE process.
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"ringfeed.io/dataset={DATASET}").items
    by_role = {p.metadata.labels["app.kubernetes.io/component"]: p for p in pods}
    assert set(by_role) >= {"cache-master", "cache-worker", "cache-fuse"}
    assert not any(e.name.startswith("RINGFEED_") for e in by_role["cache-fuse"].spec.containers[0].env or ())


def test_the_tiers_ports_refuse_every_pod_but_its_own(cluster: Cluster, ns: str, split: dict):
    """The tier's NetworkPolicy under the cluster's engine: the master's and workers' Alluxio ports refuse an
    unlabelled Pod here and a Pod of another namespace (the tier's own Pods reaching each other: the tree above)."""
    wait_cache_ready(cluster, ns)
    pods = {pod.metadata.labels["app.kubernetes.io/component"]: pod.status.pod_ip
            for pod in cluster.core.list_namespaced_pod(ns, label_selector=f"ringfeed.io/dataset={DATASET}").items
            if pod.metadata.labels.get("app.kubernetes.io/component") in ("cache-master", "cache-worker")}
    check_isolated(cluster, ns, {"master-rpc": f"{pods['cache-master']}:19998",
                                 "master-web": f"{pods['cache-master']}:19999",
                                 "worker-rpc": f"{pods['cache-worker']}:29999",
                                 "worker-web": f"{pods['cache-worker']}:30000"})


def test_a_split_made_after_the_tree_was_listed_shows_on_the_node(cluster: Cluster, ns: str, split: dict, store):
    """The tier lists each folder once; a Split applied after the dataset's folder was listed still shows under its
    path (what a posix TrainingJob on a new Split reads), with no refresh."""
    wait_cache_ready(cluster, ns)
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt"
    assert "later" not in {p.name for p in mount.iterdir()}
    create(cluster, ns, "splits", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": "later"},
                                   "spec": {"dataset": DATASET, "ratios": [1], "names": ["all"], "seed": 8}})
    wait_ready(cluster, ns, "splits", "later")
    assert tree(mount / "later" / "all") == ring_files(store, "all", "later")


def test_a_posix_trainingjob_trains_two_epochs_with_imagefolder_reading_every_file_once(
        cluster: Cluster, ns: str, split: dict, store, prometheus):
    wait_cache_ready(cluster, ns)
    create(cluster, ns, "trainingjobs", posix_trainingjob("imagefolder"))
    done = wait_phase(cluster, ns, "imagefolder", "Succeeded", timeout_s=420)
    assert condition(done, "Succeeded")["status"] == "True"
    expected = ring_files(store, "train")
    reports = trained_by_rank(cluster, ns, "imagefolder")
    assert sorted(reports) == [0, 1]
    for report in reports.values():
        assert report["classes"] == CLASSES and report["world_size"] == 2
    for epoch in ("0", "1"):
        shards = [reports[rank]["read"][epoch] for rank in (0, 1)]
        assert not set(shards[0]) & set(shards[1]), f"epoch {epoch}: a file went to both ranks"
        assert {**shards[0], **shards[1]} == expected, f"epoch {epoch}: not every file once, byte for byte"
    # No sidecar and no credential anywhere in the trainer's Pod.
    pod = next(p for p in cluster.core.list_namespaced_pod(ns, label_selector="ringfeed.io/trainingjob=imagefolder")
               .items)
    assert not pod.spec.init_containers
    assert not any(v.secret or v.projected for v in pod.spec.volumes)
    for container in pod.spec.containers:
        assert not any(e.value_from and e.value_from.secret_key_ref for e in container.env or ())
        assert PASSWORD not in str(container.env)
    # Alluxio's own metrics reach Prometheus: the master and the worker are scraped, and the worker counted the
    # part's bytes it read from the ring.
    def scraped(expr: str) -> float | None:
        result = prometheus.api("query", query=expr)["result"]
        return float(result[0]["value"][1]) if result else None
    cluster.wait("Alluxio's master and worker scraped", lambda: scraped(
        f'count(up{{job="alluxio", namespace="{ns}"}} == 1)') == 2, timeout_s=120)
    ring_bytes = sum(len(store.sample(CATALOG, uuid.UUID(name.split("/")[1][:-4])).data) for name in expected)
    read = cluster.wait("the worker's bytes read from the ring", lambda: scraped(
        f'sum({RING_BYTES_METRIC}{{job="alluxio", namespace="{ns}"}})'), timeout_s=120)
    assert read >= ring_bytes


def reader_pod(ns: str) -> dict:
    """A Pod that mounts the node's folder of the tier as a posix TrainingJob does (read-only, HostToContainer)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reader"}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False, **PULL,
        "containers": [{"name": "reader", "image": Cluster.image("trainer"),
                        "command": ["python", "-c", "import time; time.sleep(3600)"],
                        "volumeMounts": [{"name": "cache", "mountPath": "/data", "readOnly": True,
                                          "mountPropagation": "HostToContainer"}]}],
        "volumes": [{"name": "cache", "hostPath": {"path": str(Path(CACHE_HOST_DIR) / ns / DATASET),
                                                    "type": "Directory"}}]}}


def digests_in_pod(cluster: Cluster, ns: str, folder: str) -> dict[str, str]:
    script = (f"import hashlib, json, pathlib; root = pathlib.Path({folder!r}); print(json.dumps({{"
              "str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob('*.jpg')}))")
    return json.loads(cluster.kubectl("exec", "-n", ns, "reader", "--", "python", "-c", script).stdout)


def test_a_killed_fuse_process_mounts_again_and_a_running_reader_sees_it(cluster: Cluster, ns: str, split: dict,
                                                                          store):
    """SIGKILL leaves the mount behind answering ENOTCONN; the restarted container detaches it and mounts again, and
    a Pod that was already running (as a trainer would be) reads the new mount through HostToContainer."""
    wait_cache_ready(cluster, ns)
    cluster.core.create_namespaced_pod(ns, reader_pod(ns))
    cluster.wait("the reader Pod", lambda: cluster.core.read_namespaced_pod("reader", ns).status.phase == "Running",
                 timeout_s=120)
    expected = ring_files(store, "val")
    assert digests_in_pod(cluster, ns, f"/data/mnt/{SPLIT}/val") == expected
    [pod] = cluster.core.list_namespaced_pod(
        ns, label_selector=f"ringfeed.io/dataset={DATASET},app.kubernetes.io/component=cache-fuse").items
    def fuse_status(current):
        return next(status for status in current.status.container_statuses if status.name == "fuse")
    restarts = fuse_status(pod).restart_count
    cluster.kill_container(ns, pod.metadata.name, "fuse")

    def restarted_and_ready():
        current = fuse_status(cluster.core.read_namespaced_pod(pod.metadata.name, ns))
        return current.restart_count > restarts and current.ready
    cluster.wait("the FUSE container restarted and mounted", restarted_and_ready, timeout_s=180)
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt"
    with open("/proc/mounts") as mounts:
        assert [line.split()[1] for line in mounts].count(str(mount)) == 1, "one mount, the stale one detached"
    assert tree(mount / SPLIT / "val") == expected
    assert digests_in_pod(cluster, ns, f"/data/mnt/{SPLIT}/val") == expected
    cluster.core.delete_namespaced_pod("reader", ns, grace_period_seconds=0)
    wait_cache_ready(cluster, ns)


def test_removing_spec_cache_removes_the_tier_and_its_mount(cluster: Cluster, ns: str, split: dict):
    cluster.kubectl("patch", "datasets", DATASET, "-n", ns, "--type=json",
                    "--patch", '[{"op": "remove", "path": "/spec/cache"}]')

    def gone():
        pods = cluster.core.list_namespaced_pod(ns, label_selector=f"ringfeed.io/dataset={DATASET},"
                                                "app.kubernetes.io/component in (cache-master,cache-worker,cache-fuse)")
        dataset = get(cluster, ns, "datasets", DATASET)
        return not pods.items and not condition(dataset, "CacheReady") and not dataset["status"].get("cache")
    cluster.wait("the cache tier to go", gone, timeout_s=180)
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt"
    with open("/proc/mounts") as mounts:
        assert str(mount) not in {line.split()[1] for line in mounts}
    assert "CacheRemoved" in {e.reason for e in events(cluster, ns, DATASET)}
