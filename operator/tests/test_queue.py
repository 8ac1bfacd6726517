"""Kueue admission of a TrainingJob's Job (spec.queueName): the Job handed to Kueue suspended and labelled, and the
Admitted condition from what Kueue's Workload says. Pure."""

from __future__ import annotations

import pytest
from test_trainingjob_builders import job_of, trainingjob

from ringfeed_operator.builders.queue import QUEUE_LABEL, admission


@pytest.mark.parametrize("suspend", [False, True])
def test_a_queued_job_is_made_suspended_with_kueues_label_whatever_spec_suspend_says(suspend):
    job = job_of(trainingjob(queueName="gpu-team", suspend=suspend))
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][QUEUE_LABEL] == "gpu-team"
    # Only the Job carries it: Kueue manages Jobs, and a labelled Pod would be a Pod workload of its own.
    assert QUEUE_LABEL not in job["spec"]["template"]["metadata"]["labels"]


def test_without_a_queue_the_job_has_no_kueue_label_and_starts_unless_suspended():
    job = job_of(trainingjob())
    assert QUEUE_LABEL not in job["metadata"]["labels"] and job["spec"]["suspend"] is False


def workload(**conditions: tuple[str, str]) -> dict:
    return {"status": {"conditions": [{"type": kind, "status": status, "message": message}
                                      for kind, (status, message) in conditions.items()]}}


def suspended_job(suspend: bool = True) -> dict:
    return {"spec": {"suspend": suspend}, "metadata": {"uid": "u"}}


@pytest.mark.parametrize("job,workloads,expected", [
    (suspended_job(False), None, (True, "Admitted", "admitted by Kueue from LocalQueue q")),
    (suspended_job(), None, (False, "KueueNotInstalled", "waiting for admission from LocalQueue q, but the cluster "
                                                         "serves no Kueue Workloads: is Kueue installed?")),
    (suspended_job(), [], (False, "Queued", "waiting for Kueue to take the Job into LocalQueue q")),
    (suspended_job(), [workload(QuotaReserved=("False", "couldn't assign flavors to pod set main: insufficient "
                                                         "unused quota for cpu in flavor default, 1 more needed"))],
     (False, "Queued", "waiting in LocalQueue q: couldn't assign flavors to pod set main: insufficient unused quota "
                       "for cpu in flavor default, 1 more needed")),
    (suspended_job(), [workload()], (False, "Queued", "waiting in LocalQueue q")),
    (suspended_job(), [workload(QuotaReserved=("True", "reserved"))], (False, "Queued", "waiting in LocalQueue q")),
    (suspended_job(), [workload(Evicted=("True", "Preempted to accommodate a higher priority Workload"),
                                QuotaReserved=("False", ""))],
     (False, "Evicted", "evicted by Kueue, waiting in LocalQueue q again: Preempted to accommodate a higher priority "
                        "Workload")),
    (suspended_job(), [workload(Preempted=("True", ""))],
     (False, "Preempted", "preempted by Kueue, waiting in LocalQueue q again")),
], ids=["admitted", "no-kueue", "no-workload-yet", "no-quota", "no-conditions-yet", "quota-reserved-not-started",
        "evicted", "preempted-without-message"])
def test_the_admitted_condition_says_why_a_queued_job_waits(job, workloads, expected):
    assert admission("q", job, workloads) == expected
