"""The data path's Prometheus families: names, labels and values from a reading, linted by promtool."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ringfeed._native import LoaderMetrics
from ringfeed.metrics import LABELS, PathCollector, PathFigures

from conftest import check_metrics

LABELLED = {"dataset": "slides", "split": "by-patient", "part": "train", "rank": "1", "trainingjob": "resnet"}


def figures(**changes) -> PathFigures:
    native = LoaderMetrics().snapshot()
    native["fetch_latency_seconds"] = ([0.001, 0.01], [3, 7, 8], 0.05)
    native["batch_handoff"] = (10, 4)
    native["batches_ready"] = 2
    return PathFigures(**{"samples": 640, "batches": 10, "bytes": 6_400_000, "trainer_wait_s": 1.5, "retries": 2,
                          "skipped": {"corrupt": 1}, "epoch": 3, "position_samples": 2560, "native": native,
                          "window_bytes": 16 << 20, "in_flight_bytes": 1 << 20, "queued_batches": 1,
                          "trainer_stage": (10, 9), **changes})


def exposition(reading: PathFigures | None) -> str:
    registry = CollectorRegistry()
    registry.register(PathCollector(lambda: [] if reading is None else [({}, reading)], LABELLED))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, s.labels.get("stage") or s.labels.get("reason") or s.labels.get("le")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_family_passes_promtool_and_carries_the_five_labels():
    text = exposition(figures())
    check_metrics(text)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert {k: sample.labels[k] for k in LABELS} == LABELLED, sample


def test_values_come_from_the_reading():
    got = samples(exposition(figures()))
    assert got["ringfeed_loader_samples_total", None] == 640
    assert got["ringfeed_loader_trainer_wait_seconds_total", None] == 1.5
    assert got["ringfeed_loader_skipped_samples_total", "corrupt"] == 1
    assert got["ringfeed_loader_skipped_samples_total", "missing"] == 0
    assert got["ringfeed_loader_prefetch_batches", None] == 3  # 2 in the reader, 1 written for the trainer
    assert got["ringfeed_loader_fetch_latency_seconds_bucket", "0.001"] == 3
    assert got["ringfeed_loader_fetch_latency_seconds_bucket", "+Inf"] == 8
    assert got["ringfeed_loader_fetch_latency_seconds_count", None] == 8
    assert got["ringfeed_loader_fetch_latency_seconds_sum", None] == 0.05
    assert got["ringfeed_loader_stage_requests_total", "batch"] == 10
    assert got["ringfeed_loader_stage_ready_total", "batch"] == 4
    assert got["ringfeed_loader_stage_ready_total", "trainer"] == 9


def test_an_in_process_loader_has_no_trainer_stage_and_nothing_is_exported_before_it_starts():
    got = samples(exposition(figures(trainer_stage=None)))
    assert ("ringfeed_loader_stage_requests_total", "trainer") not in got
    assert ("ringfeed_loader_stage_requests_total", "decode") in got
    assert exposition(None) == ""


def test_a_label_outside_the_bounded_set_is_refused():
    with pytest.raises(ValueError, match="unknown metric labels \\['pod'\\]"):
        PathCollector(lambda: [], {"pod": "x"})
