"""What the operator's watches keep in memory: the Jobs it made and the Pods of the TrainingJobs' ranks, as kopf
indexes, so that the timers that follow them read memory instead of asking the API server every tick (a GET of the
Job and a LIST of its Pods per object per tick was most of the operator's requests at rest: make
bench-operator-scale).

The watches are filtered by label on the server (main.configure): only the operator's own Jobs and the rank Pods
travel. Each entry keeps the few fields the handlers read, not the object (a Pod is kilobytes, and a cluster may run
thousands). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ringfeed_operator.builders.meta import LABEL_MANAGED_BY, MANAGER
from ringfeed_operator.builders.trainingjob import LABEL_TRAININGJOB

JOBS_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGER}"  # ingest, split and rank Jobs
RANK_PODS_SELECTOR = LABEL_TRAININGJOB  # the Pods of a TrainingJob's ranks (the label exists)

_METADATA = ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp")


def _trimmed_metadata(meta: Mapping) -> dict:
    return {key: meta[key] for key in _METADATA if meta.get(key) is not None}


def job_entry(namespace: str, name: str, body: Mapping, **_) -> dict:
    """Index of Jobs by (namespace, name): what job_state, a resize, a suspension and Kueue's admission read."""
    spec = body.get("spec") or {}
    return {(namespace, name): {"metadata": _trimmed_metadata(body.get("metadata") or {}),
                                "spec": {key: spec[key] for key in ("suspend", "completions") if key in spec},
                                "status": dict(body.get("status") or {})}}


def rank_pod_entry(namespace: str, labels: Mapping, body: Mapping, **_) -> dict:
    """Index of rank Pods by (namespace, TrainingJob): what running_pods, pod_ready, the sidecar calls and
    status.pod_not_starting read (of the containers, only those waiting, by name and why)."""
    status = body.get("status") or {}
    kept = {key: status[key] for key in ("phase", "podIP", "conditions") if key in status}
    for key in ("initContainerStatuses", "containerStatuses"):
        waiting = [{"name": container["name"], "state": {"waiting": container["state"]["waiting"]}}
                   for container in status.get(key) or () if (container.get("state") or {}).get("waiting")]
        if waiting:
            kept[key] = waiting
    return {(namespace, labels[LABEL_TRAININGJOB]): {"metadata": _trimmed_metadata(body.get("metadata") or {}),
                                                     "status": kept}}


def job_of(index: Mapping[tuple[str, str], Iterable[dict]], namespace: str, name: str) -> dict | None:
    """The Job of that name as last watched, or None when the watch has not seen one (not made, gone, or made
    since the last event: the caller reads it when it must know)."""
    found = list(index.get((namespace, name), ()))
    # Two entries only for an instant: a Job deleted and made again under its name, events not all handled yet.
    return max(found, key=lambda job: job["metadata"].get("creationTimestamp") or "") if found else None


def rank_pods_of(index: Mapping[tuple[str, str], Iterable[dict]], namespace: str, trainingjob: str) -> list[dict]:
    return list(index.get((namespace, trainingjob), ()))
