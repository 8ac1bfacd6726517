"""The few Kubernetes API calls the handlers make besides kopf's own: Secrets, Jobs, references between objects."""

from __future__ import annotations

import base64
import functools

import kubernetes
from kubernetes.client.exceptions import ApiException

from ringfeed_operator.manifests import GROUP, VERSION


@functools.cache
def _api() -> kubernetes.client.ApiClient:
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.ApiClient()


def secret_value(namespace: str, name: str, key: str) -> str:
    """A key of a Secret; KeyError names what is missing."""
    try:
        secret = kubernetes.client.CoreV1Api(_api()).read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            raise KeyError(f"Secret {namespace}/{name} not found") from None
        raise
    if key not in (secret.data or {}):
        raise KeyError(f"Secret {namespace}/{name} has no key {key!r}")
    return base64.b64decode(secret.data[key]).decode()


def ensure_job(namespace: str, manifest: dict) -> tuple[dict, bool]:
    """Create the Job unless one of that name exists (a restarted operator finds the one it made); → (job, created)."""
    batch = kubernetes.client.BatchV1Api(_api())
    try:
        created = batch.create_namespaced_job(namespace, manifest)
        return _api().sanitize_for_serialization(created), True
    except ApiException as error:
        if error.status != 409:
            raise
    return read_job(namespace, manifest["metadata"]["name"]), False


def read_job(namespace: str, name: str) -> dict | None:
    try:
        job = kubernetes.client.BatchV1Api(_api()).read_namespaced_job(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
    return _api().sanitize_for_serialization(job)


def job_state(job: dict | None) -> str:
    """missing | running | succeeded | failed, from the Job's conditions."""
    if job is None:
        return "missing"
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition.get("status") == "True" and condition["type"] in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if condition.get("status") == "True" and condition["type"] in ("Failed", "FailureTarget"):
            return "failed"
    return "running"


def job_failure(namespace: str, job: dict) -> str:
    """Why a Job failed: its condition message and the last lines of its last Pod's log."""
    message = next((c.get("message", "") for c in job["status"].get("conditions") or ()
                    if c["type"] in ("Failed", "FailureTarget")), "")
    core = kubernetes.client.CoreV1Api(_api())
    pods = core.list_namespaced_pod(namespace, label_selector=f"job-name={job['metadata']['name']}").items
    if pods:
        pod = max(pods, key=lambda p: p.metadata.creation_timestamp)
        try:
            log = core.read_namespaced_pod_log(pod.metadata.name, namespace, tail_lines=5)
            message = f"{message}; last log lines of {pod.metadata.name}: {log.strip()}"
        except ApiException:
            pass
    return message


def referrers(namespace: str, plural: str, field: callable, name: str) -> list[str]:
    """Names of the objects of ``plural`` in ``namespace`` whose ``field(spec)`` is ``name``."""
    items = kubernetes.client.CustomObjectsApi(_api()).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural)["items"]
    return sorted(item["metadata"]["name"] for item in items
                  if field(item.get("spec") or {}) == name)


def read_object(namespace: str, plural: str, name: str) -> dict | None:
    try:
        return kubernetes.client.CustomObjectsApi(_api()).get_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
