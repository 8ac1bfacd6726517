"""A Dataset's two timers: the 5 s one (filtered) while something changes by itself, the 30 s one (never stopped)
at rest, and in progress when the 5 s one is late (kopf lost it)."""

from __future__ import annotations

import time

import pytest

from ringfeed_operator.config import Config
from ringfeed_operator.context import Context
from ringfeed_operator.handlers import dataset
from ringfeed_operator.handlers.dataset import FAST_LOOK_LATE_S, in_progress

HANDLED = {"observedGeneration": 2, "keyspace": "rf_flowers"}
INGEST = {"source": {"path": "/data/flowers"}}
CACHE = {"alluxio": {"workers": 1}}
ENDED = "2026-11-28T04:00:00Z"


def dataset_kwargs(spec: dict, status: dict) -> dict:
    return {"spec": spec, "status": status, "meta": {"generation": 2},
            "body": {"spec": spec, "status": status, "metadata": {"generation": 2, "uid": "u-1"}}}


def ready(reason: str) -> dict:
    return {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "",
                            "lastTransitionTime": ENDED, "observedGeneration": 2}]}


IN_PROGRESS = {
    "new": ({}, {}),
    "generation-not-handled": ({}, {"observedGeneration": 1, "keyspace": "rf_flowers"}),
    "no-tables": ({}, {"observedGeneration": 2}),  # handled, but the ring did not answer
    "ingest-job-not-recorded-yet": ({"ingest": INGEST}, HANDLED),
    "ingesting": ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2"}}),
    "cache-tier": ({"cache": CACHE}, HANDLED),  # even once Ready
}
AT_REST = {
    "no-ingest": ({}, HANDLED),  # its tables are written by someone else
    "ingested": ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2", "completedAt": ENDED}}),
    "ingest-failed": ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2", "failedAt": ENDED}}),
    "empty-cache": ({"cache": {}}, HANDLED),  # spec.cache without alluxio is no cache tier
    "invalid-spec": ({"ingest": INGEST}, {"observedGeneration": 2, **ready("InvalidSpec")}),
    "keyspace-in-use": ({}, {**HANDLED, **ready("KeyspaceInUse")}),
}


@pytest.mark.parametrize(("spec", "status"), IN_PROGRESS.values(), ids=IN_PROGRESS.keys())
def test_a_dataset_with_something_in_progress_is_followed_every_poll(spec, status):
    assert in_progress(**dataset_kwargs(spec, status))


@pytest.mark.parametrize(("spec", "status"), AT_REST.values(), ids=AT_REST.keys())
def test_a_dataset_at_rest_or_waiting_for_its_spec_is_not(spec, status):
    assert not in_progress(**dataset_kwargs(spec, status))


@pytest.fixture()
def looks(monkeypatch) -> tuple[Context, list]:
    looked: list = []
    monkeypatch.setattr(dataset, "watch", lambda **kwargs: looked.append(kwargs["status"]))
    return Context(config=Config(), kube=None, rings=None, metrics=None), looked


@pytest.mark.parametrize(("state", "last_fast_look_s", "looks_too"), [
    ("no-ingest", None, True),  # at rest: the slow timer is its only look
    ("no-ingest", 1.0, True),
    ("ingesting", 1.0, False),  # followed by the 5 s timer
    ("ingesting", FAST_LOOK_LATE_S + 1, True),  # the 5 s timer is late: lost
    ("ingesting", None, True),  # never seen by the 5 s timer
])
def test_the_slow_timer_looks_at_what_the_fast_one_does_not(looks, state, last_fast_look_s, looks_too):
    memo, looked = looks
    spec, status = {**IN_PROGRESS, **AT_REST}[state]
    if last_fast_look_s is not None:
        memo.dataset_looks["u-1"] = time.monotonic() - last_fast_look_s
    dataset.refresh(uid="u-1", memo=memo, **dataset_kwargs(spec, status))
    assert looked == ([status] if looks_too else [])


def test_the_fast_timer_records_its_look(looks):
    memo, looked = looks
    spec, status = IN_PROGRESS["ingesting"]
    dataset.follow(uid="u-1", memo=memo, **dataset_kwargs(spec, status))
    assert looked == [status] and time.monotonic() - memo.dataset_looks["u-1"] < 1
