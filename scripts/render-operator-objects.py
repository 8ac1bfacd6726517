#!/usr/bin/env python3
"""Every kind of object the operator makes, built by its real builders from the samples in crds/samples/: the input of
`make lint-security` (scripts/lint-security.py), which runs checkov on them. One object per file,
``<source>--<Kind>--<name>.yaml``, in the namespace of the object that owns it (the operator creates them there).

    .venv/bin/python scripts/render-operator-objects.py OUT_DIR

Sources (what the operator makes for one object of each kind, with the chart's default settings):
- ring: the Ring sample's credentials and TLS Secrets, CassandraDatacenter and cleanup CassandraTask, and
  ``<ring>-pod-template``, the Pod cass-operator makes of the CassandraDatacenter (see ``cassandra_pod``);
- dataset: the Dataset sample's ingest Job (an external ring), and a Dataset on the Ring with an Alluxio cache tier:
  its ingest Job and the tier's master Service and StatefulSet, worker and FUSE DaemonSets;
- split: the Split sample's Job;
- trainingjob: the TrainingJob sample's rendezvous Service, control Secret and Indexed Job with the loader sidecar
  (access: sidecar), and the same on the cached Dataset with access: posix (the FUSE mount read-only).

The TrainingJob's Pod template is the user's: the sample's, given a restricted security context and resources of
its own and pull policy Always, so that what checkov finds in the rank Jobs is what the operator adds to it.
"""

from __future__ import annotations

import copy
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import yaml

from ringfeed.ring import ProvisionedRing
from ringfeed_operator.builders.cache import cache_objects
from ringfeed_operator.builders.datacenter import datacenter
from ringfeed_operator.builders.dataset import catalog_name, ingest_fingerprint
from ringfeed_operator.builders.jobs import ingest_job, ingest_policy, split_job, split_policy
from ringfeed_operator.builders.network import ring_policy, trainingjob_policy
from ringfeed_operator.builders.ring import LABEL_RING, MAAC_METRICS_PORT, cleanup_task, credentials_secret, ring_labels
from ringfeed_operator.builders.ring_tls import ca_secret, management_secret, node_secret
from ringfeed_operator.builders.split import split_arguments, split_spec
from ringfeed_operator.builders.trainingjob import (
    LABEL_TRAININGJOB,
    SIDECAR_PORT,
    control_secret,
    labels_of,
    rank_job,
    rendezvous_service,
)
from ringfeed_operator.config import CacheConfig, JobsConfig, NetworkConfig, RingsConfig
from ringfeed_operator.isolation import isolation_breaches
from ringfeed_operator.pki import KeyPair

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "crds" / "samples"
NAMESPACE = "ml"
NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
# The chart's defaults (networkPolicy.*) for a release in ringfeed-system.
NETWORK = NetworkConfig(enabled=True, monitoring_namespace="monitoring")
# The chart's defaults (values.yaml): cass-operator's image configuration (templates/cass-operator/image-config.yaml).
CONFIG_BUILDER_IMAGE = "docker.io/k8ssandra/k8ssandra-client:v0.9.0"
CASS_OPERATOR_PULL_POLICY = "IfNotPresent"
# Secret contents do not matter to the checks: no key is generated.
PEM = KeyPair(key_pem="-----BEGIN PRIVATE KEY-----\n(not rendered)\n-----END PRIVATE KEY-----\n",
              cert_pem="-----BEGIN CERTIFICATE-----\n(not rendered)\n-----END CERTIFICATE-----\n")
RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                  "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]}}


