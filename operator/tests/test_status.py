"""status.py: the conditions of Ringfeed's objects and the state of a Job, read from its conditions. Pure."""

from __future__ import annotations

import datetime as dt

import pytest

from ringfeed_operator.status import (
    SLOW_CREATION_S,
    Conditions,
    drop_unchanged_status,
    job_state,
    pod_not_starting,
    pods_created_slowly,
)


def test_conditions_keep_transition_time_until_the_status_changes():
    old = "2000-01-01T00:00:00Z"
    conditions = Conditions([{"type": "Ready", "status": "False", "reason": "Ingesting", "message": "waiting",
                              "observedGeneration": 1, "lastTransitionTime": old}], generation=2)
    conditions.set("Ready", False, "Ingesting", "still waiting")
    assert conditions.get("Ready")["lastTransitionTime"] == old
    assert conditions.get("Ready")["observedGeneration"] == 2 and conditions.get("Ready")["message"] == "still waiting"
    conditions.set("Ready", True, "Ready", "done")
    assert conditions.is_true("Ready") and conditions.reason("Ready") == "Ready"
    assert conditions.get("Ready")["lastTransitionTime"] > old
    conditions.set("Degraded", None, "Unknown")
    assert [c["type"] for c in conditions.as_list()] == ["Degraded", "Ready"]
    assert conditions.get("Degraded")["status"] == "Unknown"



def test_a_status_patch_keeps_only_what_changes():
    status = {"samples": 5, "splits": 2, "conditions": [{"type": "Ready", "status": "True"}], "cache": None}
    patch = {"metadata": {"annotations": {"a": "1"}},
             "status": {"samples": 5, "splits": 3, "conditions": [{"type": "Ready", "status": "True"}],
                        "cache": None, "ingest": None, "keyspace": "k"}}
    drop_unchanged_status(patch, status)
    # A field removed that is absent is unchanged too; the rest of the patch is left alone.
    assert patch == {"metadata": {"annotations": {"a": "1"}}, "status": {"splits": 3, "keyspace": "k"}}


def test_a_status_patch_that_changes_nothing_goes():
    status = {"samples": 5, "conditions": [{"type": "Ready", "status": "True"}]}
    patch = {"status": {"samples": 5, "conditions": [{"type": "Ready", "status": "True"}]}}
    drop_unchanged_status(patch, status)
    assert patch == {}
    untouched = {"spec": {"x": 1}}
    drop_unchanged_status(untouched, status)
    assert untouched == {"spec": {"x": 1}}


def job(*conditions: tuple[str, str]) -> dict:
    return {"status": {"conditions": [{"type": type_, "status": status} for type_, status in conditions]}}


@pytest.mark.parametrize("observed,state", [
    (None, "missing"),
    ({"status": {}}, "running"),
    (job(("Suspended", "False")), "running"),
    (job(("Complete", "True")), "succeeded"),
    (job(("SuccessCriteriaMet", "True")), "succeeded"),
    (job(("FailureTarget", "True")), "failed"),   # the Job controller's first word: its Pods are still stopping
    (job(("Failed", "True")), "failed"),
    (job(("Failed", "False"), ("Complete", "True")), "succeeded"),
], ids=["missing", "no-conditions", "suspended-false", "complete", "success-criteria", "failure-target", "failed",
        "false-is-ignored"])
def test_job_state_from_its_conditions(observed: dict | None, state: str):
    assert job_state(observed) == state


def test_an_incidental_field_goes_out_only_with_a_change():
    status = {"samplesDelivered": 40, "observedAt": "2026-11-27T10:00:00Z"}
    idle = {"status": {"samplesDelivered": 40, "observedAt": "2026-11-27T10:00:05Z"}}
    drop_unchanged_status(idle, status, incidental=("observedAt",))
    assert idle == {}
    moved = {"status": {"samplesDelivered": 48, "observedAt": "2026-11-27T10:00:05Z"}}
    drop_unchanged_status(moved, status, incidental=("observedAt",))
    assert moved == {"status": {"samplesDelivered": 48, "observedAt": "2026-11-27T10:00:05Z"}}


def _pod(name: str, created: str, phase: str = "Pending", conditions=(), containers=(), init_containers=()) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created},
            "status": {"phase": phase, "conditions": list(conditions), "containerStatuses": list(containers),
                       "initContainerStatuses": list(init_containers)}}


