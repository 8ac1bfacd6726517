"""What the watches keep of the operator's Jobs and rank Pods: the fields the handlers read, keyed as they look them
up."""

from __future__ import annotations

from ringfeed_operator.builders.trainingjob import pod_ready, running_pods
from ringfeed_operator.status import job_state, pod_not_starting
from ringfeed_operator.watched import job_entry, job_of, rank_pod_entry, rank_pods_of

UID = "4b1c"


def job(name: str = "train", created: str = "2026-11-27T10:00:00Z", **status) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "uid": UID, "creationTimestamp": created,
                         "labels": {"ringfeed.io/trainingjob": name}, "managedFields": [{"manager": "kube"}] * 20},
            "spec": {"completions": 2, "suspend": False, "template": {"spec": {"containers": [{"name": "x"}] * 3}}},
            "status": status}


def pod(rank: int, phase: str = "Running", ready: bool = True) -> dict:
    return {"metadata": {"name": f"train-{rank}", "namespace": "ml", "uid": f"p{rank}",
                         "labels": {"ringfeed.io/trainingjob": "train", "batch.kubernetes.io/controller-uid": UID},
                         "annotations": {"a": "b" * 1000}},
            "spec": {"containers": [{"name": "trainer", "env": [{"name": "X", "value": "y" * 1000}]}]},
            "status": {"phase": phase, "podIP": f"10.0.0.{rank}", "containerStatuses": [{"name": "trainer"}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def index_of(entries: list[dict]) -> dict:
    """As kopf keeps an index: key → the values of every object under it."""
    index: dict = {}
    for entry in entries:
        for key, value in entry.items():
            index.setdefault(key, []).append(value)
    return index


def test_a_job_is_kept_by_name_with_what_its_state_suspension_and_size_need():
    body = job(conditions=[{"type": "Complete", "status": "True"}], startTime="2026-11-27T10:00:01Z")
    [(key, kept)] = job_entry(namespace="ml", name="train", body=body).items()
    assert key == ("ml", "train")
    assert kept["spec"] == {"completions": 2, "suspend": False}
    assert "managedFields" not in kept["metadata"] and kept["metadata"]["uid"] == UID
    assert job_state(kept) == job_state(body) == "succeeded"


def test_the_newest_of_a_jobs_name_is_the_job():
    old = job_entry(namespace="ml", name="train", body=job(created="2026-11-27T10:00:00Z"))
    new = job_entry(namespace="ml", name="train", body=job(created="2026-11-27T11:00:00Z"))
    index = index_of([old, new])
    assert job_of(index, "ml", "train")["metadata"]["creationTimestamp"] == "2026-11-27T11:00:00Z"
    assert job_of(index, "ml", "other") is None


def test_rank_pods_are_kept_by_trainingjob_with_what_the_timer_reads():
    pods = [pod(0), pod(1, ready=False), pod(2, phase="Pending")]
    index = index_of([rank_pod_entry(namespace="ml", labels=p["metadata"]["labels"], body=p) for p in pods])
    kept = rank_pods_of(index, "ml", "train")
    assert all(set(p) == {"metadata", "status"} and "annotations" not in p["metadata"] for p in kept)
    kept_job = job_entry(namespace="ml", name="train", body=job())[("ml", "train")]
    running = running_pods(kept, kept_job)
    assert [p["metadata"]["name"] for p in running] == ["train-0", "train-1"]
    assert [pod_ready(p) for p in running] == [True, False]
    # The same Pods as from the full objects the API gives.
    assert [p["metadata"]["name"] for p in running_pods(pods, job())] == [p["metadata"]["name"] for p in running]
    assert rank_pods_of(index, "other", "train") == []


def test_a_rank_pod_waiting_to_start_keeps_why_and_nothing_else_of_its_containers():
    waiting = pod(3, phase="Pending")
    waiting["status"]["containerStatuses"] = [
        {"name": "trainer", "image": "x", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}},
        {"name": "other", "image": "y", "state": {"running": {"startedAt": "2026-12-07T10:00:00Z"}}}]
    [(_, kept)] = rank_pod_entry(namespace="ml", labels=waiting["metadata"]["labels"], body=waiting).items()
    assert kept["status"]["containerStatuses"] == [
        {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "back-off"}}}]
    assert pod_not_starting([kept]) == "Pod train-3: container trainer: ImagePullBackOff: back-off"
    [(_, running)] = rank_pod_entry(namespace="ml", labels=pod(0)["metadata"]["labels"], body=pod(0)).items()
    assert "containerStatuses" not in running["status"]
