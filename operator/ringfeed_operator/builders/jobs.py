"""Pure builders of the objects the operator creates: ingest and split Jobs. Same input, same manifest."""

from __future__ import annotations

from ringfeed_operator.datasets import tls_secret
from ringfeed_operator.settings import JobSettings

GROUP = "ringfeed.io"
VERSION = "v1alpha1"
LABEL_DATASET = "ringfeed.io/dataset"
LABEL_SPLIT = "ringfeed.io/split"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "ringfeed-operator"
SOURCE_MOUNT = "/data"
TLS_MOUNT = "/etc/ringfeed/tls"
MAX_NAME = 63  # a Job's name becomes a Pod label value


def job_name(owner: str, role: str, suffix: str) -> str:
    tail = f"-{role}-{suffix}"
    return owner[: MAX_NAME - len(tail)].rstrip("-.") + tail


def owner_reference(body: dict) -> dict:
    """Deleting the owner deletes the Job (and its Pods) through the garbage collector."""
    return {"apiVersion": body["apiVersion"], "kind": body["kind"], "name": body["metadata"]["name"],
            "uid": body["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def ring_env(storage: dict) -> list[dict]:
    """How a data-plane container finds the ring: contact points, port, and credentials from the Secret."""
    external = storage["external"]
    env = [{"name": "RINGFEED_HOSTS", "value": ",".join(external["contactPoints"])},
           {"name": "RINGFEED_PORT", "value": str(external.get("port", 9042))}]
    secret = external.get("credentialsSecret")
    if secret:
        for variable, key in (("RINGFEED_USERNAME", secret.get("usernameKey", "username")),
                              ("RINGFEED_PASSWORD", secret.get("passwordKey", "password"))):
            env.append({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret["name"], "key": key}}})
    if tls_secret(storage):
        env.append({"name": "RINGFEED_TLS_CA_FILE", "value": f"{TLS_MOUNT}/ca.crt"})
    if external.get("localDatacenter"):
        env.append({"name": "RINGFEED_LOCAL_DC", "value": external["localDatacenter"]})
    return env


def ring_volumes(storage: dict) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts) that put the nodes' CA certificate where RINGFEED_TLS_CA_FILE points."""
    ca = tls_secret(storage)
    if not ca:
        return [], []
    volume = {"name": "ring-ca", "secret": {"secretName": ca["name"], "items": [{"key": ca["key"], "path": "ca.crt"}]}}
    return [volume], [{"name": "ring-ca", "mountPath": TLS_MOUNT, "readOnly": True}]


def _job(name: str, owner: dict, labels: dict, container: dict, settings: JobSettings,
         volumes: list[dict] = ()) -> dict:
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # the data plane never calls the Kubernetes API
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "image": settings.image, "imagePullPolicy": settings.image_pull_policy,
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            **container,
            "volumeMounts": [*container.get("volumeMounts", ()), {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [*volumes, {"name": "tmp", "emptyDir": {}}],
    }
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels, "ownerReferences": [owner_reference(owner)]},
        "spec": {"backoffLimit": settings.backoff_limit, "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
                 "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
    }


def ingest_job(dataset: dict, catalog_name: str, fingerprint: str, settings: JobSettings) -> dict:
    """`ringfeed ingest` of spec.ingest.source into the Dataset's tables (re-running is safe: same UUIDs)."""
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
    ]
    if ingest.get("fullDecode"):
        arguments.append("--full-decode")
    tls_volumes, tls_mounts = ring_volumes(spec["storage"])
    container = {
        "name": "ingest", "command": ["ringfeed"], "args": arguments, "env": ring_env(spec["storage"]),
        "volumeMounts": [{"name": "source", "mountPath": SOURCE_MOUNT, "readOnly": True}, *tls_mounts],
        "resources": ingest.get("resources") or settings.resources.get("ingest", {}),
    }
    volume = {"name": "source", **ingest["source"]["volume"]}
    return _job(job_name(name, "ingest", fingerprint), dataset, labels, container, settings, [volume, *tls_volumes])


def split_job(split: dict, dataset: dict, catalog_name: str, arguments: list[str], settings: JobSettings) -> dict:
    """`ringfeed split create` in its own Pod: a 10M-row split needs ~17 s of CPU and GBs of memory, which the
    operator's Pod must not have to hold (see docs/operator.md)."""
    name = split["metadata"]["name"]
    labels = {LABEL_DATASET: dataset["metadata"]["name"], LABEL_SPLIT: name, LABEL_COMPONENT: "split",
              LABEL_MANAGED_BY: MANAGER}
    tls_volumes, tls_mounts = ring_volumes(dataset["spec"]["storage"])
    container = {"name": "split", "command": ["ringfeed"],
                 "args": ["split", "create", catalog_name, name, *arguments],
                 "env": ring_env(dataset["spec"]["storage"]), "volumeMounts": tls_mounts,
                 "resources": settings.resources.get("split", {})}
    return _job(job_name(name, "split", split["metadata"]["uid"][:8]), split, labels, container, settings,
                tls_volumes)