def _waiting(container: str, reason: str, message: str = "") -> dict:
    return {"name": container, "state": {"waiting": {"reason": reason, "message": message}}}


UNSCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/3 nodes are available: 3 Insufficient cpu."}


@pytest.mark.parametrize(("pods", "expected"), [
    ([], None),
    ([_pod("p", "2026-12-07T10:00:00Z", conditions=[UNSCHEDULED])],
     "Pod p: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."),
    ([_pod("p", "2026-12-07T10:00:00Z", containers=[_waiting("ingest", "ImagePullBackOff", "Back-off pulling")])],
     "Pod p: container ingest: ImagePullBackOff: Back-off pulling"),
    ([_pod("p", "2026-12-07T10:00:00Z", init_containers=[_waiting("tls", "CreateContainerConfigError")])],
     "Pod p: container tls: CreateContainerConfigError"),
    ([_pod("p", "2026-12-07T10:00:00Z", containers=[_waiting("ingest", "ContainerCreating")])], None),
    ([_pod("p", "2026-12-07T10:00:00Z", init_containers=[_waiting("tls", "PodInitializing")])], None),
    ([_pod("p", "2026-12-07T10:00:00Z", phase="Running")], None),
    ([_pod("p", "2026-12-07T10:00:00Z", phase="Failed")], None),
    # the newest Pod speaks for the Job: an old one's reason is history
    ([_pod("old", "2026-12-07T10:00:00Z", conditions=[UNSCHEDULED]), _pod("new", "2026-12-07T10:05:00Z",
                                                                           phase="Running")], None),
    ([_pod("old", "2026-12-07T10:00:00Z", phase="Failed"), _pod("new", "2026-12-07T10:05:00Z",
                                                                 conditions=[UNSCHEDULED])],
     "Pod new: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."),
], ids=["no-pods", "unschedulable", "image-pull", "init-config", "creating", "initializing", "running", "failed",
        "newest-runs", "newest-unschedulable"])
def test_a_pod_that_cannot_start_is_named_with_its_reason(pods, expected):
    assert pod_not_starting(pods) == expected


NOW = dt.datetime(2026, 12, 7, 10, 10, tzinfo=dt.UTC)


def _scheduled(seconds_ago: float) -> dict:
    at = (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}


LONG_AGO = SLOW_CREATION_S + 5


@pytest.mark.parametrize(("pods", "expected"), [
    ([], []),
    ([_pod("p", "", conditions=[_scheduled(LONG_AGO)], containers=[_waiting("ingest", "ContainerCreating")])],
     ["p"]),
    ([_pod("p", "", conditions=[_scheduled(LONG_AGO)], init_containers=[_waiting("tls", "PodInitializing")],
           containers=[_waiting("trainer", "PodInitializing")])], ["p"]),
    ([_pod("p", "", conditions=[_scheduled(LONG_AGO)])], ["p"]),  # no statuses yet: its sandbox is not made
    ([_pod("p", "", conditions=[_scheduled(SLOW_CREATION_S - 5)], containers=[_waiting("i", "ContainerCreating")])],
     []),
    ([_pod("p", "", conditions=[UNSCHEDULED])], []),
    ([_pod("p", "", conditions=[_scheduled(LONG_AGO)], containers=[_waiting("i", "ImagePullBackOff")])], []),
    ([_pod("p", "", conditions=[_scheduled(LONG_AGO)], init_containers=[_waiting("tls", "PodInitializing")],
           containers=[_waiting("trainer", "CrashLoopBackOff")])], []),
    ([_pod("p", "", phase="Running", conditions=[_scheduled(LONG_AGO)])], []),
    ([{**_pod("p", "", conditions=[_scheduled(LONG_AGO)]), "metadata": {"name": "p", "deletionTimestamp": "x"}}],
     []),
    ([_pod("a", "", conditions=[_scheduled(LONG_AGO)]), _pod("b", "", phase="Running"),
      _pod("c", "", conditions=[_scheduled(LONG_AGO)], containers=[_waiting("i", "ContainerCreating")])],
     ["a", "c"]),
], ids=["no-pods", "creating", "initializing", "no-statuses", "recently-scheduled", "unscheduled", "other-reason",
        "one-container-failing", "running", "deleted", "several"])
def test_pods_whose_containers_are_not_created_long_after_scheduling(pods, expected):
    assert pods_created_slowly(pods, NOW) == expected
