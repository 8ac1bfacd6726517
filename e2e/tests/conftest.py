"""Fixtures for tests on a real Kubernetes cluster.

`cluster` (session), by RINGFEED_TEST_CLUSTER:
- unset: starts the local cluster (e2e/cluster/cluster.sh) for the session and stops it at the end
  (RINGFEED_TEST_KEEP=1 leaves it running). The tests run inside its network namespace: `make test-e2e`, or
  `e2e/cluster/cluster.sh run .venv/bin/python -m pytest e2e/tests`.
- `reuse`: the local cluster already running from .state/cluster (`make cluster-up`), left running.
- `kubeconfig`: any cluster named by $KUBECONFIG (kind: `make kind-up`), with the images already loaded.
Images come from `make images`, pushed to the cluster's registry; the chart from `make chart`, pushed there too. The
node pulls them with each namespace's pull Secret, as any cluster's node does.
`namespace` (function): a fresh namespace per test, deleted afterwards; when the test fails, pod logs, events and
every object's YAML are written to artifacts/<test>/ first.
`prometheus` (session, local cluster): a real Prometheus scraping the cluster's annotated targets throughout, with the
chart's rules; test_observability.py, run last, queries what the whole session left in it.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
from kubernetes import client

from ringfeed.connection import ClusterAddress
from ringfeed.local import LocalRing, RingSettings
from ringfeed.store import Store

from kubecluster import (
    CACHE,
    CASS_OPERATOR_CRDS,
    CHART_INSTALL,
    CRDS,
    LOCAL_SETTINGS,
    RELEASE,
    REPO,
    RING_ADDRESS_PREFIX,
    STATE,
    SYSTEM,
    Cluster,
)
from prometheus import Prometheus

CLUSTER_SCRIPT = REPO / "e2e" / "cluster" / "cluster.sh"
ARTIFACTS = Path(os.environ.get("RINGFEED_ARTIFACTS", REPO / "artifacts"))
MODE = os.environ.get("RINGFEED_TEST_CLUSTER", "local")
KEEP = os.environ.get("RINGFEED_TEST_KEEP") == "1"
NETNS = os.environ.get("RINGFEED_NETNS", "ringfeed-cluster")


def _cluster_script(command: str) -> None:
    env = dict(os.environ, RINGFEED_CACHE=str(CACHE), RINGFEED_CLUSTER_DIR=str(STATE))
    result = subprocess.run([str(CLUSTER_SCRIPT), command], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"cluster.sh {command} failed:\n{result.stdout}\n{result.stderr}")


def _inside_cluster_network() -> bool:
    result = subprocess.run(["ip", "netns", "identify", str(os.getpid())], capture_output=True, text=True)
    return result.stdout.strip() == NETNS


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    if MODE == "kubeconfig":
        if not os.environ.get("KUBECONFIG"):
            pytest.fail("RINGFEED_TEST_CLUSTER=kubeconfig needs KUBECONFIG naming the cluster to test")
        yield Cluster(Path(os.environ["KUBECONFIG"]))
        return
    if MODE not in ("local", "reuse"):
        pytest.fail(f"RINGFEED_TEST_CLUSTER={MODE!r}: expected unset (local), 'reuse' or 'kubeconfig'")
    if not _inside_cluster_network():
        pytest.fail(f"the e2e tests run inside the local cluster's network namespace {NETNS}: "
                    "make test-e2e, or e2e/cluster/cluster.sh run .venv/bin/python -m pytest e2e/tests")
    kubeconfig = STATE / "kubeconfig"
    if MODE == "reuse":
        if not kubeconfig.exists():
            pytest.fail(f"RINGFEED_TEST_CLUSTER=reuse but no cluster state in {STATE}; run: make cluster-up")
        yield Cluster(kubeconfig)
        return
    _cluster_script("up")
    try:
        yield Cluster(kubeconfig)
    finally:
        if not KEEP:
            _cluster_script("down")


@pytest.fixture(scope="session", autouse=True)
def prometheus(cluster: Cluster):
    """Prometheus for the whole session (see prometheus.py), from the first test on; its log goes to artifacts/."""
    folder = Path(os.environ.get("RINGFEED_TEST_STATE", REPO / ".state" / "test")) / "prometheus"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    server = Prometheus(folder, cluster.api)
    try:
        yield server
    finally:
        server.stop()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(server.log, ARTIFACTS / "prometheus.log")


def pytest_collection_modifyitems(items):
    """test_observability.py last: it queries what every other module's scenario left in Prometheus."""
    items.sort(key=lambda item: item.module.__name__ == "test_observability")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def namespace(cluster: Cluster, request) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].rstrip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels={"ringfeed.io/test": "true"})))
    cluster.allow_pulls(name)
    # Pods are admitted only once the namespace's default ServiceAccount exists.
    cluster.wait(f"ServiceAccount default in {name}",
                 lambda: cluster.core.list_namespaced_service_account(
                     name, field_selector="metadata.name=default").items)
    yield name
    failed = any(getattr(getattr(request.node, f"report_{when}", None), "failed", False)
                 for when in ("setup", "call"))
    if failed:
        cluster.dump(name, ARTIFACTS / request.node.name)
    cluster.core.delete_namespace(name, grace_period_seconds=1)

