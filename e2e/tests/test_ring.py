"""Ring on the real local cluster: the chart's cass-operator runs the CassandraDatacenter a Ring becomes (Cassandra
5.0.9 with the Management API, built from third_party/), TLS only: CQL over TLS checked against the Ring's CA and
Service name (a plaintext client is refused), internode over mutual TLS, the Management API to cass-operator's
client certificate alone, and a certificate renewed by the operator while a loader reads. A Dataset is ingested
into it and read through the Pod network by a loader logged in as the Ring's read-only role, epoch after epoch,
while the ring grows by a node and shrinks back: by `kubectl scale` (cass-operator killed mid-join, Ringfeed's
operator mid-decommission), then by the autoscaler reacting to the loader's reads. No read fails, every epoch
delivers every sample once with its bytes, every sample is checked against its source file after each step, and
a sample deleted between the steps stays deleted.

The module's release starts as the previous one (0.1.0, e2e/upgrade/): its operator makes the Ring, the Dataset
and the Split; the first test suspends a TrainingJob mid-epoch and upgrades the release to this one, and the tests
after it run on the upgraded release.

The local node has no volume provisioner: the module makes a StorageClass and hostPath PersistentVolumes.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import ssl
import threading
import time
import uuid
from pathlib import Path

import pytest
from cassandra import Unauthorized
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster as CqlCluster
from cassandra.cluster import NoHostAvailable
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from kubernetes import client

from probes import check_isolated
from ringfeed.connection import ClusterAddress
from ringfeed.loader import Loader
from ringfeed.metrics import serve_loader_metrics
from ringfeed.splits import load_split
from ringfeed.store import Store
from ringfeed_operator.pki import KeyPair, issue, new_ca
from test_trainingjob import rank_pods, resume, trainingjob, wait_phase, wait_served

from conftest import SAMPLES_CLAIM, TEST_STATE
from kubecluster import (
    CACHE,
    CACHE_HOST_DIR,
    CHART_INSTALL,
    GROUP,
    IMAGE_VERSION,
    LOCAL_SETTINGS,
    PREVIOUS_INSTALL,
    PREVIOUS_VERSION,
    PULL_SECRET,
    REGISTRY,
    RELEASE,
    SYSTEM,
    VERSION,
    Cluster,
)
from prometheus import Prometheus
from test_operator import condition, create, events, get, wait_ready

RING = "images"
DATASET, SPLIT = "ring-slides", "ring-by-patient"
CATALOG = DATASET.replace("-", "_")
STORAGE_CLASS = "ringfeed-e2e-local"
VOLUMES = 4  # every node that joins gets a new volume: 1 → 2 → 1 → 2 → 1 takes three, one spare
# make bench-ring-scale: where the benchmark scenario writes its measurements (unset: the scenario is skipped).
BENCH_OUT = os.environ.get("RINGFEED_BENCH_RING_SCALE")
# The benchmark's replication factor: the ring starts with that many nodes, grows by one and shrinks back (RF 2:
# 2 → 3 → 2). The tests above run at 1.
BENCH_RF = int(os.environ.get("RINGFEED_BENCH_RING_RF", "1"))
BENCH_WARM_UP_S, BENCH_STEADY_S = 30, 90  # the loader's JIT-warm start, then each steady phase
READER_JOB = "e2e-ring-reader"  # the `trainingjob` label of the Reader's loader metrics
INSTALLED_CHART = PREVIOUS_INSTALL  # conftest's `release`: upgraded by the module's first test
NODE_START_S = 420  # a Cassandra node starts in about 100 s on two idle cores; bootstraps and cleanups add to it


@pytest.fixture(scope="module")
def volumes(cluster: Cluster):
    """A StorageClass without a provisioner and hostPath PersistentVolumes in world-writable folders (Cassandra runs
    as uid 999); deleted at the end, their folders with them."""
    storage = client.StorageV1Api(cluster.api)
    root = TEST_STATE / "ring-volumes"
    shutil.rmtree(root, ignore_errors=True)
    storage.create_storage_class(client.V1StorageClass(
        metadata=client.V1ObjectMeta(name=STORAGE_CLASS), provisioner="kubernetes.io/no-provisioner",
        volume_binding_mode="WaitForFirstConsumer", reclaim_policy="Retain"))
    names = []
    for index in range(VOLUMES):
        folder = root / f"pv-{index}"
        folder.mkdir(parents=True)
        folder.chmod(0o777)
        name = f"ringfeed-e2e-ring-{index}"
        cluster.core.create_persistent_volume(client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "2Gi"}, access_modes=["ReadWriteOnce"], storage_class_name=STORAGE_CLASS,
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=str(folder), type="Directory"))))
        names.append(name)
    yield names
    for name in names:
        cluster.core.delete_persistent_volume(name)
    storage.delete_storage_class(STORAGE_CLASS)
    shutil.rmtree(root, ignore_errors=True)


def ring_manifest(nodes: int = 1, **spec) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Ring", "metadata": {"name": RING},
        "spec": {"nodes": nodes, "minNodes": 1, "maxNodes": nodes + 1, "allowMultipleNodesPerWorker": True,
                 "heapSize": "512Mi", "cooldownSeconds": 5,
                 "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
                 "storage": {"storageClassName": STORAGE_CLASS, "size": "1Gi"}, **spec},
    }


def secret_login(cluster: Cluster, ns: str, name: str) -> tuple[str, str]:
    data = cluster.core.read_namespaced_secret(name, ns).data
    return tuple(base64.b64decode(data[key]).decode() for key in ("username", "password"))  # type: ignore[return-value]


def node_ips(cluster: Cluster, ns: str) -> tuple[str, ...]:
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"cassandra.datastax.com/datacenter={RING}").items
    return tuple(p.status.pod_ip for p in pods if p.status.pod_ip and not p.metadata.deletion_timestamp)


def wait_settled(cluster: Cluster, ns: str, nodes: int) -> dict:
    """The Ring once it has `nodes` nodes, all Ready, no step under way, and (after a scale-up) the cleanup done."""
    def settled():
        ring = get(cluster, ns, "rings", RING) or {}
        status = ring.get("status") or {}
        last = status.get("lastStep") or {}
        done = (status.get("nodes") == nodes == status.get("readyNodes") and ring["spec"]["nodes"] == nodes
                and condition(ring, "Scaling").get("status") == "False" and last.get("finishedAt")
                and (last["to"] < last["from"] or last.get("cleanupDoneAt")))
        return ring if done else None
    ring = cluster.wait(f"ring {RING} settled at {nodes} nodes", settled, timeout_s=NODE_START_S + 180)
    check_ring_view(cluster, ns, nodes)
    return ring


def check_ring_view(cluster: Cluster, ns: str, nodes: int) -> None:
    """Each running node's own ring is `nodes` nodes, all up and normal: a departed node the others still list (down,
    leaving: its Pod stopped before they heard it had left) keeps ranges whose reads fail, until removed by hand."""
    listed = cluster.core.list_namespaced_pod(ns, label_selector=f"cassandra.datastax.com/datacenter={RING}").items
    pods = [pod.metadata.name for pod in listed if pod.metadata.deletion_timestamp is None]
    assert len(pods) == nodes, pods
    views: dict[str, list[str]] = {}

    def agreed():
        for pod in pods:
            status = cluster.kubectl("exec", pod, "-n", ns, "-c", "cassandra", "--", "nodetool", "status",
                                     check=False)
            if status.returncode != 0:
                views[pod] = [status.stderr.strip()[-200:]]
                continue
            # Up or Down (or ? where the failure detector knows nothing of it), and Normal, Leaving, Joining, Moving
            views[pod] = re.findall(r"^([UD?][NLJM])\s", status.stdout, re.MULTILINE)
        return all(view == ["UN"] * nodes for view in views.values())
    # A LEFT state takes a gossip round or two to reach every node; a node left behind stays so.
    try:
        cluster.wait(f"every node's ring to list {nodes} nodes up and normal", agreed, timeout_s=60)
    except AssertionError as error:
        raise AssertionError(f"{error}; their rings: {views}") from None


class Reader(threading.Thread):
    """Epoch after epoch of a split part through the native loader, until stopped: each must deliver every
    sample of the part once, with the bytes of its source file. A failed read is recorded, then reading goes on."""

    def __init__(self, address: ClusterAddress, part_uuids: list[bytes], digests: dict[bytes, str] | None = None,
                 pause_s: float = 0.02, prometheus: Prometheus | None = None, namespace: str = ""):
        """digests: UUID → sha256 of each sample's bytes, checked when given; prometheus: scrapes the loader's
        metrics (as TrainingJob `e2e-ring-reader` of `namespace`)."""
        super().__init__(daemon=True)
        self.address, self.digests, self.part = address, digests, sorted(part_uuids)
        self.prometheus, self.namespace = prometheus, namespace
        self.pause_s = pause_s
        self.stopping = threading.Event()
        self.epochs = 0
        self.samples = 0
        self.failures: list[str] = []
        self.timeline: list[tuple[float, int]] = []  # (time.time(), samples) of each batch

    def run(self) -> None:
        loader = None
        while not self.stopping.is_set():
            try:
                if loader is None:
                    loader = Loader(CATALOG, SPLIT, "train", address=self.address, batch_size=4, with_uuids=True,
                                    seed=self.epochs)
                    if self.prometheus is not None:
                        port = serve_loader_metrics(loader, 0, addr="127.0.0.1", trainingjob=READER_JOB)
                        self.prometheus.add_loader(f"127.0.0.1:{port}", namespace=self.namespace)
                seen = []
                for blobs, _, uuids in loader:
                    for index, sample in enumerate(uuids):
                        key = sample.tobytes()
                        if self.digests and hashlib.sha256(blobs[index]).hexdigest() != self.digests.get(key):
                            self.failures.append(f"epoch {self.epochs}: sample {uuid.UUID(bytes=key)}: wrong bytes")
                        seen.append(key)
                    self.samples += len(uuids)
                    self.timeline.append((time.time(), len(uuids)))
                    time.sleep(self.pause_s)  # a trainer's step; leaves the two cores to the ring's nodes too
                if sorted(seen) != self.part:
                    self.failures.append(f"epoch {self.epochs}: {len(seen)} samples, {len(set(seen))} distinct, "
                                         f"{len(self.part)} in the part")
                self.epochs += 1
            except Exception as error:  # noqa: BLE001  (any failure of a read is what this counts)
                self.failures.append(f"epoch {self.epochs}: {type(error).__name__}: {error}")
                loader = None
                time.sleep(0.5)
        if loader is not None:
            loader.close()

    def stop(self) -> Reader:
        self.stopping.set()
        self.join(timeout=60)
        return self


def split_manifest() -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": SPLIT},
            "spec": {"dataset": DATASET, "ratios": [3, 1], "names": ["train", "val"], "groupBy": ["patient_id"],
                     "seed": 5}}


@pytest.fixture(scope="module")
def ring(cluster: Cluster, ns: str, volumes, source: Path) -> dict:
    """The Ring (one node; the benchmark's replication factor of nodes when it runs), its Dataset ingested from
    `source` with that replication factor, and a Split of it, Ready."""
    base = BENCH_RF if BENCH_OUT else 1
    create(cluster, ns, "rings", ring_manifest(base))
    ring = wait_ready(cluster, ns, "rings", RING, timeout_s=NODE_START_S * base)
    create(cluster, ns, "datasets", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset", "metadata": {"name": DATASET},
        "spec": {"storage": {"ring": {"name": RING}},
                 "replication": {"replicationFactor": base},
                 "schema": {"naturalKeys": [{"name": "path", "type": "text"}],
                            "metadata": [{"name": "patient_id", "type": "text"}],
                            "encoding": {"kind": "jpeg"}, "labelNames": ["normal", "tumor"]},
                 "ingest": {"source": {"volume": {"persistentVolumeClaim": {"claimName": SAMPLES_CLAIM,
                                                                            "readOnly": True}},
                                       "path": "manifest.csv"},
                            "format": "manifest", "workers": 2, "concurrency": 16}}})
    wait_ready(cluster, ns, "datasets", DATASET, timeout_s=300)
    create(cluster, ns, "splits", split_manifest())
    wait_ready(cluster, ns, "splits", SPLIT)
    yield ring
    # The Ring is gone once cass-operator has removed its datacenter: before the release takes cass-operator away.
    for plural, name in (("splits", SPLIT), ("datasets", DATASET), ("rings", RING)):
        cluster.kubectl("delete", plural, name, "-n", ns, "--wait=true", "--timeout=240s", check=False, timeout=270)
    assert get(cluster, ns, "rings", RING) is None
    # The datacenter goes before its Pods: the garbage collector removes them after (a Cassandra node drains first).
    cluster.wait("the Ring's Pods gone", lambda: not cluster.core.list_namespaced_pod(
        ns, label_selector=f"cassandra.datastax.com/datacenter={RING}").items, timeout_s=180)


def secret_text(cluster: Cluster, ns: str, name: str, key: str) -> str:
    return base64.b64decode(cluster.core.read_namespaced_secret(name, ns).data[key]).decode()


def ring_ca_file(cluster: Cluster, ns: str) -> str:
    """The Ring's CA certificate as a file (the drivers read files)."""
    path = TEST_STATE / "ring-ca.crt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(secret_text(cluster, ns, f"{RING}-ca", "ca.crt"))
    return str(path)


def server_name(ns: str) -> str:
    return f"{RING}-{RING}-service.{ns}.svc"


def addresses(cluster: Cluster, ns: str) -> tuple[ClusterAddress, ClusterAddress]:
    """(superuser, reader) logins to the ring's nodes by Pod IP (this process is in the cluster's network but not
    on its DNS), over TLS: the nodes' certificate checked against the Ring's CA and its Service's name."""
    hosts = node_ips(cluster, ns)
    ca = ring_ca_file(cluster, ns)
    superuser, reader = (secret_login(cluster, ns, f"{RING}-{role}") for role in ("superuser", "reader"))
    return tuple(ClusterAddress(hosts, username=login[0], password=login[1], local_dc=RING, tls_ca_file=ca,
                                tls_server_name=server_name(ns))
                 for login in (superuser, reader))  # type: ignore[return-value]


def presented_certificate(host: str, port: int, ca_file: str, name: str) -> x509.Certificate:
    """The certificate a node presents on `port`, verified against the CA and `name` (ssl.SSLError otherwise)."""
    context = ssl.create_default_context(cafile=ca_file)
    with socket.create_connection((host, port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def management_api_answers(host: str, ca_file: str | None, name: str, client_pem: str | None) -> bool:
    """Whether the Management API answers its liveness probe: over TLS with `client_pem` (key and certificate) or
    without a client certificate, or over plain HTTP when `ca_file` is None."""
    request = b"GET /api/v0/probes/liveness HTTP/1.0\r\n\r\n"
    try:
        with socket.create_connection((host, 8080), timeout=10) as raw:
            if ca_file is None:
                raw.sendall(request)
                return b" 200 " in raw.recv(64)
            context = ssl.create_default_context(cafile=ca_file)
            if client_pem:
                path = TEST_STATE / "management-client.pem"
                path.write_text(client_pem)
                context.load_cert_chain(path)
            with context.wrap_socket(raw, server_hostname=name) as tls:
                tls.sendall(request)  # TLS 1.3: a refused client certificate shows at the first read
                return b" 200 " in tls.recv(64)
    except (ssl.SSLError, OSError):
        return False


def check_tls(cluster: Cluster, ns: str, reader: ClusterAddress) -> None:
    """CQL answers TLS only, with the certificate of the Ring's CA for its Service name; the Management API answers
    only a client certificate of the CA (cass-operator's), and no other client."""
    host, ca = reader.hosts[0], reader.tls_ca_file
    assert ca is not None
    ca_subject = x509.load_pem_x509_certificate(Path(ca).read_bytes()).subject
    assert presented_certificate(host, 9042, ca, server_name(ns)).issuer == ca_subject
    plain = CqlCluster([host], auth_provider=PlainTextAuthProvider(reader.username, reader.password),
                       connect_timeout=5)
    with pytest.raises(NoHostAvailable):
        plain.connect()
    plain.shutdown()
    operator_client = "".join(secret_text(cluster, ns, f"{RING}-maac-client", key) for key in ("tls.key", "tls.crt"))
    now = dt.datetime.now(dt.UTC)
    stranger = issue(new_ca("elsewhere", now), "stranger", now, dt.timedelta(hours=1), client=True)
    assert management_api_answers(host, ca, server_name(ns), operator_client)
    assert not management_api_answers(host, ca, server_name(ns), None)
    assert not management_api_answers(host, ca, server_name(ns), stranger.key_pem + stranger.cert_pem)
    assert not management_api_answers(host, None, server_name(ns), None)


def source_digests(store: Store, source: Path) -> dict[bytes, str]:
    """UUID → sha256 of each sample's stored bytes, checked against its source file (the corrupt one excepted)."""
    digests = {}
    for file in sorted(source.glob("c[01]_*.jpg")):
        record = store.sample_by_key(CATALOG, {"path": file.name})
        assert record.data == file.read_bytes(), f"{file.name}: stored bytes differ from the source file"
        digests[record.uuid.bytes] = hashlib.sha256(record.data).hexdigest()
    return digests


def check_every_sample(store: Store, source: Path, deleted: set[bytes]) -> None:
    """After a step: every sample's bytes as in its source file; deleted ones absent."""
    schema = store.schema(CATALOG)
    indexed = {row[0] for row in store.session.execute(f"SELECT path FROM {schema.keyspace}.metadata_by_nat")}
    unindexed = sorted(f.name for f in source.glob("c[01]_*.jpg") if f.name not in indexed)
    assert not unindexed, f"{len(unindexed)} samples without their metadata_by_nat row after a step: {unindexed}"
    for file in sorted(source.glob("c[01]_*.jpg")):
        sample = store.session.execute(f"SELECT uuid FROM {schema.keyspace}.metadata_by_nat WHERE path = %s",
                                       (file.name,)).one()[0]
        row = store.session.execute(f"SELECT data FROM {schema.keyspace}.data_by_uuid WHERE uuid = %s",
                                    (sample,)).one()
        if sample.bytes in deleted:
            assert row is None, f"{file.name}: deleted, yet back after a step"
        else:
            assert row is not None and row[0] == file.read_bytes(), f"{file.name}: bytes differ after a step"


def scale(cluster: Cluster, ns: str, nodes: int) -> None:
    cluster.kubectl("scale", f"ring/{RING}", "-n", ns, f"--replicas={nodes}")


def wait_scaling(cluster: Cluster, ns: str) -> None:
    """Until the operator has started the step (condition Scaling True)."""
    cluster.wait("the step to start", lambda: condition(get(cluster, ns, "rings", RING), "Scaling").get("status")
                 == "True", timeout_s=60)


def installed_chart(cluster: Cluster) -> str:
    releases = json.loads(cluster.helm("list", "-n", SYSTEM, "-o", "json").stdout)
    return next(r["chart"] for r in releases if r["name"] == RELEASE)


def operator_image(cluster: Cluster) -> str:
    deployment = cluster.apps.read_namespaced_deployment(RELEASE, SYSTEM)  # the chart names it after the release
    return deployment.spec.template.spec.containers[0].image


def trainingjob_status_fields(cluster: Cluster) -> set[str]:
    crd = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(f"trainingjobs.{GROUP}")
    schema = crd.spec.versions[0].schema.open_apiv3_schema
    return set(schema.properties["status"].properties)


def ring_nodes(cluster: Cluster, ns: str) -> dict[str, tuple[str, int]]:
    """Each node Pod's name → (uid, restarts of its containers)."""
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"cassandra.datastax.com/datacenter={RING}").items
    return {p.metadata.name: (p.metadata.uid, sum(c.restart_count for c in p.status.container_statuses or ()))
            for p in pods}


def test_an_upgrade_from_the_previous_release_keeps_the_ring_dataset_split_and_a_suspended_trainingjob(
        cluster: Cluster, ns: str, ring: dict, cuda_libraries: str):
    """The previous release's operator made the Ring, its Dataset and its Split; a TrainingJob is suspended
    mid-epoch; `helm upgrade` to this release (whose TrainingJob CRD gains status.lineage). Nothing is ingested or
    split again, the Ring's node runs on untouched, and the job resumes where it stood: every training sample once."""
    assert installed_chart(cluster) == f"ringfeed-{PREVIOUS_VERSION}"
    # Its operator image is the one `make previous-release` made with that release's operator package.
    _, digest, _ = (CACHE / "images" / f"pushed-{PREVIOUS_VERSION}" / "operator").read_text().split()
    assert operator_image(cluster).endswith(f"@{digest}")
    assert "lineage" not in trainingjob_status_fields(cluster)
    create(cluster, ns, "trainingjobs", trainingjob("upgraded", replicas=1, epochs=1, split=SPLIT, step_delay_s=3.0))
    wait_served(cluster, ns, "upgraded", 0, batches=3)
    cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "trainingjobs", "upgraded",
                                                  {"spec": {"suspend": True}})
    kept = wait_phase(cluster, ns, "upgraded", "Suspended", timeout_s=60)["status"]["ranks"][0]
    assert kept["offset"] > 0
    cluster.wait("the rank's Pod gone", lambda: not rank_pods(cluster, ns, "upgraded"), timeout_s=90)
    nodes = ring_nodes(cluster, ns)
    dataset, split = get(cluster, ns, "datasets", DATASET), get(cluster, ns, "splits", SPLIT)
    upgraded_at = dt.datetime.now(dt.UTC).replace(microsecond=0)

    cluster.helm("upgrade", RELEASE, *CHART_INSTALL, "-n", SYSTEM, *LOCAL_SETTINGS, "--wait", "--timeout", "180s",
                 timeout=240)
    assert installed_chart(cluster) == f"ringfeed-{IMAGE_VERSION}"
    assert not operator_image(cluster).endswith(f"@{digest}")
    assert "lineage" in trainingjob_status_fields(cluster)
    # The suspended job kept its ranks' positions through the operator's replacement.
    assert get(cluster, ns, "trainingjobs", "upgraded")["status"]["ranks"][0] == kept
    report = resume(cluster, ns, "upgraded", timeout_s=180)
    assert (report["epoch"], report["offset"]) >= (kept["epoch"], kept["offset"])
    done = wait_phase(cluster, ns, "upgraded", "Succeeded", timeout_s=300)
    train = next(p for p in split["status"]["parts"] if p["name"] == "train")
    assert done["status"]["samplesDelivered"] == train["samples"]
    lineage = done["status"]["lineage"]  # recorded by this release's operator
    assert (lineage["splitVersion"], lineage["contentHash"]) == (split["status"]["version"],
                                                                 split["status"]["contentHash"])
    assert [e["epoch"] for e in lineage["epochs"]] == [0]

    # Nothing made again: no Job but the TrainingJob's since the upgrade, the same ingest and Split, the same node.
    since = [job.metadata.name for job in cluster.batch.list_namespaced_job(ns).items
             if job.metadata.creation_timestamp >= upgraded_at and job.metadata.name != "upgraded"]
    assert not since, since
    assert get(cluster, ns, "datasets", DATASET)["status"]["ingest"] == dataset["status"]["ingest"]
    after = get(cluster, ns, "splits", SPLIT)["status"]
    assert (after["version"], after["contentHash"]) == (split["status"]["version"], split["status"]["contentHash"])
    assert ring_nodes(cluster, ns) == nodes
    cluster.kubectl("delete", "trainingjob", "upgraded", "-n", ns, "--wait=true")  # the Split's deletion guard


def test_a_retained_rings_volumes_outlive_it_and_the_same_ring_created_again_finds_the_data(
        cluster: Cluster, ns: str, ring: dict):
    """deletionPolicy Retain, the default: deleting the Ring (after its Split and its Dataset, whose keyspace is
    retained too) keeps the nodes' PersistentVolumeClaims; the Ring created again with the same name starts on them,
    and a Dataset created again without an ingest finds every sample. The Split is made again too: the tests after
    this one run on a Ring that this release made (the previous release's made the first)."""
    samples = get(cluster, ns, "datasets", DATASET)["status"]["samples"]
    assert samples > 0
    dataset = get(cluster, ns, "datasets", DATASET)
    split = get(cluster, ns, "splits", SPLIT)["status"]
    cluster.kubectl("delete", "trainingjobs", "--all", "-n", ns, "--wait=true", "--timeout=120s", timeout=150)
    for plural, name in (("splits", SPLIT), ("datasets", DATASET), ("rings", RING)):
        cluster.kubectl("delete", plural, name, "-n", ns, "--wait=true", "--timeout=240s", timeout=270)
    assert get(cluster, ns, "rings", RING) is None
    # Its Secrets (credentials, certificates) go once their finalizer is lifted: none is left terminating, which
    # would hold the namespace's deletion for ever.
    cluster.wait("the Ring's Secrets gone", lambda: not cluster.core.list_namespaced_secret(
        ns, label_selector=f"ringfeed.io/ring={RING}").items, timeout_s=60)
    claims = cluster.core.list_namespaced_persistent_volume_claim(
        ns, label_selector=f"cassandra.datastax.com/cluster={RING}").items
    assert claims and all(claim.status.phase == "Bound" for claim in claims), "the nodes' volumes are kept"
    kept = {claim.metadata.name for claim in claims}

    create(cluster, ns, "rings", ring_manifest(1))
    wait_ready(cluster, ns, "rings", RING, timeout_s=NODE_START_S)
    spec = {key: value for key, value in dataset["spec"].items() if key != "ingest"}
    create(cluster, ns, "datasets", {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset",
                                     "metadata": {"name": DATASET}, "spec": spec})
    found = wait_ready(cluster, ns, "datasets", DATASET, timeout_s=300)
    assert found["status"]["samples"] == samples, found["status"]
    assert any(e.reason == "TablesAdopted" for e in events(cluster, ns, DATASET))
    claims = cluster.core.list_namespaced_persistent_volume_claim(
        ns, label_selector=f"cassandra.datastax.com/cluster={RING}").items
    assert {claim.metadata.name for claim in claims} >= kept
    create(cluster, ns, "splits", split_manifest())
    made_again = wait_ready(cluster, ns, "splits", SPLIT)["status"]
    assert made_again["contentHash"] == split["contentHash"]  # the same seed over the same samples


def test_a_ring_serves_its_dataset_and_resizes_under_load_without_a_failed_read(
        cluster: Cluster, ns: str, ring: dict, source: Path, prometheus: Prometheus):
    ring = get(cluster, ns, "rings", RING)
    status = ring["status"]
    assert status["datacenter"] == RING and status["service"] == f"{RING}-{RING}-service.{ns}.svc"
    dc = cluster.custom.get_namespaced_custom_object("cassandra.datastax.com", "v1beta1", ns, "cassandradatacenters",
                                                     RING)
    assert dc["spec"]["size"] == 1 and dc["metadata"]["ownerReferences"][0]["uid"] == ring["metadata"]["uid"]
    # The chart's Cassandra image, pulled from the registry by the digest `make chart` pinned, with the pull Secret.
    image = dc["spec"]["serverImage"]
    assert re.fullmatch(rf"{REGISTRY}/ringfeed/cassandra-maac:5\.0\.9@sha256:[0-9a-f]{{64}}", image), image
    assert dc["spec"]["podTemplateSpec"]["spec"]["imagePullSecrets"] == [{"name": PULL_SECRET}]
    # This release's node template (the Ring was made again above): a leaving node goes on gossiping before its drain.
    node = next(c for c in dc["spec"]["podTemplateSpec"]["spec"]["containers"] if c["name"] == "cassandra")
    assert node["lifecycle"]["preStop"]["exec"]["command"][:2] == ["sh", "-c"], node
    assert node["lifecycle"]["preStop"]["exec"]["command"][2].startswith("sleep 10; exec curl"), node
    header, row = cluster.kubectl("get", "rings", RING, "-n", ns).stdout.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "READY", "NODES", "DESIRED", "SCALING", "HELD"], header
    assert row.split()[:5] == [RING, "True", "1", "1", "False"], row

    superuser, reader = addresses(cluster, ns)
    with Store(superuser) as store:
        digests = source_digests(store, source)
        parts = load_split(store, CATALOG, SPLIT)
        train = [u.tobytes() for u in parts.uuids("train")]
        val = [u.tobytes() for u in parts.uuids("val")]
        assert len(digests) == len(train) + len(val) == 60
        check_least_privilege(reader, store.schema(CATALOG).keyspace)
        check_writer_privilege(store, dataclasses.replace(
            reader, **dict(zip(("username", "password"), secret_login(cluster, ns, f"{DATASET}-writer"),
                               strict=True))), store.schema(CATALOG).keyspace)
        check_tls(cluster, ns, reader)

        deleted: set[bytes] = set()
        loaded = Reader(reader, train, digests, prometheus=prometheus, namespace=ns)
        loaded.start()
        try:
            cluster.wait("a first epoch", lambda: loaded.epochs >= 1, timeout_s=60)
            # The autoscaler grows the ring under the load; cass-operator is replaced while the node joins.
            cluster.custom.patch_namespaced_custom_object(GROUP, VERSION, ns, "rings", RING, {"spec": {"autoscaling": {
                "metric": "ReadsPerSecondPerNode", "scaleUpAbove": 20, "scaleDownBelow": 2, "windowSeconds": 15}}})
            def grown():
                ring = get(cluster, ns, "rings", RING)
                return ring if ring["spec"]["nodes"] == 2 else None
            asked = cluster.wait("the autoscaler to ask for a second node", grown, timeout_s=180)
            assert asked["status"]["autoscaler"]["value"] > 20
            wait_scaling(cluster, ns)
            cluster.replace_pod(SYSTEM, "app.kubernetes.io/name=cass-operator")  # cass-operator, mid-join
            grown_ring = wait_settled(cluster, ns, 2)
            assert grown_ring["status"]["lastStep"]["reason"].startswith("Autoscaler"), grown_ring["status"]
            check_every_sample(store, source, deleted)
            # Deleted on the two-node ring: the decommission below streams the ranges back without the row.
            victim = val[0]
            store.session.execute(f"DELETE FROM {store.schema(CATALOG).keyspace}.data_by_uuid WHERE uuid = %s",
                                  (uuid.UUID(bytes=victim),))
            deleted.add(victim)
            # Then `kubectl scale` by hand shrinks it, the reads going on; Ringfeed's operator is replaced while the
            # node leaves. The autoscaler goes first, or it would grow the ring again under the same load.
            cluster.kubectl("patch", "ring", RING, "-n", ns, "--type=json",
                            "--patch", '[{"op": "remove", "path": "/spec/autoscaling"}]')
            epochs_at_two = loaded.epochs
            scale(cluster, ns, 1)
            wait_scaling(cluster, ns)
            cluster.replace_pod(SYSTEM, "app.kubernetes.io/component=operator")  # Ringfeed's, mid-decommission
            wait_settled(cluster, ns, 1)
            check_every_sample(store, source, deleted)
            cluster.wait("epochs after the scale-down", lambda: loaded.epochs >= epochs_at_two + 2, timeout_s=60)
        finally:
            loaded.stop()
    assert loaded.failures == [], loaded.failures[:5]
    assert loaded.epochs >= 4 and loaded.samples >= loaded.epochs * len(train)
    # This Ring's events (not those of the one the previous release made under the same name, deleted above)
    own = [e for e in events(cluster, ns, RING) if e.involved_object.uid == ring["metadata"]["uid"]]
    reasons = [e.reason for e in own]
    assert {"SecretCreated", "CertificateIssued", "DatacenterCreated", "ScalingUp", "ScalingDown",
            "StepFinished", "Autoscaled"} <= set(reasons), reasons
    assert any("1 → 2" in e.message for e in own if e.reason == "Autoscaled")
    # Each `kubectl scale` ran the change handler: the datacenter's settings still matched the spec (a difference
    # would have restarted the nodes); its nodes have the stop hook, so the scale-down warned of nothing.
    assert "DatacenterUpdated" not in reasons and "ScaleDownUnguarded" not in reasons, reasons


