"""The few Kubernetes API calls the handlers make besides kopf's own: Secrets, Jobs, references between objects."""

from __future__ import annotations

import base64
import functools
import json

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


class SecretNotFound(Exception):
    """A Secret, or a key of it, that a Dataset names does not exist."""


class JobRejected(Exception):
    """The API server refused a Job the operator built from a spec (invalid, forbidden, or another owner's)."""


def secret_values(namespace: str, name: str, *keys: str) -> list[str]:
    """Keys of one Secret, read with one request."""
    try:
        secret = kubernetes.client.CoreV1Api(_api()).read_namespaced_secret(name, namespace)
    except ApiException as error:
        if error.status == 404:
            raise SecretNotFound(f"Secret {namespace}/{name} not found") from None
        raise
    data = secret.data or {}
    for key in keys:
        if key not in data:
            raise SecretNotFound(f"Secret {namespace}/{name} has no key {key!r}")
    return [base64.b64decode(data[key]).decode() for key in keys]


def ensure_job(namespace: str, manifest: dict) -> tuple[dict, bool]:
    """Create the Job unless its owner already made it (a restarted operator finds it); → (job, created)."""
    batch = kubernetes.client.BatchV1Api(_api())
    name = manifest["metadata"]["name"]
    try:
        created = batch.create_namespaced_job(namespace, manifest)
        return _api().sanitize_for_serialization(created), True
    except ApiException as error:
        if error.status in (400, 403, 422):
            reason = (json.loads(error.body or "{}") or {}).get("message", error.reason)
            raise JobRejected(f"Job {name} refused by the API server: {reason}") from None
        if error.status != 409:
            raise
    job = read_job(namespace, name)
    owners = {o.get("uid") for o in (job or {}).get("metadata", {}).get("ownerReferences") or ()}
    if job is not None and manifest["metadata"]["ownerReferences"][0]["uid"] not in owners:
        raise JobRejected(f"Job {name} already exists and belongs to another object")
    return job, False


def delete_jobs(namespace: str, selector: str) -> None:
    """Delete Jobs and, in the background, their Pods."""
    batch = kubernetes.client.BatchV1Api(_api())
    for job in batch.list_namespaced_job(namespace, label_selector=selector).items:
        try:
            batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
        except ApiException as error:
            if error.status != 404:
                raise


def pods_left(namespace: str, selector: str) -> list[str]:
    pods = kubernetes.client.CoreV1Api(_api()).list_namespaced_pod(namespace, label_selector=selector).items
    return [p.metadata.name for p in pods]


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