# -- the chart, a ring outside the cluster and samples: module fixtures of the operator's tests -------------------

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
# The PersistentVolumes a module's namespace binds (cluster-wide objects), deleted with it.
TEST_NAMESPACE_LABEL = "ringfeed.io/test-namespace"
SAMPLES_CLAIM, CUDA_CLAIM = "samples", "cuda-libraries"
# torch's PyPI wheel links its CUDA libraries even on CPU; the example image leaves those 3 GB out and the Pods mount
# them read-only from this node (the venv's, matching its torch), as a GPU node hands its driver to containers.
CUDA_LIBRARIES = REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "nvidia"


def host_directory_claim(cluster: Cluster, ns: str, claim: str, path: Path, writable: bool = False) -> None:
    """A folder of this node as PersistentVolumeClaim `claim` of `ns`, read-only unless `writable` (a hostPath
    PersistentVolume bound to it): what a Pod under the restricted Pod Security level may mount, where a hostPath
    volume is refused."""
    volume, mode = f"{ns}-{claim}", "ReadWriteMany" if writable else "ReadOnlyMany"
    cluster.core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": volume, "labels": {TEST_NAMESPACE_LABEL: ns}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": [mode], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": str(path), "type": "Directory"},
                 "claimRef": {"namespace": ns, "name": claim}}})
    cluster.core.create_namespaced_persistent_volume_claim(ns, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": [mode], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}}})


@pytest.fixture(scope="module")
def cuda_libraries(cluster: Cluster, ns: str) -> str:
    """The claim of the trainer Pods' CUDA libraries in the module's namespace."""
    host_directory_claim(cluster, ns, CUDA_CLAIM, CUDA_LIBRARIES)
    return CUDA_CLAIM

PATIENTS, PER_PATIENT = 6, 5  # per class, in `source`
TEST_STATE = Path(os.environ.get("RINGFEED_TEST_STATE", REPO / ".state" / "test"))


@pytest.fixture(scope="module")
def ring():
    """A Cassandra node outside the cluster that its Pods reach; TLS optional on its CQL port."""
    settings = RingSettings(cluster_name="ringfeed-e2e", address_prefix=RING_ADDRESS_PREFIX, jmx_base=7600, heap="768M",
                            ring_delay_ms=1000, tls=True)
    LocalRing(TEST_STATE / "e2e-ring", settings).down(purge=True)
    local = LocalRing(TEST_STATE / "e2e-ring", settings)
    local.up(1)
    try:
        yield local
    finally:
        local.down(purge=True)


@pytest.fixture(scope="module")
def store(ring):
    with Store(ClusterAddress(tuple(ring.hosts))) as s:
        yield s


@pytest.fixture(scope="module")
def source(tmp_path_factory, cluster: Cluster, ns: str):
    """/tmp/…/samples: manifest.csv (path, label, patient_id) + JPEGs, readable by the images' user 10001; claim
    SAMPLES_CLAIM of the module's namespace."""
    from PIL import Image

    root = Path(tmp_path_factory.mktemp("e2e-source")) / "samples"
    root.mkdir()
    rng = np.random.default_rng(3)
    rows = []
    for label in (0, 1):
        for patient in range(PATIENTS):
            for index in range(PER_PATIENT):
                name = f"c{label}_p{patient}_{index}.jpg"
                pixels = rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / name, quality=80)
                rows.append((name, label, f"P{patient:02d}"))
    (root / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    rows.append(("corrupt.jpg", 1, "P99"))
    with open(root / "manifest.csv", "w", newline="") as f:
        csv.writer(f).writerows([("path", "label", "patient_id"), *rows])
    for folder in (root, *root.parents[:3]):
        folder.chmod(0o755)
    for file in root.iterdir():
        file.chmod(0o644)
    host_directory_claim(cluster, ns, SAMPLES_CLAIM, root)
    return root


@pytest.fixture(scope="module")
def release(cluster: Cluster, request):
    """The packaged chart, from the registry, installed with the local values (the module's INSTALLED_CHART if it
    says so: the upgrade e2e's previous release); uninstalled (and its CRDs removed) at the end."""
    cluster.kubectl("create", "namespace", SYSTEM)
    cluster.allow_pulls(SYSTEM)
    chart = getattr(request.module, "INSTALLED_CHART", CHART_INSTALL)
    cluster.helm("install", RELEASE, *chart, "-n", SYSTEM, *LOCAL_SETTINGS, "--wait", "--timeout", "180s",
                 timeout=240)
    try:
        yield RELEASE
    finally:
        # --no-hooks: a cleanup, whatever another module's namespace still holds (test_operator tests the refusal).
        cluster.helm("uninstall", RELEASE, "-n", SYSTEM, "--no-hooks", "--wait", check=False, timeout=180)
        cluster.kubectl("delete", "crd", *CRDS, *CASS_OPERATOR_CRDS, "--ignore-not-found", "--wait=true", check=False,
                        timeout=120)
        # Gone before the next module installs the chart again (a terminating namespace refuses new objects).
        cluster.kubectl("delete", "namespace", SYSTEM, "--ignore-not-found", "--wait=true", "--timeout=150s",
                        check=False, timeout=180)


@pytest.fixture(scope="module")
def ns(cluster: Cluster, release, request):
    module = request.module.__name__.removeprefix("test_").replace("_", "-")
    name = f"e2e-{module}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.allow_pulls(name)
    # What a platform team sets: the restricted Pod Security level, unless the module says otherwise (the cache
    # tier's namespace, whose FUSE Pods are privileged).
    labels = getattr(request.module, "NAMESPACE_LABELS", RESTRICTED)
    cluster.kubectl("label", "namespace", name, *(f"{key}={value}" for key, value in labels.items()))
    cluster.wait("default ServiceAccount", lambda: cluster.core.list_namespaced_service_account(
        name, field_selector="metadata.name=default").items)
    yield name
    if request.session.testsfailed:
        cluster.dump(name, ARTIFACTS / request.module.__name__)
        cluster.dump(SYSTEM, ARTIFACTS / f"{request.module.__name__}-system")
    # Splits before Datasets, Datasets before Rings: the deletion guards would hold them otherwise. A Ring's nodes
    # are gone (cass-operator's finalizer) before the release's uninstall takes cass-operator away.
    for plural in ("trainingjobs", "splits", "datasets", "rings"):
        cluster.kubectl("delete", plural, "--all", "-n", name, "--wait=true", "--timeout=120s", check=False,
                        timeout=150)
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
    cluster.kubectl("delete", "persistentvolumes", "-l", f"{TEST_NAMESPACE_LABEL}={name}", "--wait=false",
                    check=False)