class NoAliases(yaml.SafeDumper):
    """Every object written out in full: a dict the builders use twice is not a YAML alias."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def sample(kind: str, uid: str, **spec: Any) -> dict:
    """crds/samples/<kind>.yaml as the API server gives it to the operator: namespace, uid, generation."""
    body = yaml.safe_load((SAMPLES / f"{kind.lower()}.yaml").read_text())
    body["metadata"].update(namespace=NAMESPACE, uid=uid, generation=1)
    body["spec"].update(copy.deepcopy(spec))
    return body


def cassandra_pod(dc: dict) -> dict:
    """The Pod cass-operator (v1.32, pkg/reconciliation/construct_podtemplatespec.go) makes of a CassandraDatacenter,
    as far as checkov's checks look: spec.podTemplateSpec as the operator writes it, with what cass-operator adds
    where the template leaves it out: the Cassandra container's image (serverImage) and resources (spec.resources),
    its Management API probes, a pod security context (uid 999, runAsNonRoot) when the template has none, container
    security contexts (read-only root, no privilege escalation) only with spec.readOnlyRootFilesystem (never
    assumed when serverImage is set), the init containers that write the configuration (the config builder image
    with spec.configBuilderResources; the server image copying its defaults), the ServiceAccount named in
    spec.serviceAccountName, grace period 120 s. Labels, affinity, env and the volumes cass-operator adds are left
    out: no check reads them."""
    spec = dc["spec"]
    template = copy.deepcopy(spec.get("podTemplateSpec") or {})
    pod = template.setdefault("spec", {})
    read_only = spec.get("readOnlyRootFilesystem") is True
    container_security = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False} if read_only else {}
    pod.setdefault("terminationGracePeriodSeconds", 120)
    if spec.get("serviceAccountName"):
        pod["serviceAccountName"] = spec["serviceAccountName"]
    pod.setdefault("securityContext", {"runAsUser": 999, "runAsGroup": 999, "fsGroup": 999, "runAsNonRoot": True})
    containers = pod.setdefault("containers", [])
    cassandra = next((c for c in containers if c["name"] == "cassandra"), None)
    if cassandra is None:
        cassandra = {"name": "cassandra"}
        containers.append(cassandra)
    if not cassandra.get("image"):
        cassandra["image"] = spec["serverImage"]
        cassandra["imagePullPolicy"] = CASS_OPERATOR_PULL_POLICY
    if not cassandra.get("resources"):
        cassandra["resources"] = spec.get("resources") or {}
    probe = {"exec": {"command": ["curl", "--cert", "...", "https://localhost:8080/api/v0/probes/..."]}}
    cassandra.setdefault("livenessProbe", {**probe, "initialDelaySeconds": 15, "periodSeconds": 15})
    cassandra.setdefault("readinessProbe", {**probe, "initialDelaySeconds": 20, "periodSeconds": 10})
    init = {c["name"]: c for c in pod.get("initContainers") or ()}
    base = init.get("server-config-init-base") or {"name": "server-config-init-base"}
    if not base.get("image"):
        base.update(image=spec["serverImage"], imagePullPolicy=CASS_OPERATOR_PULL_POLICY, command=["/bin/sh"],
                    args=["-c", "cp -rf /etc/cassandra/* /cassandra-base-config/"])
    builder = init.get("server-config-init") or {"name": "server-config-init"}
    if not builder.get("image"):
        builder.update(image=CONFIG_BUILDER_IMAGE, imagePullPolicy=CASS_OPERATOR_PULL_POLICY, args=["config", "build"])
    builder["resources"] = spec.get("configBuilderResources") or {
        "requests": {"cpu": "1", "memory": "256M"}, "limits": {"cpu": "1", "memory": "384M"}}
    pod["initContainers"] = [base, builder, *(c for c in pod.get("initContainers") or ()
                                              if c["name"] not in ("server-config-init", "server-config-init-base"))]
    for container in [*pod["initContainers"], *containers]:
        container["securityContext"] = {**container_security, **(container.get("securityContext") or {})}
    metadata = {**template.get("metadata", {}), "name": f"{dc['metadata']['name']}-pod-template",
                "namespace": dc["metadata"]["namespace"]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod}


def ring_objects() -> list[dict]:
    ring = sample("Ring", "7c1d0001-0000-4000-8000-000000000001")
    provisioned = ProvisionedRing(ring["metadata"]["name"])
    dc = datacenter(ring, RingsConfig())
    dc["metadata"]["namespace"] = NAMESPACE
    return [
        credentials_secret(ring, provisioned.superuser_secret, provisioned.superuser_role, "(not rendered)"),
        credentials_secret(ring, provisioned.reader_secret, provisioned.reader_role, "(not rendered)"),
        ca_secret(ring, PEM), node_secret(ring, PEM, PEM),
        management_secret(ring, provisioned.management_server_secret, PEM, PEM),
        management_secret(ring, provisioned.management_client_secret, PEM, PEM),
        dc, cassandra_pod(dc), cleanup_task(ring, NOW),
        ring_policy(ring, {"matchLabels": {LABEL_RING: provisioned.name}}, ring_labels(provisioned.name),
                    MAAC_METRICS_PORT, NETWORK),
    ]


def datasets() -> tuple[dict, dict]:
    """The Dataset sample (an external ring), and one on the Ring sample with an Alluxio cache tier."""
    external = sample("Dataset", "0b6f1c2e-0000-4000-8000-000000000002")
    cached = sample("Dataset", "0b6f1c2e-0000-4000-8000-000000000003", storage={"ring": {"name": "images"}},
                    cache={"alluxio": {"memory": "2Gi", "nodeSelector": {"ringfeed.io/cache": "true"}}})
    cached["metadata"]["name"] = "slides-cached"
    return external, cached


def dataset_objects() -> list[dict]:
    objects = []
    for dataset in datasets():
        name, spec = dataset["metadata"]["name"], dataset["spec"]
        objects.append(ingest_job(dataset, catalog_name(name, spec), ingest_fingerprint(spec["ingest"]), JobsConfig()))
        objects.append(ingest_policy(dataset, NETWORK))
        if spec.get("cache"):
            objects += cache_objects(dataset, catalog_name(name, spec), CacheConfig(), NETWORK)
    return objects


def split_objects() -> list[dict]:
    split = sample("Split", "9f00aa11-0000-4000-8000-000000000004")
    dataset, _ = datasets()
    arguments = split_arguments(split_spec(split["spec"]))
    return [split_job(split, dataset, catalog_name(dataset["metadata"]["name"], dataset["spec"]), arguments,
                      JobsConfig()), split_policy(split, NETWORK)]


def trainingjob_objects() -> list[dict]:
    objects = []
    _, dataset = datasets()
    catalog = catalog_name(dataset["metadata"]["name"], dataset["spec"])
    for access, uid in (("sidecar", "7d0c1c2e-0000-4000-8000-000000000005"),
                        ("posix", "7d0c1c2e-0000-4000-8000-000000000006")):
        trainingjob = sample("TrainingJob", uid, access=access)
        if access == "posix":
            trainingjob["metadata"]["name"] += "-posix"
        pod = trainingjob["spec"]["template"]["spec"]
        pod["securityContext"] = RESTRICTED_POD
        for container in pod["containers"]:
            container["imagePullPolicy"] = "Always"
            container["securityContext"] = RESTRICTED_CONTAINER
            container["resources"] = {"requests": {"cpu": "4", "memory": "16Gi"},
                                      "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": 1}}
        if breaches := isolation_breaches(pod):  # the operator would refuse the TrainingJob
            raise SystemExit(f"the sample TrainingJob's template is refused: {breaches}")
        name = trainingjob["metadata"]["name"]
        objects += [rendezvous_service(trainingjob), rank_job(trainingjob, dataset, catalog, 1, JobsConfig(),
                                                              CacheConfig()),
                    trainingjob_policy(trainingjob, {"matchLabels": {LABEL_TRAININGJOB: name}}, labels_of(name),
                                       SIDECAR_PORT, NETWORK)]
        if access == "sidecar":
            objects.append(control_secret(trainingjob, "(not rendered)"))
    return objects


SOURCES = {"ring": ring_objects, "dataset": dataset_objects, "split": split_objects,
           "trainingjob": trainingjob_objects}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for source, build in SOURCES.items():
        for obj in build():
            obj["metadata"].setdefault("namespace", NAMESPACE)
            path = out / f"{source}--{obj['kind']}--{obj['metadata']['name']}.yaml"
            if path.exists():
                raise SystemExit(f"two objects would be written to {path.name}")
            path.write_text(yaml.dump(obj, Dumper=NoAliases, sort_keys=False))
            print(path.relative_to(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} OUT_DIR")
    main(Path(sys.argv[1]))
