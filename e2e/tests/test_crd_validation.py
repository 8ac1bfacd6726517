"""Ringfeed's Kubernetes API (crds/) as the real apiserver enforces it.

The samples in crds/samples are accepted and defaulted; bad objects, each a one-rule mutation of a sample, are
rejected with the message a user would read; Split parameters and a Dataset's schema are immutable; printer
columns, the `ringfeed` category, short names and `kubectl explain` work.

The module applies the three CRDs itself and deletes them at the end: the Helm chart, tested later in the same
session, installs them again and must own them. CRDs that a Helm release already owns are left in place.
"""

from __future__ import annotations

import copy
import json
import uuid
from functools import partial

import pytest
import yaml
from kubernetes import client

from kubecluster import REPO, Cluster

CRDS = REPO / "crds"
CRD_FILES = [CRDS / f"ringfeed.io_{plural}.yaml" for plural in ("datasets", "splits", "trainingjobs", "rings")]
GROUP, VERSION = "ringfeed.io", "v1alpha1"
PLURALS = {"Dataset": "datasets", "Split": "splits", "TrainingJob": "trainingjobs", "Ring": "rings"}
DELETE = object()  # a mutation that removes the field


def above(path: str) -> str:
    """The rejection of a request above its limit, as the resources' CEL rule words it."""
    return f'{path}: Invalid value: "object": a request of cpu, memory or ephemeral-storage may not exceed its limit'


def sample(kind: str) -> dict:
    return yaml.safe_load((CRDS / "samples" / f"{kind.lower()}.yaml").read_text())


def mutated(kind: str, changes: dict[str, object]) -> dict:
    """A deep copy of the sample of `kind` with `changes` applied: {"spec.schema.metadata.0.name": "label", ...};
    numeric path segments index lists, DELETE removes a field."""
    body = copy.deepcopy(sample(kind))
    for path, value in changes.items():
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = body
        for key in parents:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[last] = copy.deepcopy(value)
    return body


class Api:
    """Create, read and patch Ringfeed objects in the real apiserver."""

    def __init__(self, cluster: Cluster):
        self.custom = client.CustomObjectsApi(cluster.api)

    def create(self, namespace: str, body: dict, dry_run: bool = False, strict: bool = False) -> dict:
        """strict: refuse unknown fields as `kubectl apply` does (--validate=strict), instead of dropping them."""
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[body["kind"]], body,
                                                           dry_run="All" if dry_run else None,
                                                           field_validation="Strict" if strict else None)

    def get(self, namespace: str, kind: str, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name)

    def patch(self, namespace: str, kind: str, name: str, patch: dict) -> dict:
        """A JSON merge patch of the object."""
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURALS[kind], name, patch)

    def patch_status(self, namespace: str, kind: str, name: str, status: dict) -> dict:
        return self.custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURALS[kind], name,
                                                                 {"status": status})


def rejection(call) -> tuple[str, list[dict]]:
    """Run `call`, which must be refused as invalid (422); return the apiserver's message and its causes."""
    with pytest.raises(client.ApiException) as caught:
        call()
    assert caught.value.status == 422, caught.value.body
    body = json.loads(caught.value.body)
    causes = [c for c in body.get("details", {}).get("causes", [])
              if "some validation rules were not checked" not in c.get("message", "")]   # a note, not a cause
    return body["message"], causes


def condition(type_: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "observedGeneration": 1,
            "lastTransitionTime": "2026-11-21T10:00:00Z"}


@pytest.fixture(scope="module")
def crds(cluster: Cluster) -> Api:
    names = [yaml.safe_load(path.read_text())["metadata"]["name"] for path in CRD_FILES]
    extensions = client.ApiextensionsV1Api(cluster.api)

    def listed() -> dict[str, client.V1CustomResourceDefinition]:
        return {crd.metadata.name: crd for crd in extensions.list_custom_resource_definition().items}

    # A CRD still being deleted (by an earlier test's teardown) refuses new objects: let it go first.
    cluster.wait("terminating Ringfeed CRDs to be gone", lambda: not any(
        crd.metadata.deletion_timestamp for name, crd in listed().items() if name in names), timeout_s=120)
    existing = listed()
    helm_owned = {name for name in names if name in existing
                  and "meta.helm.sh/release-name" in (existing[name].metadata.annotations or {})}
    files = [arg for path in CRD_FILES for arg in ("-f", str(path))]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *files)
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", *(f"crd/{n}" for n in names))
    yield Api(cluster)
    ours = [name for name in names if name not in helm_owned]
    if ours:
        cluster.kubectl("delete", "crd", "--wait=true", "--timeout=120s", *ours)
        cluster.wait("Ringfeed CRDs to be gone", lambda: not set(listed()) & set(ours))


@pytest.fixture(scope="module")
def scratch(cluster: Cluster, crds: Api) -> str:
    """One namespace for the dry-run rejections of the table (nothing is stored in it)."""
    name = f"crd-validation-{uuid.uuid4().hex[:6]}"
    cluster.core.create_namespace(client.V1Namespace(
        metadata=client.V1ObjectMeta(name=name, labels={"ringfeed.io/test": "true"})))
    yield name
    cluster.core.delete_namespace(name, grace_period_seconds=1)


# -- accepted, with defaults ------------------------------------------------------------------------------------


def test_samples_are_accepted_and_defaulted(crds: Api, namespace: str):
    dataset = crds.create(namespace, sample("Dataset"))
    spec = dataset["spec"]
    assert spec["storage"]["external"]["contactPoints"] == ["cassandra-0.cassandra", "cassandra-1.cassandra"]
    assert spec["storage"]["external"]["credentialsSecret"] == {
        "name": "cassandra-credentials", "usernameKey": "username", "passwordKey": "password"}
    assert spec["schema"]["metadataByUuid"] is True
    assert spec["ingest"]["pathColumn"] == "path" and spec["ingest"]["labelColumn"] == "label"
    assert spec["ingest"]["maxSampleMB"] == 64 and spec["ingest"]["fullDecode"] is False
    assert spec["ingest"]["consistency"] == "ONE"
    assert "keyspace" not in spec   # the operator derives it from the name

    split = crds.create(namespace, sample("Split"))
    assert split["spec"]["maxSamples"] == 0 and split["spec"]["seed"] == 42
    assert split["spec"]["balance"] == {"mode": "natural"}

    job = crds.create(namespace, sample("TrainingJob"))
    loader = job["spec"]["loader"]
    assert loader["batchSize"] == 64 and loader["prefetch"] == 2 and loader["concurrency"] == 128
    assert loader["decodeThreads"] == 0 and loader["missing"] == "raise" and loader["consistency"] == "ONE"
    assert loader["decode"] == {"mode": "image", "width": 224, "height": 224, "channels": 3, "resize": "crop",
                                 "device": "cpu"}
    assert job["spec"]["suspend"] is False
    # The Pod template is kept whole, unknown fields included.
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}

    ring = crds.create(namespace, sample("Ring"))["spec"]
    assert ring["serverVersion"] == "5.0.9" and ring["allowMultipleNodesPerWorker"] is False
    assert ring["autoscaling"]["metric"] == "ReadsPerSecondPerNode" and ring["autoscaling"]["windowSeconds"] == 120

    stored = crds.get(namespace, "Dataset", "slides")
    assert stored["spec"] == spec and stored["metadata"]["generation"] == 1


