"""Conditions, the one place they are set and read: metav1.Condition bookkeeping for every Ringfeed status, the
state of a Job from its conditions, and the API server's times. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, MutableMapping


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp(text: str) -> dt.datetime:
    """An RFC 3339 time of the API server."""
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class Conditions:
    """The conditions of one object's status, changed in place and written back as a list.

    ``lastTransitionTime`` moves only when a condition's status changes; reason, message and observedGeneration
    follow every ``set``.
    """

    def __init__(self, current: list[dict] | None, generation: int):
        self._items = {c["type"]: dict(c) for c in current or ()}
        self._generation = generation

    def set(self, type_: str, status: bool | None, reason: str, message: str = "") -> None:
        text = "Unknown" if status is None else ("True" if status else "False")
        previous = self._items.get(type_)
        if previous is not None and previous.get("status") == text:
            since = previous["lastTransitionTime"]  # moves only when the status flips
        else:
            since = now_rfc3339()
        self._items[type_] = {
            "type": type_, "status": text, "reason": reason, "message": message[:32768],
            "observedGeneration": self._generation, "lastTransitionTime": since,
        }

    def remove(self, type_: str) -> None:
        """Drop a condition that no longer applies (a feature the spec turned off)."""
        self._items.pop(type_, None)

    def get(self, type_: str) -> dict | None:
        return self._items.get(type_)

    def is_true(self, type_: str) -> bool:
        return (self._items.get(type_) or {}).get("status") == "True"

    def reason(self, type_: str) -> str | None:
        return (self._items.get(type_) or {}).get("reason")

    def as_list(self) -> list[dict]:
        return sorted(self._items.values(), key=lambda c: c["type"])


def drop_unchanged_status(patch: MutableMapping, status: Mapping, incidental: Collection[str] = ()) -> None:
    """Leave out of a handler's patch the status fields it sets to what they are already, and the status itself
    when nothing is left. kopf sends any status patch it is given, and the apiserver answers an unchanged one
    without writing it but as a request all the same: a timer that finds nothing new would cost a PATCH per object
    per tick (make bench-operator-scale: a fifth of the operator's requests at rest). `incidental` fields (when the
    figures were read) are sent only with a change of another field."""
    fields = patch.get("status")
    if not fields:
        return
    for key in [key for key, value in fields.items() if status.get(key) == value]:
        del fields[key]
    if set(fields) <= set(incidental):
        del patch["status"]


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


# A container waits with these while it is being started; any other reason (ImagePullBackOff, ErrImagePull,
# CreateContainerConfigError, CrashLoopBackOff, …) keeps it from starting until someone acts.
STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})


def pod_not_starting(pods: list[dict]) -> str | None:
    """Why the newest of a Job's Pods cannot start ("Pod P: Unschedulable: 0/3 nodes are available: …"), or None
    while it runs or is being started."""
    if not pods:
        return None
    pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    name, status = pod["metadata"]["name"], pod.get("status") or {}
    if status.get("phase") != "Pending":
        return None
    for condition in status.get("conditions") or ():
        if condition["type"] == "PodScheduled" and condition.get("status") == "False":
            return _joined(f"Pod {name}", condition.get("reason") or "Unschedulable", condition.get("message"))
    for container in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in STARTING_REASONS:
            return _joined(f"Pod {name}", f"container {container['name']}", waiting["reason"], waiting.get("message"))
    return None


# A Pod scheduled this long ago whose containers are still being created waits for something the kubelet reports only
# in its events (a volume that cannot be mounted, a sandbox that cannot be made). Image pulls look the same, with no
# Warning: ContainerCreating alone is not an error.
SLOW_CREATION_S = 30


def pods_created_slowly(pods: list[dict], now: dt.datetime) -> list[str]:
    """The Pending Pods, not being deleted, scheduled more than SLOW_CREATION_S before `now` whose containers all
    still wait to be created."""
    slow = []
    for pod in pods:
        status = pod.get("status") or {}
        if status.get("phase") != "Pending" or pod["metadata"].get("deletionTimestamp"):
            continue
        scheduled = next((c.get("lastTransitionTime") for c in status.get("conditions") or ()
                          if c["type"] == "PodScheduled" and c.get("status") == "True"), None)
        if not scheduled or (now - timestamp(scheduled)).total_seconds() < SLOW_CREATION_S:
            continue
        containers = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
        reasons = {((c.get("state") or {}).get("waiting") or {}).get("reason") for c in containers}
        if reasons <= STARTING_REASONS:  # no statuses yet counts too: the sandbox is not made
            slow.append(pod["metadata"]["name"])
    return slow


def warning_summary(pod: str, reason: str, message: str | None) -> str:
    """How a Pod's Warning event reads in a condition: "Pod P: FailedMount: MountVolume.SetUp failed for …"."""
    return _joined(f"Pod {pod}", reason, message)


def _joined(*parts: str | None) -> str:
    return ": ".join(part for part in parts if part)
