"""Which of a Dataset's two timers runs: the 5 s one while something changes by itself, the 30 s one at rest."""

from __future__ import annotations

import pytest

from ringfeed_operator.handlers.dataset import at_rest, in_progress

HANDLED = {"observedGeneration": 2, "keyspace": "rf_flowers"}
INGEST = {"source": {"path": "/data/flowers"}}
CACHE = {"alluxio": {"workers": 1}}


def dataset(spec: dict, status: dict) -> dict:
    return {"spec": spec, "status": status, "meta": {"generation": 2},
            "body": {"spec": spec, "status": status, "metadata": {"generation": 2}}}


@pytest.mark.parametrize(("spec", "status"), [
    ({}, {}),  # just created
    ({}, {"observedGeneration": 1, "keyspace": "rf_flowers"}),  # a spec change not handled yet
    ({}, {"observedGeneration": 2}),  # handled, but its tables not made (the ring did not answer)
    ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2"}}),  # ingest running
    ({"cache": CACHE}, HANDLED),  # a cache tier, even once Ready
], ids=["new", "generation-not-handled", "no-tables", "ingesting", "cache-tier"])
def test_a_dataset_with_something_in_progress_is_followed_every_poll(spec, status):
    kwargs = dataset(spec, status)
    assert in_progress(**kwargs) and not at_rest(**kwargs)


@pytest.mark.parametrize(("spec", "status"), [
    ({}, HANDLED),  # no ingest: its tables are written by someone else
    ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2", "completedAt": "2026-11-28T04:00:00Z"}}),
    ({"ingest": INGEST}, {**HANDLED, "ingest": {"jobName": "flowers-ingest-2", "failedAt": "2026-11-28T04:00:00Z"}}),
    ({"cache": {}}, HANDLED),  # spec.cache without alluxio is no cache tier
], ids=["no-ingest", "ingested", "ingest-failed", "empty-cache"])
def test_a_dataset_at_rest_is_looked_at_on_the_slow_timer(spec, status):
    kwargs = dataset(spec, status)
    assert at_rest(**kwargs) and not in_progress(**kwargs)