def test_minimal_objects_get_every_default(crds: Api, namespace: str):
    dataset = crds.create(namespace, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Dataset", "metadata": {"name": "minimal"},
        "spec": {"storage": {"external": {"contactPoints": ["127.0.0.1"], "tls": {}}},
                 "schema": {"naturalKeys": [{"name": "path", "type": "text"}], "encoding": {"kind": "png"}}}})
    spec = dataset["spec"]
    assert spec["storage"]["external"]["port"] == 9042
    assert spec["storage"]["external"]["tls"] == {"enabled": False}
    assert spec["replication"] == {"replicationFactor": 1}
    assert spec["refreshInterval"] == "60s"
    assert spec["deletionPolicy"] == "Retain"
    assert spec["schema"]["metadataByUuid"] is True
    assert "ingest" not in spec

    split = crds.create(namespace, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split",
                                    "metadata": {"name": "cv5"}, "spec": {"dataset": "minimal", "folds": 5}})
    assert split["spec"] == {"dataset": "minimal", "folds": 5, "balance": {"mode": "natural"}, "maxSamples": 0,
                             "seed": 0}

    ring = crds.create(namespace, {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Ring", "metadata": {"name": "minimal"},
                                   "spec": {}})
    assert ring["spec"] == {"nodes": 1, "minNodes": 1, "maxNodes": 3, "serverVersion": "5.0.9",
                            "allowMultipleNodesPerWorker": False, "heapSize": "1Gi", "storage": {"size": "10Gi"},
                            "cooldownSeconds": 60, "deletionPolicy": "Retain"}

    job = crds.create(namespace, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": "minimal"},
        "spec": {"split": {"name": "cv5"}, "template": {"spec": {"containers": [{"name": "t", "image": "t"}]}}}})
    spec = job["spec"]
    assert spec["split"] == {"name": "cv5", "part": "train"}
    assert spec["replicas"] == 1 and spec["epochs"] == 1 and spec["suspend"] is False
    assert spec["loader"] == {
        "batchSize": 64, "shuffle": True, "seed": 0, "remainder": "pad", "prefetch": 2, "concurrency": 128,
        "decodeThreads": 0, "missing": "raise", "consistency": "ONE",
        "decode": {"mode": "none", "channels": 3, "resize": "crop", "device": "cpu"}}


@pytest.mark.parametrize("spec", [
    {"ratios": [8, 1, 1], "maxPerPart": {"val": 10, "test": 10}},
    {"ratios": [9, 1], "maxPerPart": {"train": 10, "val": 10}},
    {"ratios": [1], "maxPerPart": {"all": 10}},
    {"ratios": [1, 1, 1, 1], "maxPerPart": {"part0": 1, "part3": 1}},
    {"folds": 10, "maxPerPart": {"fold0": 1, "fold9": 1}},
    {"folds": 3, "names": ["a", "b", "c"], "maxPerPart": {"c": 1}},
    {"ratios": [1, 1], "balance": {"mode": "weights", "weights": {"0": 1, "tumor": 0}}},
    {"ratios": [1, 1], "filters": [{"column": "label", "operator": "not in", "values": ["0", "2"]}]},
], ids=["default-names-3", "default-names-2", "default-name-all", "default-names-part", "default-names-fold",
        "folds-with-names", "weights", "not-in-list"])
def test_valid_split_variants_are_accepted(crds: Api, scratch: str, spec: dict):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Split", "metadata": {"name": "variant"},
            "spec": {"dataset": "slides", **spec}}
    assert crds.create(scratch, body, dry_run=True)["spec"]["dataset"] == "slides"


