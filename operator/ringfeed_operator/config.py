"""The operator's settings: one Config, set by `ringfeed-operator`'s options, which the Helm chart fills from its
values. Each attribute carries the name of its chart value (`operator.metricsPort` → `Config.metrics_port`,
`jobs.backoffLimit` → `Config.jobs.backoff_limit`)."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import re
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

JOB_ROLES = ("ingest", "split", "sidecar")
# The sections of a core ResourceRequirements a Job container can use (its Pod has no resourceClaims).
RESOURCE_SECTIONS = ("limits", "requests")
# The data-plane and cache-tier images of a release carry its version as their tag.
VERSION = importlib.metadata.version("ringfeed-operator")


def quantity(value: object) -> Decimal:
    """A resource quantity (500m, 2, 4Gi, 1e3) as a number, read by kubernetes.utils.parse_quantity; ValueError for
    what that reader lets through but the API server refuses: a boolean, NaN or an infinity, blanks or underscores
    (Python's Decimal reads them)."""
    if isinstance(value, bool) or (isinstance(value, str) and any(c.isspace() or c == "_" for c in value)):
        raise ValueError(f"{value!r} is not a quantity")
    number = parse_quantity(value)
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a quantity")
    return number


@dataclasses.dataclass(frozen=True)
class JobsConfig:
    """The ingest and split Jobs and the TrainingJobs' loader sidecars the operator creates (chart values
    `jobs.*`)."""

    # jobs.image — the data-plane image (the `ringfeed` command), [registry/]repository:tag[@digest].
    image: str = f"ghcr.io/ringfeed/dataplane:{VERSION}"
    # jobs.image.pullPolicy
    image_pull_policy: str = "IfNotPresent"
    # global.imagePullSecrets — of the Jobs and of the TrainingJobs' Pods (the sidecar's image, and the trainer's).
    image_pull_secrets: tuple[str, ...] = ()
    # jobs.serviceAccount — "" is the namespace's default; the Jobs never call the Kubernetes API.
    service_account: str = ""
    # jobs.backoffLimit — retries of a failed Job Pod before the ingest or split is reported failed.
    backoff_limit: int = 2
    # jobs.allowHostPath — hostPath ingest sources give a Pod a node's files: off unless the chart says so.
    allow_host_path: bool = False
    # jobs.resources — a ResourceRequirements per role; a Dataset's spec.ingest.resources replaces the ingest one.
    resources: dict = dataclasses.field(default_factory=lambda: {
        "ingest": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
        "split": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
        "sidecar": {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
    })


@dataclasses.dataclass(frozen=True)
class RingsConfig:
    """The Rings the operator provisions through cass-operator (chart values `rings.*`)."""

    # rings.image — Cassandra with the Management API, unless a Ring's spec.image names another.
    image: str = "ghcr.io/ringfeed/cassandra-maac:5.0.9"
    # global.imagePullSecrets — of the nodes' Pods (their Cassandra and config-builder images).
    image_pull_secrets: tuple[str, ...] = ()
    # rings.resources — each node's Cassandra container, unless a Ring's spec.resources says otherwise: a heap of
    # 1Gi (the default spec.heapSize) with room off the heap, and Burstable rather than BestEffort.
    resources: dict = dataclasses.field(default_factory=lambda: {
        "requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}})


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """The Alluxio cache tiers of Datasets with spec.cache.alluxio (chart values `cache.*`)."""

    # cache.image — Alluxio with Ringfeed's extension (`ringfeed cache serve`).
    image: str = f"ghcr.io/ringfeed/alluxio:{VERSION}"
    # cache.image.pullPolicy
    image_pull_policy: str = "IfNotPresent"
    # global.imagePullSecrets — of the cache tier's Pods.
    image_pull_secrets: tuple[str, ...] = ()
    # cache.hostDir — the nodes' directory of the FUSE mounts: <hostDir>/<namespace>/<dataset>/mnt.
    host_dir: str = "/var/lib/ringfeed/cache"


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The NetworkPolicies of the operator's objects (chart values `networkPolicy.*`, with the chart's own
    namespace and Pod labels filled in): off unless the chart turns them on."""

    # networkPolicy.enabled
    enabled: bool = False
    # The operator's namespace and Pod labels (the chart's release): it reads the rings and the sidecars.
    operator_namespace: str = "ringfeed-system"
    operator_pods: dict = dataclasses.field(default_factory=lambda: {"app.kubernetes.io/component": "operator"})
    # networkPolicy.cassOperator.* — where cass-operator runs, the only caller of the rings' Management API.
    cass_operator_namespace: str = "ringfeed-system"
    cass_operator_pods: dict = dataclasses.field(default_factory=lambda: {"app.kubernetes.io/name": "cass-operator"})
    # networkPolicy.monitoringNamespace — the Prometheus that scrapes the nodes, sidecars and cache tiers; "": none.
    monitoring_namespace: str = ""
    # networkPolicy.ringClients — more NetworkPolicyPeers that may reach the rings' CQL port (e.g. an ipBlock of
    # notebooks outside the cluster).
    ring_clients: tuple = ()


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything `ringfeed-operator` is told at its start (chart values `operator.*`, `jobs.*` and `rings.*`)."""

    # operator.watchNamespaces — empty: every namespace.
    watch_namespaces: tuple[str, ...] = ()
    # operator.metricsPort — the Prometheus /metrics endpoint; 0 turns it off.
    metrics_port: int = 9090
    # operator.healthPort — the liveness endpoint (GET /healthz) probed by the Deployment.
    health_port: int = 8080
    # operator.bind — the address both endpoints listen on.
    bind: str = "0.0.0.0"
    # operator.verbose — log every handler call and API request.
    verbose: bool = False
    # jobs.*
    jobs: JobsConfig = dataclasses.field(default_factory=JobsConfig)
    # rings.*
    rings: RingsConfig = dataclasses.field(default_factory=RingsConfig)
    # cache.*
    cache: CacheConfig = dataclasses.field(default_factory=CacheConfig)
    # networkPolicy.*
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)


# A Secret's name: a DNS-1123 subdomain.
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def parse_secret_names(text: str) -> tuple[str, ...]:
    """`a,b` (the chart's global.imagePullSecrets joined) as names; ValueError naming one that is not a Secret's."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if len(name) > 253 or not SECRET_NAME.match(name):
            raise ValueError(f"{name!r} is not a Secret name (lower-case letters, digits, '-' and '.')")
    return tuple(dict.fromkeys(names))


class ResourcesError(ValueError):
    """A `--job-resources` or `--ring-resources` value (the chart's `jobs.resources`, `rings.resources`) that no Pod
    could be created with."""


def check_requirements(where: str, requirements: object) -> None:
    """Raises ResourcesError naming the problem unless `requirements` is a core ResourceRequirements of limits
    and requests."""
    if not isinstance(requirements, dict):
        raise ResourcesError(f"{where}: give an object with {' and/or '.join(RESOURCE_SECTIONS)}")
    for section, quantities in requirements.items():
        if section not in RESOURCE_SECTIONS:
            raise ResourcesError(f"{where}: unknown field {section!r} (fields: {', '.join(RESOURCE_SECTIONS)})")
        if not isinstance(quantities, dict):
            raise ResourcesError(f"{where}.{section}: give an object of resource quantities, e.g. {{\"memory\": "
                                 "\"4Gi\"}")
        for resource, value in quantities.items():
            try:
                quantity(value)
            except ValueError:
                raise ResourcesError(f"{where}.{section}.{resource}: {value!r} is not a quantity "
                                     "(e.g. 500m, 2, 4Gi)") from None


def parse_json_object(text: str, example: str, error: type[ValueError] = ResourcesError) -> dict:
    """A chart value given to an option as JSON, which must be an object; else `error` saying so."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as problem:
        raise error(f"not JSON ({problem})") from None
    if not isinstance(value, dict):
        raise error(f"give a JSON object {example}, not {text!r}")
    return value


def parse_job_resources(text: str, defaults: dict) -> dict:
    """The resources per role that `--job-resources` gives: a JSON object whose keys are roles (ingest, split,
    sidecar) and whose values are ResourceRequirements (limits, requests); a role given replaces that role's
    defaults, a role left out keeps them. Raises ResourcesError naming the problem, so that a bad chart value
    stops the operator at its start instead of failing every Job it creates."""
    overrides = parse_json_object(text, f"with keys among {', '.join(JOB_ROLES)}")
    for role, requirements in overrides.items():
        if role not in JOB_ROLES:
            raise ResourcesError(f"unknown role {role!r}: the roles are {', '.join(JOB_ROLES)}")
        check_requirements(role, requirements)
    return {**defaults, **overrides}


def parse_ring_resources(text: str) -> dict:
    """The Rings' default node resources that `--ring-resources` gives: one ResourceRequirements as JSON."""
    requirements = parse_json_object(text, f"with {' and/or '.join(RESOURCE_SECTIONS)}")
    check_requirements("rings.resources", requirements)
    return requirements


# The chart's networkPolicy keys: the NetworkConfig field each sets, and its JSON type.
NETWORK_KEYS: dict[str, tuple[str, type]] = {
    "enabled": ("enabled", bool), "operatorNamespace": ("operator_namespace", str),
    "operatorPods": ("operator_pods", dict), "cassOperatorNamespace": ("cass_operator_namespace", str),
    "cassOperatorPods": ("cass_operator_pods", dict), "monitoringNamespace": ("monitoring_namespace", str),
    "ringClients": ("ring_clients", list)}


class NetworkPolicyError(ValueError):
    """A `--network-policy` value (the chart's `networkPolicy`) the operator cannot make policies from."""


def parse_network_policy(text: str) -> NetworkConfig:
    """`--network-policy`: a JSON object of NETWORK_KEYS (the chart writes it); keys left out keep the defaults."""
    given = parse_json_object(text, f"with keys among {', '.join(NETWORK_KEYS)}", NetworkPolicyError)
    values: dict[str, Any] = {}
    for key, value in given.items():
        if key not in NETWORK_KEYS:
            raise NetworkPolicyError(f"unknown key {key!r}: the keys are {', '.join(NETWORK_KEYS)}")
        field, kind = NETWORK_KEYS[key]
        if not isinstance(value, kind):
            raise NetworkPolicyError(f"{key}: give a {kind.__name__}, not {value!r}")
        if isinstance(value, dict) and not all(isinstance(label, str) for label in value.values()):
            raise NetworkPolicyError(f"{key}: give labels (strings), not {value!r}")
        if isinstance(value, list) and not all(isinstance(peer, dict) for peer in value):
            raise NetworkPolicyError(f"{key}: give NetworkPolicyPeers (objects), not {value!r}")
        values[field] = tuple(value) if isinstance(value, list) else value
    return NetworkConfig(**values)
