"""The Jobs the operator creates: ingest and split. Same input, same manifest. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from ringfeed_operator.builders.meta import (
    LABEL_COMPONENT,
    LABEL_DATASET,
    LABEL_MANAGED_BY,
    LABEL_SPLIT,
    MANAGER,
    bounded_name,
    owner_reference,
    pull_secrets,
    scrape_annotations,
)
from ringfeed_operator.builders.network import job_policy
from ringfeed_operator.builders.ring import job_login, ring_env, ring_volumes
from ringfeed_operator.config import JobsConfig, NetworkConfig

SOURCE_MOUNT = "/data"
TTL_SECONDS_AFTER_FINISHED = 86400  # a finished Job, its Pods and their logs stay a day
INGEST_METRICS_PORT = 9102  # `ringfeed ingest --metrics-port`: progress and rejects while the Job runs


def literal(argument: str) -> str:
    """An argument the container gets as written: Kubernetes expands $(VAR) in args, and reads $$ as $ (a source path
    or a filter value may hold either). Every Job's arguments pass through it (`_job`)."""
    return argument.replace("$", "$$")


def job_name(owner: str, role: str, suffix: str) -> str:
    return bounded_name(owner, f"-{role}-{suffix}")


def _job(name: str, owner: dict, labels: dict, container: dict, config: JobsConfig,
         volumes: Sequence[dict] = (), annotations: dict[str, str] | None = None) -> dict:
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # the data plane never calls the Kubernetes API
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "image": config.image, "imagePullPolicy": config.image_pull_policy,
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            **container,
            "args": [literal(argument) for argument in container["args"]],
            "volumeMounts": [*container.get("volumeMounts", ()), {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [*volumes, {"name": "tmp", "emptyDir": {}}],
        **pull_secrets(config.image_pull_secrets),
    }
    if config.service_account:
        pod_spec["serviceAccountName"] = config.service_account
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner_reference(owner)]},
        "spec": {"backoffLimit": config.backoff_limit, "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
                 "template": {"metadata": {"labels": labels, **({"annotations": annotations} if annotations else {})},
                              "spec": pod_spec}},
    }


def ingest_job(dataset: dict, catalog_name: str, suffix: str, config: JobsConfig) -> dict:
    """`ringfeed ingest` of spec.ingest.source into the Dataset's tables (re-running is safe: same UUIDs); `suffix`
    of its name: the inputs' fingerprint (``builders.dataset.ingest_job_suffix``)."""
    spec = dataset["spec"]
    ingest = spec["ingest"]
    name = dataset["metadata"]["name"]
    labels = {LABEL_DATASET: name, LABEL_COMPONENT: "ingest", LABEL_MANAGED_BY: MANAGER}
    source = f"{SOURCE_MOUNT}/{ingest['source']['path']}".rstrip("/").removesuffix("/.")
    arguments = [
        "ingest", catalog_name, source, f"--format={ingest.get('format', 'auto')}",
        f"--path-column={ingest.get('pathColumn', 'path')}", f"--label-column={ingest.get('labelColumn', 'label')}",
        f"--workers={ingest.get('workers', 8)}", f"--concurrency={ingest.get('concurrency', 64)}",
        f"--max-sample-mb={ingest.get('maxSampleMB', 64)}", f"--consistency={ingest.get('consistency', 'ONE')}",
        f"--metrics-port={INGEST_METRICS_PORT}",
    ]
    if ingest.get("fullDecode"):
        arguments.append("--full-decode")
    tls_volumes, tls_mounts = ring_volumes(spec["storage"], job_login(dataset))
    container = {
        "name": "ingest", "command": ["ringfeed"], "args": arguments,
        "env": ring_env(spec["storage"], job_login(dataset)),
        "volumeMounts": [{"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True}, *tls_mounts],
        "ports": [{"name": "metrics", "containerPort": INGEST_METRICS_PORT}],
        "resources": ingest.get("resources") or config.resources.get("ingest", {}),
    }
    volume = {"name": "source", **ingest["source"]["volume"]}
    return _job(job_name(name, "ingest", suffix), dataset, labels, container, config, [volume, *tls_volumes],
                scrape_annotations(INGEST_METRICS_PORT))


def split_job(split: dict, dataset: dict, catalog_name: str, arguments: list[str], config: JobsConfig) -> dict:
    """`ringfeed split create` in its own Pod: a 10M-row split needs ~17 s of CPU and GBs of memory, which the
    operator's Pod must not have to hold (see docs/operator.md)."""
    name = split["metadata"]["name"]
    labels = {LABEL_DATASET: dataset["metadata"]["name"], LABEL_SPLIT: name, LABEL_COMPONENT: "split",
              LABEL_MANAGED_BY: MANAGER}
    tls_volumes, tls_mounts = ring_volumes(dataset["spec"]["storage"], job_login(dataset))
    container = {"name": "split", "command": ["ringfeed"],
                 "args": ["split", "create", catalog_name, name, *arguments],
                 "env": ring_env(dataset["spec"]["storage"], job_login(dataset)), "volumeMounts": tls_mounts,
                 "resources": config.resources.get("split", {})}
    return _job(job_name(name, "split", split["metadata"]["uid"][:8]), split, labels, container, config,
                tls_volumes)


def ingest_policy(dataset: dict, network: NetworkConfig) -> dict:
    """The NetworkPolicy of the Dataset's ingest Jobs: their metrics to the monitoring namespace, nothing else."""
    name = dataset["metadata"]["name"]
    labels = {LABEL_DATASET: name, LABEL_COMPONENT: "ingest"}
    return job_policy(dataset, bounded_name(name, "-ingest"), {"matchLabels": labels},
                      {**labels, LABEL_MANAGED_BY: MANAGER}, INGEST_METRICS_PORT, network)


def split_policy(split: dict, network: NetworkConfig) -> dict:
    """The NetworkPolicy of the Split's Job: it serves nothing."""
    name = split["metadata"]["name"]
    labels = {LABEL_SPLIT: name, LABEL_COMPONENT: "split"}
    return job_policy(split, bounded_name(name, "-split"), {"matchLabels": labels},
                      {**labels, LABEL_MANAGED_BY: MANAGER}, None, network)
