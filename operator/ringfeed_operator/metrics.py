"""Prometheus metrics of the operator (served on --metrics-port)."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator

import kopf
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

RING = ["namespace", "ring"]
# A scaling step lasts from a minute (a decommission of a small node) to tens of minutes (a bootstrap that streams).
STEP_BUCKETS = (30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
# Around the 5 s an object may wait to be told it was seen (bench-operator-scale's bar).
FIRST_STATUS_BUCKETS = (0.5, 1, 2, 3, 5, 10, 30, 60, 120)


class Metrics:
    """The operator's metrics, registered in one registry (the process's default one when served)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.reconciles = Counter("ringfeed_operator_reconciles_total", "Handler runs by kind, handler and result.",
                                  ["kind", "handler", "result"], registry=registry)
        self.first_statuses = Counter("ringfeed_operator_first_statuses_total",
                                      "New objects' first status (Accepted) by kind and result: written, superseded "
                                      "(a handler wrote first, or the object is gone), failed.", ["kind", "result"],
                                      registry=registry)
        self.first_status_seconds = Histogram("ringfeed_operator_first_status_seconds",
                                              "From an object's creationTimestamp (whole seconds) to its first "
                                              "status written.", ["kind"], buckets=FIRST_STATUS_BUCKETS,
                                              registry=registry)
        self.jobs_created = Counter("ringfeed_operator_jobs_created_total", "Jobs created, by role (ingest, split).",
                                    ["role"], registry=registry)
        self.dataset_samples = Gauge("ringfeed_dataset_samples", "Samples of a Dataset (catalog).",
                                     ["namespace", "dataset"], registry=registry)
        self.dataset_bytes = Gauge("ringfeed_dataset_bytes", "Bytes of a Dataset's samples (catalog).",
                                   ["namespace", "dataset"], registry=registry)
        self.dataset_ready = Gauge("ringfeed_dataset_ready", "1 when the Dataset's Ready condition is True.",
                                   ["namespace", "dataset"], registry=registry)
        self.split_samples = Gauge("ringfeed_split_samples", "Samples per part of a computed Split.",
                                   ["namespace", "split", "part"], registry=registry)
        self.job_outcomes = Counter("ringfeed_operator_job_outcomes_total",
                                    "Jobs the operator saw finish, by role (ingest, split, trainer) and outcome "
                                    "(succeeded, failed).", ["role", "outcome"], registry=registry)
        self.ring_nodes = Gauge("ringfeed_ring_nodes", "Nodes in a Ring (started, not leaving).", RING,
                                registry=registry)
        self.ring_ready_nodes = Gauge("ringfeed_ring_ready_nodes", "Nodes of a Ring that serve CQL.", RING,
                                      registry=registry)
        self.ring_desired_nodes = Gauge("ringfeed_ring_desired_nodes", "A Ring's spec.nodes (kubectl scale, the "
                                        "autoscaler).", RING, registry=registry)
        self.ring_scaling = Gauge("ringfeed_ring_scaling", "1 while a scaling step of the Ring is under way.", RING,
                                  registry=registry)
        self.ring_scaling_held = Gauge("ringfeed_ring_scaling_held", "1 while a wanted step waits, by reason "
                                       "(the ScalingHeld condition's).", [*RING, "reason"], registry=registry)
        self.ring_steps = Counter("ringfeed_ring_steps_total", "Scaling steps started, by direction (up, down).",
                                  [*RING, "direction"], registry=registry)
        self.ring_step_duration = Histogram("ringfeed_ring_step_duration_seconds",
                                            "Scaling steps from their start to their end (a scale-up's cleanup "
                                            "included).", [*RING, "direction"], buckets=STEP_BUCKETS,
                                            registry=registry)
        self.ring_autoscaler_value = Gauge("ringfeed_ring_autoscaler_value", "The autoscaler's last reading of its "
                                           "metric.", [*RING, "metric"], registry=registry)
        # The one extra label value of each Ring's series in these gauges (a held reason, the autoscaler's metric).
        self._current: dict[tuple[Gauge, str, str], str] = {}

    def forget_dataset(self, namespace: str, name: str) -> None:
        """A deleted Dataset's series end with it."""
        for gauge in (self.dataset_samples, self.dataset_bytes, self.dataset_ready):
            try:
                gauge.remove(namespace, name)
            except KeyError:
                pass


    def set_ring_series(self, gauge: Gauge, namespace: str, name: str, label: str | None, value: float = 1) -> None:
        """Set the Ring's one series of `gauge` (labelled `label`; None: none), removing the one of another label
        (a held reason that changed, another autoscaler metric)."""
        previous = self._current.pop((gauge, namespace, name), None)
        if previous is not None and previous != label:
            gauge.remove(namespace, name, previous)
        if label:
            self._current[(gauge, namespace, name)] = label
            gauge.labels(namespace, name, label).set(value)

    def forget_ring(self, namespace: str, name: str) -> None:
        """A deleted Ring's gauges end with it (its counters stay: they count what happened)."""
        for labelled in (self.ring_scaling_held, self.ring_autoscaler_value):
            self.set_ring_series(labelled, namespace, name, None)
        for gauge in (self.ring_nodes, self.ring_ready_nodes, self.ring_desired_nodes, self.ring_scaling):
            try:
                gauge.remove(namespace, name)
            except KeyError:
                pass


@contextlib.contextmanager
def _counting(reconciles: Counter, kind: str, handler: str) -> Iterator[None]:
    try:
        yield
    except kopf.TemporaryError:
        reconciles.labels(kind, handler, "retry").inc()
        raise
    except Exception:
        reconciles.labels(kind, handler, "error").inc()
        raise
    reconciles.labels(kind, handler, "ok").inc()


def counted(kind: str):
    """Count a kopf handler's runs by result in ringfeed_operator_reconciles_total (the metrics come with the
    handler's `memo`, the operator's Context). Synchronous and asynchronous handlers alike (kopf runs the first in
    its thread pool, the second in its event loop)."""
    def decorate(handler):
        if inspect.iscoroutinefunction(handler):
            @functools.wraps(handler)  # kopf takes the handler's id from the wrapped function's name
            async def run_async(*args, **kwargs):
                with _counting(kwargs["memo"].metrics.reconciles, kind, handler.__name__):
                    return await handler(*args, **kwargs)
            return run_async

        @functools.wraps(handler)
        def run(*args, **kwargs):
            with _counting(kwargs["memo"].metrics.reconciles, kind, handler.__name__):
                return handler(*args, **kwargs)
        return run
    return decorate