def test_a_certificate_due_is_renewed_while_a_loader_reads_without_a_failed_read(cluster: Cluster, ns: str,
                                                                                 ring: dict):
    """The node's certificate is made due (one of the Ring's CA with a tenth of its validity left, as an old one
    would be); the operator's renewal timer replaces it; the kubelet brings the new files into the node; Cassandra
    loads them (asked here with `nodetool reloadssl`: on its own it looks every 600 s); a loader reads through it
    all, and new connections check the renewed certificate."""
    _, reader = addresses(cluster, ns)
    assert reader.tls_ca_file is not None
    with Store(reader) as store:
        train = [u.tobytes() for u in load_split(store, CATALOG, SPLIT).uuids("train")]
    now = dt.datetime.now(dt.UTC)
    ca = KeyPair(secret_text(cluster, ns, f"{RING}-ca", "ca.key"), secret_text(cluster, ns, f"{RING}-ca", "ca.crt"))
    old = issue(ca, "images nodes", now - dt.timedelta(hours=9), dt.timedelta(hours=10), server=True, client=True,
                dns_names=(f"{RING}-{RING}-service", server_name(ns)))
    cluster.core.patch_namespaced_secret(f"{RING}-node-tls", ns, {"stringData": {"node.pem": old.key_pem +
                                                                                             old.cert_pem}})
    loaded = Reader(reader, train)
    loaded.start()
    try:
        def renewed():
            pem = secret_text(cluster, ns, f"{RING}-node-tls", "node.pem")
            cert = x509.load_pem_x509_certificate(pem[pem.find("-----BEGIN CERTIFICATE-----"):].encode())
            return cert if cert.serial_number != old.certificate.serial_number else None
        new = cluster.wait("the operator to renew the node's certificate", renewed, timeout_s=150)
        assert new.not_valid_after_utc - now > dt.timedelta(days=80)
        pod = cluster.core.list_namespaced_pod(ns, label_selector=f"cassandra.datastax.com/datacenter={RING}").items[0]

        new_pem = new.public_bytes(Encoding.PEM).decode()

        def on_the_node():
            return new_pem in cluster.kubectl("exec", pod.metadata.name, "-n", ns, "-c", "cassandra", "--", "cat",
                                              "/etc/ringfeed/ring-tls/node.pem", check=False).stdout
        cluster.wait("the kubelet to update the node's files", on_the_node, timeout_s=150)
        cluster.kubectl("exec", pod.metadata.name, "-n", ns, "-c", "cassandra", "--", "nodetool", "reloadssl")
        served = presented_certificate(pod.status.pod_ip, 9042, reader.tls_ca_file, server_name(ns))
        assert served.serial_number == new.serial_number
        with Store(reader) as fresh:  # a new connection checks the renewed certificate
            assert fresh.session.execute("SELECT release_version FROM system.local").one()
        epochs = loaded.epochs
        cluster.wait("an epoch after the reload", lambda: loaded.epochs >= epochs + 1, timeout_s=60)
    finally:
        loaded.stop()
    assert loaded.failures == [], loaded.failures[:5]
    assert "CertificateRenewed" in {e.reason for e in events(cluster, ns, RING)}