def test_docs_show_the_samples_as_they_are(crds: Api):
    for kind in PLURALS:
        page = (REPO / "docs" / "api" / f"{kind.lower()}.md").read_text()
        shown = page.split("## Sample", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
        assert shown == (CRDS / "samples" / f"{kind.lower()}.yaml").read_text(), f"docs/api/{kind.lower()}.md"


# -- rejected: one rule per case ----------------------------------------------------------------------------------

BAD = [
    # Dataset: storage
    ("Dataset", "storage-both-kinds", {"spec.storage.k8ssandra": {"clusterName": "demo"}},
     "spec.storage: set exactly one of ring, external or k8ssandra"),
    ("Dataset", "storage-no-kind", {"spec.storage.external": DELETE},
     "spec.storage: set exactly one of ring, external or k8ssandra"),
    ("Dataset", "storage-ring-and-external", {"spec.storage.ring": {"name": "images"}},
     "spec.storage: set exactly one of ring, external or k8ssandra"),
    ("Dataset", "storage-ring-name-too-long",
     {"spec.storage.external": DELETE, "spec.storage.ring": {"name": "r" * 19}}, "spec.storage.ring.name: Too long"),
    ("Dataset", "contact-points-empty", {"spec.storage.external.contactPoints": []},
     "contactPoints in body should have at least 1 items"),
    ("Dataset", "contact-point-with-comma", {"spec.storage.external.contactPoints": ["a,b"]},
     "spec.storage.external.contactPoints: each is a host name or an IP address, without a port"),
    ("Dataset", "contact-point-with-port", {"spec.storage.external.contactPoints": ["cassandra-0.cassandra:9042"]},
     "spec.storage.external.contactPoints: each is a host name or an IP address, without a port"),
    ("Dataset", "contact-point-url", {"spec.storage.external.contactPoints": ["tcp://cassandra-0"]},
     "spec.storage.external.contactPoints: each is a host name or an IP address, without a port"),
    ("Dataset", "contact-point-bad-ipv6", {"spec.storage.external.contactPoints": ["fe80::1::2"]},
     "spec.storage.external.contactPoints: each is a host name or an IP address, without a port"),
    ("Dataset", "contact-point-label-over-63", {"spec.storage.external.contactPoints": ["c" * 64 + ".db"]},
     "spec.storage.external.contactPoints: each is a host name or an IP address, without a port"),
    ("Dataset", "port-70000", {"spec.storage.external.port": 70000},
     "port in body should be less than or equal to 65535"),
    ("Dataset", "credentials-without-name", {"spec.storage.external.credentialsSecret": {"usernameKey": "user"}},
     "spec.storage.external.credentialsSecret.name: Required value"),
    ("Dataset", "credentials-name-not-dns", {"spec.storage.external.credentialsSecret.name": "Cassandra_Credentials"},
     "spec.storage.external.credentialsSecret.name is not a Secret name"),
    ("Dataset", "ca-secret-name-not-dns",
     {"spec.storage.external.tls": {"enabled": True, "caSecret": {"name": "ring-ca/tls"}}},
     "spec.storage.external.tls.caSecret.name is not a Secret name"),
    ("Dataset", "tls-without-ca", {"spec.storage.external.tls": {"enabled": True}},
     "spec.storage.external.tls.caSecret is required when tls.enabled is true"),
    # Dataset: cache tier
    ("Dataset", "cache-memory-not-a-size", {"spec.cache": {"alluxio": {"memory": "1.5Gi"}}},
     "spec.cache.alluxio.memory in body should match"),
    ("Dataset", "ingest-request-above-limit",
     {"spec.ingest.resources": {"requests": {"memory": "1025Mi"}, "limits": {"memory": "1Gi"}}},
     above("spec.ingest.resources")),
    ("Dataset", "ingest-request-negative", {"spec.ingest.resources": {"requests": {"cpu": "-1"}}},
     "spec.ingest.resources.requests.cpu in body should match"),
    ("Dataset", "cache-worker-request-above-limit", {"spec.cache": {"alluxio": {"resources": {"worker": {
        "requests": {"cpu": "1", "memory": "3Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}}}}}},
     above("spec.cache.alluxio.resources.worker")),
    ("Dataset", "cache-memory-too-small", {"spec.cache": {"alluxio": {"memory": "16Mi"}}},
     "spec.cache.alluxio.memory must be at least 64Mi"),
    # Dataset: keyspace and replication
    ("Dataset", "keyspace-upper-case", {"spec.keyspace": "Slides"}, "keyspace in body should match"),
    ("Dataset", "keyspace-reserved", {"spec.keyspace": "system_auth"}, "spec.keyspace is reserved"),
    ("Dataset", "name-not-a-keyspace", {"metadata.name": "2024-slides"},
     "metadata.name does not make a valid keyspace name"),
    ("Dataset", "name-is-cql-keyword", {"metadata.name": "table"}, "metadata.name is a reserved keyspace name"),
    ("Dataset", "replication-factor-0", {"spec.replication.replicationFactor": 0},
     "replicationFactor in body should be greater than or equal to 1"),
    # Dataset: schema
    ("Dataset", "key-type-double", {"spec.schema.naturalKeys.1.type": "double"}, 'Unsupported value: "double"'),
    ("Dataset", "key-name-upper-case", {"spec.schema.naturalKeys.0.name": "PatientId"},
     "naturalKeys[0].name in body should match"),
    ("Dataset", "no-natural-keys", {"spec.schema.naturalKeys": []},
     "naturalKeys in body should have at least 1 items"),
    ("Dataset", "reserved-column-name", {"spec.schema.metadata.0.name": "label"}, "column name is reserved"),
    ("Dataset", "reserved-key-name", {"spec.schema.naturalKeys.3.name": "uuid"}, "column name is reserved"),
    ("Dataset", "column-name-cql-keyword", {"spec.schema.metadata.0.name": "order"},
     "column name is a reserved CQL keyword"),
    ("Dataset", "key-name-cql-keyword", {"spec.schema.naturalKeys.3.name": "token"},
     "column name is a reserved CQL keyword"),
    ("Dataset", "duplicate-column-name", {"spec.schema.metadata.0.name": "patient_id"},
     "column names must be unique across naturalKeys and metadata"),
    ("Dataset", "duplicate-key-name", {"spec.schema.naturalKeys.3.name": "x"},
     "column names must be unique across naturalKeys and metadata"),
    ("Dataset", "raw-without-dtype", {"spec.schema.encoding": {"kind": "raw", "shape": [3, 64, 64]}},
     "spec.schema.encoding: kind raw needs dtype and shape"),
    ("Dataset", "jpeg-with-shape", {"spec.schema.encoding.shape": [224, 224, 3]},
     "spec.schema.encoding: dtype and shape apply only to kind raw"),
    ("Dataset", "raw-zero-dimension", {"spec.schema.encoding": {"kind": "raw", "dtype": "uint8", "shape": [0]}},
     "shape[0] in body should be greater than or equal to 1"),
    ("Dataset", "duplicate-label-name", {"spec.schema.labelNames": ["normal", "normal"]},
     "labelNames[1]: Duplicate value"),
    # Dataset: ingest and the rest
    ("Dataset", "ingest-path-absolute", {"spec.ingest.source.path": "/data/manifest.csv"},
     "spec.ingest.source.path must be relative to the volume's root"),
    ("Dataset", "ingest-path-dot-dot", {"spec.ingest.source.path": "patches/../../etc/manifest.csv"},
     "spec.ingest.source.path must stay inside the volume"),
    ("Dataset", "ingest-without-volume", {"spec.ingest.source.volume": DELETE},
     "spec.ingest.source.volume: Required value"),
    ("Dataset", "ingest-two-volumes", {"spec.ingest.source.volume.hostPath": {"path": "/data"}},
     "spec.ingest.source.volume must be exactly one of persistentVolumeClaim, nfs, configMap, csi, ephemeral or "
     "hostPath"),
    ("Dataset", "ingest-secret-volume", {"spec.ingest.source.volume": {"secret": {"secretName": "ring"}}},
     "spec.ingest.source.volume must be exactly one of persistentVolumeClaim, nfs, configMap, csi, ephemeral or "
     "hostPath"),
    ("Dataset", "ingest-claim-name-misspelt", {"spec.ingest.source.volume.persistentVolumeClaim": {
        "claimNam": "slides-raw"}}, "spec.ingest.source.volume.persistentVolumeClaim.claimName: Required value"),
    ("Dataset", "ingest-claim-name-not-dns", {"spec.ingest.source.volume.persistentVolumeClaim.claimName": "Raw"},
     "spec.ingest.source.volume.persistentVolumeClaim.claimName in body should match"),
    ("Dataset", "ingest-nfs-without-server", {"spec.ingest.source.volume": {"nfs": {"path": "/exports/slides"}}},
     "spec.ingest.source.volume.nfs.server: Required value"),
    ("Dataset", "ingest-host-path-type-unknown",
     {"spec.ingest.source.volume": {"hostPath": {"path": "/data", "type": "Folder"}}}, 'Unsupported value: "Folder"'),
    ("Dataset", "ingest-ephemeral-size-not-a-quantity", {"spec.ingest.source.volume": {"ephemeral": {
        "volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"],
                                         "resources": {"requests": {"storage": "100 GB"}}}}}}},
     "spec.ingest.source.volume.ephemeral.volumeClaimTemplate.spec.resources.requests.storage in body should match"),
    ("Dataset", "ingest-resources-not-a-quantity", {"spec.ingest.resources": {"limits": {"memory": "4 GB"}}},
     "spec.ingest.resources.limits.memory in body should match"),
    ("Dataset", "ingest-resources-two-decimal-points", {"spec.ingest.resources": {"requests": {"cpu": "1.5.0"}}},
     "spec.ingest.resources.requests.cpu in body should match"),
    ("Dataset", "name-over-63", {"metadata.name": "d" * 64, "spec.keyspace": "long_name"},
     "metadata.name must have at most 63 characters"),
    ("Dataset", "ingest-workers-0", {"spec.ingest.workers": 0},
     "workers in body should be greater than or equal to 1"),
    ("Dataset", "ingest-format-unknown", {"spec.ingest.format": "tfrecord"}, 'Unsupported value: "tfrecord"'),
    ("Dataset", "ingest-consistency-unknown", {"spec.ingest.consistency": "TWO"}, 'Unsupported value: "TWO"'),
    ("Dataset", "refresh-interval-days", {"spec.refreshInterval": "1d"}, "refreshInterval in body should match"),
    ("Dataset", "refresh-interval-fraction", {"spec.refreshInterval": "1.5m"},
     "refreshInterval in body should match"),
    ("Dataset", "refresh-interval-zero", {"spec.refreshInterval": "0s"}, "spec.refreshInterval must be at least 1s"),
    ("Dataset", "deletion-policy-unknown", {"spec.deletionPolicy": "Destroy"}, 'Unsupported value: "Destroy"'),
    # Split
    ("Split", "split-name-too-long", {"metadata.name": "s" * 64}, "at most 63 characters"),
    ("Split", "dataset-missing", {"spec.dataset": DELETE}, "spec.dataset: Required value"),
    ("Split", "dataset-not-a-name", {"spec.dataset": "Slides"}, "spec.dataset in body should match"),
    ("Split", "ratio-zero", {"spec.ratios": [7, 0, 1]}, "spec.ratios are positive integers"),
    ("Split", "ratios-and-folds", {"spec.folds": 3}, "set exactly one of spec.ratios or spec.folds"),
    ("Split", "neither-ratios-nor-folds", {"spec.ratios": DELETE}, "set exactly one of spec.ratios or spec.folds"),
    ("Split", "folds-1", {"spec.ratios": DELETE, "spec.names": DELETE, "spec.maxPerPart": DELETE, "spec.folds": 1},
     "folds in body should be greater than or equal to 2"),
    ("Split", "names-count-mismatch", {"spec.names": ["train", "val"]}, "spec.names needs one name per part"),
    ("Split", "names-count-mismatch-folds",
     {"spec.ratios": DELETE, "spec.folds": 5, "spec.names": ["train", "val", "test"], "spec.maxPerPart": DELETE},
     "spec.names needs one name per part"),
    ("Split", "part-name-upper-case", {"spec.names": ["Train", "val", "test"]}, "names[0] in body should match"),
    ("Split", "part-name-repeated", {"spec.names": ["train", "val", "val"]}, "names[2]: Duplicate value"),
    ("Split", "group-by-repeated", {"spec.groupBy": ["patient_id", "patient_id"]}, "groupBy[1]: Duplicate value"),
    ("Split", "weights-without-mode-weights", {"spec.balance.weights": {"tumor": 2}},
     "spec.balance.weights is required when spec.balance.mode is weights, and allowed only then"),
    ("Split", "mode-weights-without-weights", {"spec.balance.mode": "weights"},
     "spec.balance.weights is required when spec.balance.mode is weights, and allowed only then"),
    ("Split", "weights-all-zero", {"spec.balance": {"mode": "weights", "weights": {"normal": 0, "tumor": 0}}},
     "spec.balance.weights: at least one weight must be positive"),
    ("Split", "weight-negative", {"spec.balance": {"mode": "weights", "weights": {"normal": 1, "tumor": -1}}},
     "spec.balance.weights.tumor in body should be greater than or equal to 0"),
    ("Split", "balance-mode-unknown", {"spec.balance.mode": "normal"}, 'Unsupported value: "normal"'),
    ("Split", "max-samples-negative", {"spec.maxSamples": -1},
     "maxSamples in body should be greater than or equal to 0"),
    ("Split", "max-per-part-not-a-part", {"spec.maxPerPart": {"validation": 500}},
     "spec.maxPerPart: every key must name a part"),
    ("Split", "max-per-part-not-a-default-part", {"spec.names": DELETE, "spec.maxPerPart": {"valid": 500}},
     "spec.maxPerPart: every key must name a part"),
    ("Split", "max-per-part-fold-out-of-range",
     {"spec.ratios": DELETE, "spec.names": DELETE, "spec.folds": 5, "spec.maxPerPart": {"fold5": 10}},
     "spec.maxPerPart: every key must name a part"),
    ("Split", "max-per-part-zero", {"spec.maxPerPart": {"val": 0}},
     "maxPerPart.val in body should be greater than or equal to 1"),
    ("Split", "filter-less-than-two-values", {"spec.filters.0": {"column": "slide_num", "operator": "<",
                                                                  "values": ["2", "3"]}},
     "spec.filters: operators other than in and not in take exactly one value"),
    ("Split", "filter-operator-unknown", {"spec.filters.0.operator": "=~"}, 'Unsupported value: "=~"'),
    ("Split", "filter-without-values", {"spec.filters.0.values": []},
     "values in body should have at least 1 items"),
    ("Split", "seed-negative", {"spec.seed": -1}, "seed in body should be greater than or equal to 0"),
    # TrainingJob
    ("TrainingJob", "no-template", {"spec.template": DELETE}, "spec.template: Required value"),
    ("TrainingJob", "access-unknown", {"spec.access": "nfs"}, "spec.access: Unsupported value"),
    ("TrainingJob", "posix-with-a-sidecar", {"spec.access": "posix", "spec.sidecar": {"resources": {"limits": {
        "cpu": "1"}}}}, "spec.sidecar applies only with access sidecar"),
    ("TrainingJob", "ranks-per-pod-without-command",
     {"spec.ranksPerPod": 4, "spec.template.spec.containers.0.command": DELETE},
     "with ranksPerPod above 1 the trainer's command runs once per local rank"),
    ("TrainingJob", "ranks-per-pod-65", {"spec.ranksPerPod": 65},
     "ranksPerPod in body should be less than or equal to 64"),
    ("TrainingJob", "template-without-containers", {"spec.template.spec.containers": DELETE},
     "spec.template.spec.containers: Required value"),
    ("TrainingJob", "no-split", {"spec.split": DELETE}, "spec.split: Required value"),
    ("TrainingJob", "part-name-upper-case", {"spec.split.part": "Train"}, "spec.split.part in body should match"),
    ("TrainingJob", "decode-image-without-width", {"spec.loader.decode.width": DELETE},
     "spec.loader.decode: width and height are required when mode is image"),
    ("TrainingJob", "decode-mode-unknown", {"spec.loader.decode.mode": "video"}, 'Unsupported value: "video"'),
    ("TrainingJob", "decode-channels-4", {"spec.loader.decode.channels": 4}, "Unsupported value: 4"),
    ("TrainingJob", "random-crop-scale-min-above-max",
     {"spec.loader.decode.resize": "random", "spec.loader.decode.randomCrop": {"scaleMinPercent": 90,
                                                                               "scaleMaxPercent": 50}},
     "spec.loader.decode.randomCrop: scaleMinPercent must not exceed scaleMaxPercent"),
    ("TrainingJob", "random-crop-ratio-min-above-max",
     {"spec.loader.decode.resize": "random", "spec.loader.decode.randomCrop": {"ratioMinPermille": 2000}},
     "spec.loader.decode.randomCrop: ratioMinPermille must not exceed ratioMaxPermille"),
    ("TrainingJob", "random-crop-flip-above-100",
     {"spec.loader.decode.resize": "random", "spec.loader.decode.randomCrop": {"flipPercent": 101}},
     "flipPercent in body should be less than or equal to 100"),
    ("TrainingJob", "random-crop-without-resize-random", {"spec.loader.decode.randomCrop": {}},
     "spec.loader.decode.randomCrop applies only with mode image and resize random"),
    ("TrainingJob", "decode-device-unknown", {"spec.loader.decode.device": "tpu"}, 'Unsupported value: "tpu"'),
    ("TrainingJob", "decode-device-without-images", {"spec.loader.decode": {"mode": "none", "device": "gpu"}},
     "spec.loader.decode.device applies only with mode image"),
    ("TrainingJob", "replicas-0", {"spec.replicas": 0}, "replicas in body should be greater than or equal to 1"),
    ("TrainingJob", "replicas-2000", {"spec.replicas": 2000},
     "replicas in body should be less than or equal to 1024"),
    ("TrainingJob", "epochs-0", {"spec.epochs": 0}, "epochs in body should be greater than or equal to 1"),
    ("TrainingJob", "batch-size-0", {"spec.loader.batchSize": 0},
     "batchSize in body should be greater than or equal to 1"),
    ("TrainingJob", "remainder-unknown", {"spec.loader.remainder": "wrap"}, 'Unsupported value: "wrap"'),
    ("TrainingJob", "missing-unknown", {"spec.loader.missing": "ignore"}, 'Unsupported value: "ignore"'),
    ("TrainingJob", "sidecar-request-above-limit",
     {"spec.sidecar": {"resources": {"requests": {"cpu": "1500m"}, "limits": {"cpu": 1}}}},
     above("spec.sidecar.resources")),
    ("TrainingJob", "sidecar-resources-not-a-quantity", {"spec.sidecar": {"resources": {"requests": {"cpu": "two"}}}},
     "spec.sidecar.resources.requests.cpu in body should match"),
    ("TrainingJob", "trainer-resources-not-a-quantity",
     {"spec.template.spec.containers.0.resources": {"limits": {"memory": "lots"}}},
     "spec.template.spec.containers[0].resources.limits.memory in body should match"),
    ("TrainingJob", "trainer-claim-without-name",
     {"spec.template.spec.containers.0.resources": {"claims": [{"request": "gpu"}]}},
     "spec.template.spec.containers[0].resources.claims[0].name: Required value"),
    ("TrainingJob", "queue-name-not-a-label-value", {"spec.queueName": "GPU queue"}, "spec.queueName in body should "
     "match"),
    # Ring
    ("Ring", "name-too-long", {"metadata.name": "r" * 19}, "metadata.name: a Ring's name is its Cassandra cluster's"),
    ("Ring", "name-starts-with-digit", {"metadata.name": "1images"},
     "metadata.name: a Ring's name is its Cassandra cluster's"),
    ("Ring", "min-above-max", {"spec.minNodes": 5}, "spec.minNodes must not exceed spec.maxNodes"),
    ("Ring", "nodes-above-max", {"spec.nodes": 5}, "spec.nodes must lie within spec.minNodes and spec.maxNodes"),
    ("Ring", "min-nodes-0", {"spec.minNodes": 0}, "spec.minNodes in body should be greater than or equal to 1"),
    ("Ring", "certificates-valid-a-minute", {"spec.tls": {"certificateValiditySeconds": 60}},
     "certificateValiditySeconds in body should be greater than or equal to 3600"),
    ("Ring", "server-version-4", {"spec.serverVersion": "4.1.5"}, 'Unsupported value: "4.1.5"'),
    ("Ring", "heap-not-a-quantity", {"spec.heapSize": "4 GB"}, "spec.heapSize in body should match"),
    ("Ring", "storage-size-not-a-quantity", {"spec.storage.size": "lots"}, "spec.storage.size in body should match"),
    ("Ring", "heap-too-small", {"spec.heapSize": "128Mi"}, "spec.heapSize must be at least 256Mi"),
    ("Ring", "heap-zero", {"spec.heapSize": "0"}, "spec.heapSize must be at least 256Mi"),
    ("Ring", "heap-as-large-as-the-memory-limit", {"spec.heapSize": "8Gi"},
     "spec.heapSize must be below spec.resources.limits.memory"),
    ("Ring", "storage-size-zero", {"spec.storage.size": "0"}, "spec.storage.size must be above 0"),
    ("Ring", "limit-negative", {"spec.resources.limits.ephemeral-storage": "-1Gi"},
     "spec.resources.limits.ephemeral-storage in body should match"),
    ("Ring", "request-negative", {"spec.resources.requests.cpu": "-2"},
     "spec.resources.requests.cpu in body should match"),
    ("Ring", "autoscaling-bounds-crossed", {"spec.autoscaling.scaleDownBelow": 50000},
     "spec.autoscaling.scaleDownBelow must be lower than scaleUpAbove"),
    ("Ring", "autoscaling-latency-without-bounds", {"spec.autoscaling.metric": "ReadLatencyP99Micros"},
     "ReadLatencyP99Micros has no default bounds: set scaleUpAbove and scaleDownBelow"),
    ("Ring", "autoscaling-bounds-crossed-by-default", {"spec.autoscaling.scaleDownBelow": 500},
     "spec.autoscaling.scaleDownBelow must be lower than scaleUpAbove"),
    ("Ring", "autoscaling-metric-unknown", {"spec.autoscaling.metric": "CpuPercent"},
     'Unsupported value: "CpuPercent"'),
    ("Ring", "autoscaling-window-5s", {"spec.autoscaling.windowSeconds": 5},
     "windowSeconds in body should be greater than or equal to 10"),
    ("Ring", "request-above-limit",
     {"spec.resources": {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"cpu": "3.5", "memory": "8Gi"}}},
     above("spec.resources")),
    ("Ring", "resources-not-a-quantity", {"spec.resources.requests.cpu": "two"},
     "spec.resources.requests.cpu in body should match"),
]


@pytest.mark.parametrize("kind,changes,expected", [case[:1] + case[2:] for case in BAD],
                         ids=[f"{case[0].lower()}-{case[1]}" for case in BAD])
def test_bad_object_is_rejected(crds: Api, scratch: str, kind: str, changes: dict, expected: str):
    message, causes = rejection(lambda: crds.create(scratch, mutated(kind, changes), dry_run=True))
    assert expected in message, message
    assert len(causes) == 1, f"expected exactly one broken rule, got: {message}"


# Misspelt fields, as `kubectl apply` sends them (strict field validation): refused, never silently dropped. Only
# the trainer Pod template keeps unknown fields (a PodSpec is checked when its Pods are made).
MISSPELT = [
    ("Dataset", "volume-field", {"spec.ingest.source.volume.persistentVolumeClaim.readonly": True},
     'unknown field "spec.ingest.source.volume.persistentVolumeClaim.readonly"'),
    ("Dataset", "csi-field", {"spec.ingest.source.volume": {"csi": {"driver": "files.csi.k8s.io",
                                                                    "volumeAttribute": {"share": "slides"}}}},
     'unknown field "spec.ingest.source.volume.csi.volumeAttribute"'),
    ("Dataset", "resources-section", {"spec.ingest.resources": {"request": {"cpu": "1"}}},
     'unknown field "spec.ingest.resources.request"'),
    ("Dataset", "resources-claims-in-a-job", {"spec.ingest.resources": {"claims": [{"name": "gpu"}]}},
     'unknown field "spec.ingest.resources.claims"'),
    ("Dataset", "secret-reference", {"spec.storage.external.credentialsSecret.userKey": "user"},
     'unknown field "spec.storage.external.credentialsSecret.userKey"'),
    ("TrainingJob", "sidecar-resources-section", {"spec.sidecar": {"resources": {"limit": {"cpu": "1"}}}},
     'unknown field "spec.sidecar.resources.limit"'),
    ("TrainingJob", "trainer-resources-section",
     {"spec.template.spec.containers.0.resources": {"limts": {"memory": "1Gi"}}},
     'unknown field "spec.template.spec.containers[0].resources.limts"'),
]


@pytest.mark.parametrize("kind,changes,expected", [case[:1] + case[2:] for case in MISSPELT],
                         ids=[f"{case[0].lower()}-{case[1]}" for case in MISSPELT])
def test_misspelt_field_is_refused(crds: Api, scratch: str, kind: str, changes: dict, expected: str):
    with pytest.raises(client.ApiException) as caught:
        crds.create(scratch, mutated(kind, changes), dry_run=True, strict=True)
    message = json.loads(caught.value.body)["message"]
    assert expected in message and message.count("unknown field") == 1, message


@pytest.mark.parametrize("changes", [
    {"spec.storage.external.contactPoints": ["10.0.0.7", "::1", "2001:db8::7", "Cassandra-0.DB.example.com", "db"]},
    {"spec.storage.external.tls": {"enabled": True, "caSecret": {"name": "ring.ca-2024"}}},
    {"spec.schema.metadata": [{"name": "orders", "type": "int"}, {"name": "token_count", "type": "bigint"}]},
    {"spec.ingest.source.volume": {"nfs": {"server": "nas.example.com", "path": "/exports/slides", "readOnly": True}}},
    {"spec.ingest.source.volume": {"configMap": {"name": "manifest", "items": [{"key": "m.csv", "path": "m.csv"}]}}},
    {"spec.ingest.source.volume": {"csi": {"driver": "files.csi.k8s.io", "volumeAttributes": {"share": "slides"},
                                           "nodePublishSecretRef": {"name": "share-key"}}}},
    {"spec.ingest.source.volume": {"ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"team": "ml"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "dataSource": {
            "apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "slides-2026"},
            "resources": {"requests": {"storage": "100Gi"}}}}}}},
    {"spec.ingest.source.volume": {"hostPath": {"path": "/data/slides", "type": "Directory"}}},
    {"spec.ingest.resources": {"requests": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": 1_000_000},
                               "limits": {"memory": "1.5Gi", "cpu": 2}}},
    # a request equal to its limit in other units, an integer against a string, a request without its limit
    {"spec.ingest.resources": {"requests": {"cpu": 2, "memory": "1024Mi", "ephemeral-storage": "1e9"},
                               "limits": {"cpu": "2000m", "memory": "1Gi"}}},
], ids=["contact-points-ip-and-names", "ca-secret-dotted", "columns-containing-keywords", "nfs", "config-map",
        "csi", "ephemeral", "host-path", "resources", "resources-request-at-limit"])
