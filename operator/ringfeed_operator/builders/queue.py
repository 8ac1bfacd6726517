"""Kueue admission of a TrainingJob (spec.queueName): the label that hands its Job to Kueue, and the Admitted
condition read from Kueue's Workload of that Job. Pure.

Kueue owns the Job's spec.suspend: the Job is made suspended, Kueue un-suspends it when the queue admits it and
suspends it again when it preempts it. The operator never writes that field of a queued Job; suspending the
TrainingJob deletes its Job instead, which takes the Workload and its quota with it (Kueue would admit a suspended
Job's Workload again at once).
"""

from __future__ import annotations

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # on the Workload Kueue makes for a Job
# v1beta1: served by every Kueue release since 0.3 (v1beta2, from 0.15 on, keeps the same status conditions).
WORKLOADS = ("kueue.x-k8s.io", "v1beta1", "workloads")


def queue_name(spec: dict) -> str | None:
    return spec.get("queueName") or None


def queue_labels(spec: dict) -> dict[str, str]:
    """The Job's label that Kueue manages it by (none without spec.queueName)."""
    queue = queue_name(spec)
    return {QUEUE_LABEL: queue} if queue else {}


def admission(queue: str, job: dict, workloads: list[dict] | None) -> tuple[bool, str, str]:
    """(admitted, reason, message) of the TrainingJob's Admitted condition. `workloads`: Kueue's Workloads of the
    Job (None: Kueue's API is not served)."""
    if not job["spec"].get("suspend"):
        return True, "Admitted", f"admitted by Kueue from LocalQueue {queue}"
    if workloads is None:
        return False, "KueueNotInstalled", (f"waiting for admission from LocalQueue {queue}, but the cluster serves no "
                                            "Kueue Workloads: is Kueue installed?")
    if not workloads:
        return False, "Queued", f"waiting for Kueue to take the Job into LocalQueue {queue}"
    conditions = {c["type"]: c for c in (workloads[0].get("status") or {}).get("conditions") or ()}
    for kind in ("Evicted", "Preempted"):
        if conditions.get(kind, {}).get("status") == "True":
            return False, kind, _with_detail(f"{kind.lower()} by Kueue, waiting in LocalQueue {queue} again",
                                             conditions[kind].get("message"))
    said = conditions.get("QuotaReserved") or {}
    return False, "Queued", _with_detail(f"waiting in LocalQueue {queue}",
                                         said.get("message") if said.get("status") == "False" else None)


def _with_detail(message: str, detail: str | None) -> str:
    return f"{message}: {detail}" if detail else message