def check_least_privilege(reader: ClusterAddress, keyspace: str) -> None:
    """The reader role reads the dataset and writes nothing."""
    cql = CqlCluster(list(reader.hosts), auth_provider=PlainTextAuthProvider(reader.username, reader.password),
                     ssl_context=ssl.create_default_context(cafile=reader.tls_ca_file),
                     ssl_options={"server_hostname": reader.tls_server_name})
    try:
        session = cql.connect()
        assert session.execute(f"SELECT uuid FROM {keyspace}.data_by_uuid LIMIT 1").one() is not None
        with pytest.raises(Unauthorized):
            session.execute(f"INSERT INTO {keyspace}.data_by_uuid (uuid, label) VALUES (uuid(), 0)")
        with pytest.raises(Unauthorized):
            session.execute(f"DROP KEYSPACE {keyspace}")
    finally:
        cql.shutdown()


def check_writer_privilege(superuser: Store, writer: ClusterAddress, keyspace: str) -> None:
    """The Dataset's writer role (what its ingest, which filled the ring, logged in with) writes its keyspace and
    the catalog, and cannot touch another keyspace, the schema or the roles."""
    superuser.session.execute("CREATE KEYSPACE IF NOT EXISTS another_dataset WITH replication = "
                              "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    superuser.session.execute("CREATE TABLE IF NOT EXISTS another_dataset.samples (id int PRIMARY KEY, data blob)")
    cql = CqlCluster(list(writer.hosts), auth_provider=PlainTextAuthProvider(writer.username, writer.password),
                     ssl_context=ssl.create_default_context(cafile=writer.tls_ca_file),
                     ssl_options={"server_hostname": writer.tls_server_name})
    try:
        session = cql.connect()
        assert writer.username == f"{keyspace}_writer"
        session.execute(f"DELETE FROM {keyspace}.data_by_uuid WHERE uuid = uuid()")  # allowed: no such sample
        for statement in ("INSERT INTO another_dataset.samples (id, data) VALUES (1, 0x00)",
                          "SELECT * FROM another_dataset.samples", "DROP KEYSPACE another_dataset",
                          f"DROP TABLE {keyspace}.data_by_uuid", "CREATE ROLE intruder WITH LOGIN = true"):
            with pytest.raises(Unauthorized):
                session.execute(statement)
    finally:
        cql.shutdown()
        superuser.session.execute("DROP KEYSPACE IF EXISTS another_dataset")


def test_a_trainingjob_trains_on_the_ring_through_its_sidecar_over_tls(cluster: Cluster, ns: str, ring: dict,
                                                                        cuda_libraries: str):
    """The sidecar logs in as the reader, checks the nodes against the Ring's CA and Service name, and feeds every
    sample of the part once; the trainer gets neither the credentials nor the CA."""
    create(cluster, ns, "trainingjobs", trainingjob("on-the-ring", replicas=1, epochs=1, split=SPLIT))
    try:
        done = wait_phase(cluster, ns, "on-the-ring", "Succeeded", timeout_s=300)
        split = get(cluster, ns, "splits", SPLIT)
        train = next(p for p in split["status"]["parts"] if p["name"] == "train")
        assert done["status"]["samplesDelivered"] == train["samples"]
        job = cluster.batch.read_namespaced_job("on-the-ring", ns)
        env = {e.name: e.value for e in job.spec.template.spec.init_containers[0].env}
        assert env["RINGFEED_TLS_SERVER_NAME"] == f"{RING}-{RING}-service" and env["RINGFEED_TLS_CA_FILE"]
        trainer = job.spec.template.spec.containers[0]
        assert not any(e.name.startswith("RINGFEED_TLS") or (e.value_from and e.value_from.secret_key_ref)
                       for e in trainer.env or ())
        assert not any(m.mount_path.startswith("/etc/ringfeed") for m in trainer.volume_mounts or ())
    finally:  # the Split's deletion guard holds while the TrainingJob exists
        cluster.kubectl("delete", "trainingjob", "on-the-ring", "-n", ns, "--wait=true", check=False)


def test_only_ringfeeds_pods_reach_the_rings_cql_and_only_its_peers_its_other_ports(cluster: Cluster, ns: str,
                                                                                     ring: dict):
    """The Ring's NetworkPolicy under the cluster's engine: CQL admits the Pods labelled as Ringfeed's of this
    namespace; internode, the Management API and the agent's metrics admit neither them, an unlabelled Pod here nor
    a Pod of another namespace (cass-operator reaching the Management API, the nodes each other: the rest of this
    module)."""
    policy = cluster.kubectl("get", "networkpolicy", f"{RING}-nodes", "-n", ns, "-o", "json").stdout
    assert json.loads(policy)["metadata"]["ownerReferences"][0]["kind"] == "Ring"
    ip = node_ips(cluster, ns)[0]
    check_isolated(cluster, ns, {"cql": f"{ip}:9042", "internode": f"{ip}:7000", "management-api": f"{ip}:8080",
                                 "metrics": f"{ip}:9000"},
                   insiders={"ringfeed": ({"app.kubernetes.io/managed-by": "ringfeed-operator"}, ("cql",))})


def test_a_cache_tier_on_the_ring_reads_over_tls(cluster: Cluster, ns: str, ring: dict):
    """The Ring's Dataset gets a cache tier: its master and workers reach the ring over TLS (the Ring's CA mounted,
    its Service name checked) and the part shows on the node byte-identical with the ring; then it is removed. The
    namespace is opted in first, as a cluster admin would (the tier's FUSE Pods are privileged): the Ring's nodes
    started under the restricted level."""
    cluster.kubectl("label", "namespace", ns, "--overwrite", "ringfeed.io/cache-tier=allowed",
                    "pod-security.kubernetes.io/enforce=privileged")
    cluster.kubectl("patch", "datasets", DATASET, "-n", ns, "--type=merge",
                    "--patch", json.dumps({"spec": {"cache": {"alluxio": {"memory": "128Mi"}}}}))

    def cache_ready():
        dataset = get(cluster, ns, "datasets", DATASET)
        return dataset if condition(dataset, "CacheReady").get("status") == "True" else None
    cluster.wait(f"the cache tier of {DATASET}", cache_ready, timeout_s=420)
    # The train part: the first test deleted a sample of val.
    mount = Path(CACHE_HOST_DIR) / ns / DATASET / "mnt" / SPLIT / "train"
    superuser, _ = addresses(cluster, ns)
    with Store(superuser) as store:
        expected = {}
        for raw in load_split(store, CATALOG, SPLIT).uuids("train"):
            record = store.sample(CATALOG, uuid.UUID(bytes=raw.tobytes()))
            expected[f"{('normal', 'tumor')[record.label]}/{record.uuid}.jpg"] = hashlib.sha256(
                record.data).hexdigest()
    found = {str(path.relative_to(mount)): hashlib.sha256(path.read_bytes()).hexdigest()
             for path in sorted(mount.rglob("*")) if path.is_file()}
    assert found == expected
    pods = cluster.core.list_namespaced_pod(ns, label_selector=f"ringfeed.io/dataset={DATASET}").items
    master = next(p for p in pods if p.metadata.labels["app.kubernetes.io/component"] == "cache-master")
    env = {e.name: e.value for e in master.spec.containers[0].env}
    assert env["RINGFEED_TLS_SERVER_NAME"] == f"{RING}-{RING}-service"
    cluster.kubectl("patch", "datasets", DATASET, "-n", ns, "--type=json",
                    "--patch", '[{"op": "remove", "path": "/spec/cache"}]')
    cluster.wait("the cache tier to go", lambda: not cluster.core.list_namespaced_pod(
        ns, label_selector=f"ringfeed.io/dataset={DATASET},app.kubernetes.io/component in "
                           "(cache-master,cache-worker,cache-fuse)").items, timeout_s=180)


@pytest.mark.skipif(not BENCH_OUT, reason="a benchmark: make bench-ring-scale")
def test_bench_ring_scale(cluster: Cluster, ns: str, ring: dict):
    """Samples/s of an unthrottled loader steady, during a scale-up by one node, steady at the larger size, during
    the scale-down back and after it, with the times of each step; benchmarks/bench_ring_scale.py makes the report,
    the plot and the BAR lines."""
    _, reader = addresses(cluster, ns)
    with Store(reader) as store:
        train = [u.tobytes() for u in load_split(store, CATALOG, SPLIT).uuids("train")]
    loaded = Reader(reader, train, pause_s=0.0)
    marks = []
    loaded.start()
    try:
        cluster.wait("a first epoch", lambda: loaded.epochs >= 1, timeout_s=60)
        marks.append(("warm", time.time() + BENCH_WARM_UP_S))
        time.sleep(BENCH_WARM_UP_S + BENCH_STEADY_S)
        for nodes in (BENCH_RF + 1, BENCH_RF):
            marks.append((f"scale to {nodes}", time.time()))
            scale(cluster, ns, nodes)
            wait_settled(cluster, ns, nodes)
            marks.append((f"settled at {nodes}", time.time()))
            time.sleep(BENCH_STEADY_S)
    finally:
        loaded.stop()
    Path(BENCH_OUT).parent.mkdir(parents=True, exist_ok=True)
    Path(BENCH_OUT).write_text(json.dumps({"timeline": loaded.timeline, "marks": marks, "failures": loaded.failures,
                                           "epochs": loaded.epochs, "samples": loaded.samples,
                                           "replication_factor": BENCH_RF}))