def test_valid_dataset_variants_are_accepted_whole(crds: Api, scratch: str, changes: dict):
    created = crds.create(scratch, mutated("Dataset", changes), dry_run=True, strict=True)
    for path, value in changes.items():   # nothing pruned: every field given is stored (defaults may be added)
        assert kept(value, at(created, path)), f"{path}: {at(created, path)}"


def at(body: dict, path: str) -> object:
    for key in path.split("."):
        body = body[int(key)] if key.isdigit() else body[key]
    return body


def kept(given: object, stored: object) -> bool:
    """Whether stored holds everything given (maps may have gained defaults)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and kept(v, stored[k]) for k, v in given.items())
    if isinstance(given, list):
        return isinstance(stored, list) and len(given) == len(stored) and all(map(kept, given, stored))
    return given == stored


def test_the_table_covers_every_kind_and_the_samples_are_valid(crds: Api, scratch: str):
    counts = {kind: sum(case[0] == kind for case in BAD) for kind in PLURALS}
    assert min(counts.values()) >= 8 and len({case[:2] for case in BAD}) == len(BAD), counts
    for kind in PLURALS:   # the cases above mutate these: unmutated, they pass
        assert crds.create(scratch, sample(kind), dry_run=True)["kind"] == kind


# -- updates ------------------------------------------------------------------------------------------------------


def test_split_parameters_are_immutable_but_its_metadata_is_not(crds: Api, namespace: str):
    crds.create(namespace, sample("Split"))
    for patch in ({"spec": {"seed": 7}}, {"spec": {"ratios": [8, 1, 1]}}, {"spec": {"filters": None}},
                  {"spec": {"balance": {"mode": "equal"}}}):
        message, _ = rejection(partial(crds.patch, namespace, "Split", "by-patient", patch))
        assert "Split parameters are immutable once created: create a new Split with another name" in message
    patched = crds.patch(namespace, "Split", "by-patient", {"metadata": {"labels": {"team": "pathology"}}})
    assert patched["metadata"]["labels"] == {"team": "pathology"}
    assert patched["spec"]["seed"] == 42 and patched["metadata"]["generation"] == 1


def test_dataset_schema_and_storage_layout_are_immutable_but_ingest_is_not(crds: Api, namespace: str):
    crds.create(namespace, sample("Dataset"))
    schema = sample("Dataset")["spec"]["schema"]
    for change in ({"metadata": schema["metadata"] + [{"name": "stain", "type": "text"}]},
                   {"labelNames": ["normal", "tumor", "other"]}, {"metadataByUuid": False}):
        message, _ = rejection(partial(crds.patch, namespace, "Dataset", "slides", {"spec": {"schema": change}}))
        assert "spec.schema is immutable: the tables exist; create a new Dataset" in message
    message, _ = rejection(lambda: crds.patch(namespace, "Dataset", "slides",
                                              {"spec": {"replication": {"replicationFactor": 3}}}))
    assert "spec.replication.replicationFactor is immutable" in message
    message, _ = rejection(lambda: crds.patch(namespace, "Dataset", "slides", {"spec": {"keyspace": "slides_v2"}}))
    assert "spec.keyspace is immutable" in message
    for storage in ({"external": None, "ring": {"name": "images"}}, {"external": None, "k8ssandra": {
            "clusterName": "demo"}}):
        message, _ = rejection(partial(crds.patch, namespace, "Dataset", "slides", {"spec": {"storage": storage}}))
        assert "spec.storage: which ring a Dataset is on is immutable" in message

    patched = crds.patch(namespace, "Dataset", "slides", {"spec": {"ingest": {"workers": 16}}})
    assert patched["spec"]["ingest"]["workers"] == 16 and patched["metadata"]["generation"] == 2
    patched = crds.patch(namespace, "Dataset", "slides", {"spec": {
        "storage": {"external": {"contactPoints": ["cassandra-2.cassandra"]}}, "refreshInterval": "5m"}})
    assert patched["spec"]["storage"]["external"]["contactPoints"] == ["cassandra-2.cassandra"]
    assert patched["metadata"]["generation"] == 3


def test_status_is_a_subresource_shaped_like_conditions(crds: Api, namespace: str):
    crds.create(namespace, sample("Dataset"))
    ignored = crds.patch(namespace, "Dataset", "slides", {"status": {"samples": 5}})
    assert ignored.get("status", {}).get("samples") != 5   # the main resource ignores status
    stored = crds.patch_status(namespace, "Dataset", "slides", {
        "observedGeneration": 1, "conditions": [condition("Ready", "True", "Counted", "1200 samples")],
        "keyspace": "slides", "samples": 1200, "bytes": 24_000_000, "labels": 2, "splits": 0,
        "labelCounts": [{"label": 0, "name": "normal", "samples": 1000}, {"label": 1, "name": "tumor",
                                                                         "samples": 200}],
        "ingest": {"jobName": "slides-ingest-1", "generation": 1, "startedAt": "2026-11-21T10:00:00Z",
                   "completedAt": "2026-11-21T10:01:00Z", "ingested": 1200, "skipped": 0, "rejected": 3,
                   "rowsPerSecond": 20.5},
        "lastRefreshTime": "2026-11-21T10:01:00Z"})
    assert stored["status"]["conditions"][0]["reason"] == "Counted" and stored["status"]["samples"] == 1200
    message, _ = rejection(lambda: crds.patch_status(namespace, "Dataset", "slides", {
        "conditions": [condition("Ready", "Yes", "Counted")]}))
    assert 'Unsupported value: "Yes"' in message
    bad = condition("Ready", "True", "Counted")
    del bad["reason"]
    message, _ = rejection(lambda: crds.patch_status(namespace, "Dataset", "slides", {"conditions": [bad]}))
    assert "reason: Required value" in message


# -- kubectl: printer columns, category, short names, explain ------------------------------------------------------


def server_table(cluster: Cluster, namespace: str, plural: str) -> dict:
    """The apiserver's Table of a list, as kubectl gets it, with each row's object read at the same time."""
    request = cluster.api.param_serialize(
        "GET", f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}",
        query_params=[("includeObject", "Object")], auth_settings=["BearerToken"],
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
    response = cluster.api.call_api(*request)
    response.read()
    assert response.status == 200, response.data
    return json.loads(response.data)


def ready(obj: dict) -> str | None:
    return condition_field(obj, "Ready", "status")


def condition_field(obj: dict, type_: str, field: str) -> str | None:
    return next((c[field] for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), None)


# Per kind: (column, priority, the cell expected for an object) in the order kubectl shows them; Age is a string.
COLUMNS = {
    "datasets": [("Name", 0, lambda o: o["metadata"]["name"]), ("Ready", 0, ready),
                 ("Samples", 0, lambda o: o.get("status", {}).get("samples")),
                 ("Labels", 0, lambda o: o.get("status", {}).get("labels")),
                 ("Splits", 0, lambda o: o.get("status", {}).get("splits")),
                 ("Keyspace", 1, lambda o: o.get("status", {}).get("keyspace")),
                 ("Cache", 1, lambda o: condition_field(o, "CacheReady", "status"))],
    "splits": [("Name", 0, lambda o: o["metadata"]["name"]), ("Ready", 0, ready),
               ("Dataset", 0, lambda o: o["spec"]["dataset"]),
               ("Samples", 0, lambda o: o.get("status", {}).get("samples")),
               ("Parts", 0, lambda o: o.get("status", {}).get("partNames")),
               ("Hash", 1, lambda o: o.get("status", {}).get("contentHash"))],
    "trainingjobs": [("Name", 0, lambda o: o["metadata"]["name"]),
                     ("Phase", 0, lambda o: o.get("status", {}).get("phase")), ("Ready", 0, ready),
                     ("Split", 0, lambda o: o["spec"]["split"]["name"]),
                     ("Part", 0, lambda o: o["spec"]["split"]["part"]),
                     ("Replicas", 0, lambda o: o["spec"]["replicas"]),
                     ("Epoch", 0, lambda o: o.get("status", {}).get("epoch")),
                     ("Samples", 0, lambda o: o.get("status", {}).get("samplesDelivered")),
                     ("Rate", 1, lambda o: o.get("status", {}).get("samplesPerSecond"))],
    "rings": [("Name", 0, lambda o: o["metadata"]["name"]), ("Ready", 0, ready),
              ("Nodes", 0, lambda o: o.get("status", {}).get("nodes")),
              ("Desired", 0, lambda o: o["spec"]["nodes"]),
              ("Scaling", 0, lambda o: condition_field(o, "Scaling", "status")),
              ("Held", 0, lambda o: condition_field(o, "ScalingHeld", "reason")),
              ("Min", 1, lambda o: o["spec"]["minNodes"]), ("Max", 1, lambda o: o["spec"]["maxNodes"]),
              ("Service", 1, lambda o: o.get("status", {}).get("service"))],
}


def test_printer_columns_category_and_short_names(cluster: Cluster, crds: Api, namespace: str):
    for kind in PLURALS:
        crds.create(namespace, sample(kind))
    # Status as the operator would write it. An operator running in the cluster may overwrite it at any moment,
    # so cells are compared with the object of the same read, not with these values.
    crds.patch_status(namespace, "Dataset", "slides", {
        "conditions": [condition("Ready", "True", "Counted"), condition("CacheReady", "False", "Starting")],
        "samples": 1200, "labels": 2, "splits": 1,
        "keyspace": "slides"})
    crds.patch_status(namespace, "Split", "by-patient", {
        "conditions": [condition("Ready", "True", "Computed")], "samples": 1100, "partNames": "train,val,test",
        "contentHash": "9f86d081884c7d65"})
    crds.patch_status(namespace, "TrainingJob", "resnet-slides", {
        "conditions": [condition("Ready", "False", "Pending")], "phase": "Pending", "epoch": 3,
        "samplesDelivered": 640, "samplesPerSecond": 120})
    crds.patch_status(namespace, "Ring", "images", {
        "conditions": [condition("Ready", "True", "Serving"), condition("Scaling", "True", "ScalingUp"),
                       condition("ScalingHeld", "False", "NotHeld")],
        "nodes": 2, "service": "images-images-service.ml.svc"})

    for plural, columns in COLUMNS.items():
        table = server_table(cluster, namespace, plural)
        assert [(c["name"], c["priority"]) for c in table["columnDefinitions"]] == [
            (name, priority) for name, priority, _ in columns] + [("Age", 0)]
        [row] = table["rows"]
        assert row["cells"][:-1] == [cell(row["object"]) for _, _, cell in columns], plural
        assert row["cells"][-1].endswith("s")   # Age, e.g. "2s"
    assert server_table(cluster, namespace, "trainingjobs")["rows"][0]["cells"][3:6] == ["by-patient", "train", 2]

    out = cluster.kubectl("get", "datasets,splits,trainingjobs", "-n", namespace).stdout
    tables = [[line.split() for line in block.splitlines()] for block in out.strip().split("\n\n")]
    assert [table[0] for table in tables] == [
        ["NAME", "READY", "SAMPLES", "LABELS", "SPLITS", "AGE"],
        ["NAME", "READY", "DATASET", "SAMPLES", "PARTS", "AGE"],
        ["NAME", "PHASE", "READY", "SPLIT", "PART", "REPLICAS", "EPOCH", "SAMPLES", "AGE"]], out
    assert [table[1][0] for table in tables] == [
        "dataset.ringfeed.io/slides", "split.ringfeed.io/by-patient", "trainingjob.ringfeed.io/resnet-slides"], out
    wide = cluster.kubectl("get", "rfds,rfsplit", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "READY", "SAMPLES", "LABELS", "SPLITS", "KEYSPACE", "CACHE", "AGE"], wide
    assert wide[3].split() == ["NAME", "READY", "DATASET", "SAMPLES", "PARTS", "HASH", "AGE"], wide

    names = cluster.kubectl("get", "ringfeed", "-n", namespace, "-o", "name").stdout.split()
    assert sorted(names) == ["dataset.ringfeed.io/slides", "ring.ringfeed.io/images", "split.ringfeed.io/by-patient",
                             "trainingjob.ringfeed.io/resnet-slides"]
    assert cluster.kubectl("get", "rfring", "-n", namespace).stdout.split()[:12] == [
        "NAME", "READY", "NODES", "DESIRED", "SCALING", "HELD", "AGE", "images", "True", "2", "2", "True"]
    assert cluster.kubectl("get", "rftj", "-n", namespace, "-o", "name").stdout.split() == [
        "trainingjob.ringfeed.io/resnet-slides"]


@pytest.mark.parametrize("resource,expected", [
    ("dataset", ["Dataset is a set of training samples", "docs/api/dataset.md", "spec\t<Object> -required-"]),
    ("dataset.spec", ["storage\t<Object> -required-", "schema\t<Object> -required-", "deletionPolicy",
                      "Default: Retain."]),
    ("dataset.spec.storage.external", ["Host names (RFC 1123", "contactPoints\t<[]string> -required-",
                                       "port\t<integer>", "Default: 9042. Range: 1 to 65535.",
                                       "credentialsSecret", "localDatacenter", "tls"]),
    ("dataset.spec.ingest.source.volume", ["persistentVolumeClaim", "read-only", "allowHostPath"]),
    ("dataset.spec.ingest.source.volume.persistentVolumeClaim", ["claimName\t<string> -required-",
                                                                 "readOnly\t<boolean>"]),
    ("dataset.spec.ingest.resources", ["limits\t<map[string]Object>", "requests\t<map[string]Object>",
                                       "(a quantity, not negative:"]),
    ("split.spec.balance", ["natural", "equal", "weights", "<map[string]integer>"]),
    ("trainingjob.spec.loader.remainder", ["exactly once", "ENUM", "uneven", "pad", "drop"]),
    ("trainingjob", ["loader sidecar", "docs/api/trainingjob.md"]),
    ("ring", ["cass-operator", "docs/api/ring.md", "spec\t<Object> -required-"]),
    ("ring.spec.autoscaling", ["scaleUpAbove\t<integer>", "477",
                               "ReadsPerSecondPerNode", "windowSeconds"]),
])
def test_kubectl_explain_reads_the_descriptions(cluster: Cluster, crds: Api, resource: str, expected: list[str]):
    out = cluster.kubectl("explain", resource).stdout
    missing = [text for text in expected if text not in out]
    assert not missing, f"{missing} not in:\n{out}"
