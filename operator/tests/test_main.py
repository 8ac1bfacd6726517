"""The kopf registrations keep the handler ids an operator already running in a cluster recorded: kopf stores a
change handler's progress in annotations under its id, passes an index under its id, and the reconcile metrics are
labelled with it. A renamed handler would make an upgraded operator handle every object again."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from prometheus_client import CollectorRegistry

from ringfeed_operator import main
from ringfeed_operator.config import Config
from ringfeed_operator.context import Context
from ringfeed_operator.metrics import Metrics, counted

# (registry, id, reason or activity, field, interval, plural, `when` filter) of every registration.
REGISTRATIONS = {
    ("activities", "configure", "startup", None, None, None, None),
    ("activities", "login", "authentication", None, None, None, None),
    ("activities", "start_acceptor", "startup", None, None, None, None),
    ("activities", "close_connections", "cleanup", None, None, None, None),
    ("indexing", "jobs_by_name", None, None, None, "jobs", None),
    ("indexing", "rank_pods", None, None, None, "pods", None),
    ("indexing", "cache_namespaces", None, None, None, "namespaces", None),
    ("indexing", "datasets_by_keyspace", None, None, None, "datasets", None),
    ("indexing", "dataset_specs", None, None, None, "datasets", None),
    ("indexing", "splits_by_dataset", None, None, None, "splits", None),
    ("spawning", "watch_dataset", None, None, 5.0, "datasets", "in_progress"),
    ("spawning", "refresh_dataset", None, None, 30.0, "datasets", None),
    ("spawning", "watch_split", None, None, 5.0, "splits", "job_in_progress"),
    ("spawning", "watch_split_dataset", None, None, 30.0, "splits", "computed"),
    ("changing", "reconcile_dataset", None, None, None, "datasets", None),   # resume
    ("changing", "reconcile_dataset", "create", None, None, "datasets", None),
    ("changing", "reconcile_dataset/spec", "update", ("spec",), None, "datasets", None),
    ("changing", "delete_dataset", "delete", None, None, "datasets", None),
    ("changing", "reconcile_split", None, None, None, "splits", None),   # resume
    ("changing", "reconcile_split", "create", None, None, "splits", None),
    ("changing", "delete_split", "delete", None, None, "splits", None),
    ("spawning", "watch_trainingjob", None, None, 5.0, "trainingjobs", "in_progress"),
    ("changing", "reconcile_trainingjob", None, None, None, "trainingjobs", None),   # resume
    ("changing", "reconcile_trainingjob", "create", None, None, "trainingjobs", None),
    ("changing", "reconcile_trainingjob/spec", "update", ("spec",), None, "trainingjobs", None),
    ("indexing", "datasets_by_ring", None, None, None, "datasets", None),
    ("spawning", "watch_ring", None, None, 5.0, "rings", None),
    ("spawning", "renew_ring_certificates", None, None, 60.0, "rings", None),
    ("changing", "reconcile_ring", None, None, None, "rings", None),   # resume
    ("changing", "reconcile_ring", "create", None, None, "rings", None),
    ("changing", "reconcile_ring/spec", "update", ("spec",), None, "rings", None),
    ("changing", "delete_ring", "delete", None, None, "rings", None),
}


def registrations() -> set[tuple]:
    registry = kopf.get_default_registry()
    found = set()
    for kind in ("activities", "indexing", "watching", "spawning", "changing"):
        for handler in getattr(registry, f"_{kind}").get_all_handlers():
            if handler.id == "login_via_client":  # kopf's own
                continue
            selector = getattr(handler, "selector", None)
            when = getattr(handler, "when", None)
            found.add((kind, handler.id, getattr(handler, "activity", None) or getattr(handler, "reason", None),
                       getattr(handler, "field", None), getattr(handler, "interval", None),
                       selector.any_name if selector else None, when.__name__ if when else None))
    return {(kind, id_, str(reason.value) if hasattr(reason, "value") else reason, *rest)
            for kind, id_, reason, *rest in found}


def test_handler_ids_and_registrations_are_those_of_the_running_operators():
    assert main.ANNOTATION_PREFIX == "operator.ringfeed.io" and main.FINALIZER == "ringfeed.io/protect"
    assert registrations() == REGISTRATIONS


def test_the_operators_jobs_and_rank_pods_are_watched_through_a_label_selector():
    settings = kopf.OperatorSettings()
    main.configure(settings=settings)
    selectors = {(s.group, s.version, s.any_name): value for s, value in settings.watching.label_selectors.items()}
    assert selectors == {("batch", "v1", "jobs"): "app.kubernetes.io/managed-by=ringfeed-operator",
                         ("", "v1", "pods"): "ringfeed.io/trainingjob"}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_handler_runs_are_counted_by_handler_id_and_result(asynchronous):
    def outcome(fail: type[Exception] | None) -> None:
        if fail:
            raise fail("no")

    if asynchronous:
        @counted("Dataset")
        async def reconcile_dataset(fail: type[Exception] | None, **_) -> None:
            outcome(fail)
    else:
        @counted("Dataset")
        def reconcile_dataset(fail: type[Exception] | None, **_) -> None:
            outcome(fail)

    def run(**kwargs) -> None:
        result = reconcile_dataset(**kwargs)
        if asynchronous:
            asyncio.run(result)

    registry = CollectorRegistry()
    memo = Context(config=Config(), kube=None, rings=None, metrics=Metrics(registry))
    run(fail=None, memo=memo)
    for error in (kopf.TemporaryError, ValueError):
        with pytest.raises(error):
            run(fail=error, memo=memo)
    for result in ("ok", "retry", "error"):
        assert registry.get_sample_value("ringfeed_operator_reconciles_total", {
            "kind": "Dataset", "handler": "reconcile_dataset", "result": result}) == 1


def test_a_registration_hands_kopfs_kwargs_to_its_kinds_handler():
    """An invalid spec ends reconcile_dataset before any API or ring call: Ready=False InvalidSpec, counted."""
    spec = {"storage": {"external": {"contactPoints": ["ring"]}},
            "schema": {"naturalKeys": [{"name": "score", "type": "double"}], "encoding": {"kind": "png"}}}
    registry = CollectorRegistry()
    memo = Context(config=Config(), kube=None, rings=None, metrics=Metrics(registry))
    patch = kopf.Patch()
    with pytest.raises(kopf.PermanentError, match="natural key 'score'"):
        main.reconcile_dataset(name="slides", namespace="ml", spec=spec, status={},
                               meta={"generation": 2, "creationTimestamp": "2026-11-22T10:00:00Z"}, body={},
                               memo=memo, patch=patch, splits_by_dataset={}, datasets_by_keyspace={},
                               cache_namespaces={}, jobs_by_name={}, logger=None)
    [ready] = patch.status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert patch.status["observedGeneration"] == 2
    assert registry.get_sample_value("ringfeed_operator_reconciles_total",
                                     {"kind": "Dataset", "handler": "reconcile_dataset", "result": "error"}) == 1


def test_a_ring_keeps_one_held_reason_series_and_its_gauges_go_with_it():
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    held = metrics.ring_scaling_held

    def reasons() -> dict[str, float | None]:
        return {reason: registry.get_sample_value("ringfeed_ring_scaling_held",
                                                  {"namespace": "ml", "ring": "images", "reason": reason})
                for reason in ("Cooldown", "CassOperatorBusy")}

    metrics.set_ring_series(held, "ml", "images", "Cooldown")
    assert reasons() == {"Cooldown": 1, "CassOperatorBusy": None}
    metrics.set_ring_series(held, "ml", "images", "CassOperatorBusy")
    assert reasons() == {"Cooldown": None, "CassOperatorBusy": 1}
    metrics.set_ring_series(held, "ml", "images", None)
    assert reasons() == {"Cooldown": None, "CassOperatorBusy": None}

    metrics.ring_nodes.labels("ml", "images").set(2)
    metrics.set_ring_series(metrics.ring_autoscaler_value, "ml", "images", "ReadsPerSecondPerNode", 1234)
    metrics.set_ring_series(held, "ml", "images", "Cooldown")
    metrics.ring_steps.labels("ml", "images", "up").inc()
    metrics.forget_ring("ml", "images")
    names = {s.name for family in registry.collect() for s in family.samples
             if s.labels.get("ring") == "images" and not s.name.endswith("_created")}
    assert names == {"ringfeed_ring_steps_total"}  # the counter stays: it counts what happened


def test_the_indexes_take_every_kwarg_kopf_gives():
    """kopf hands an indexer all of its kwargs (param, logger, memo, the other indexes...), not only those it reads."""
    body = {"metadata": {"name": "train-0", "namespace": "ml", "labels": {"ringfeed.io/trainingjob": "train"},
                         "creationTimestamp": "2026-11-27T10:00:00Z"},
            "spec": {}, "status": {"phase": "Running"}}
    extra = {"param": None, "logger": None, "memo": None, "resource": None, "patch": kopf.Patch(), "uid": "u",
             "meta": body["metadata"], "spec": {}, "status": body["status"], "annotations": {}, "body": body}
    kwargs = {**extra, "namespace": "ml", "name": "train-0", "labels": body["metadata"]["labels"]}
    assert list(asyncio.run(main.rank_pods(**kwargs))) == [("ml", "train")]
    assert list(asyncio.run(main.jobs_by_name(**kwargs))) == [("ml", "train-0")]
    datasets = {**kwargs, "spec": {"storage": {"external": {"contactPoints": ["ring"]}}}}
    for index in (main.datasets_by_keyspace, main.dataset_specs, main.datasets_by_ring, main.splits_by_dataset,
                  main.cache_namespaces):
        asyncio.run(index(**datasets))
