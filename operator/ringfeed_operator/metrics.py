"""Prometheus metrics of the operator (served on --metrics-port)."""

from __future__ import annotations

import functools

import kopf
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge


class Metrics:
    """The operator's metrics, registered in one registry (the process's default one when served)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.reconciles = Counter("ringfeed_operator_reconciles_total", "Handler runs by kind, handler and result.",
                                  ["kind", "handler", "result"], registry=registry)
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
        self.ring_nodes = Gauge("ringfeed_ring_nodes", "Nodes in a Ring (started, not leaving).",
                                ["namespace", "ring"], registry=registry)
        self.ring_steps = Counter("ringfeed_ring_steps_total", "Scaling steps started, by direction (up, down).",
                                  ["direction"], registry=registry)

    def forget_dataset(self, namespace: str, name: str) -> None:
        """A deleted Dataset's series end with it."""
        for gauge in (self.dataset_samples, self.dataset_bytes, self.dataset_ready):
            try:
                gauge.remove(namespace, name)
            except KeyError:
                pass


    def forget_ring(self, namespace: str, name: str) -> None:
        try:
            self.ring_nodes.remove(namespace, name)
        except KeyError:
            pass


def counted(kind: str):
    """Count a kopf handler's runs by result in ringfeed_operator_reconciles_total (the metrics come with the
    handler's `memo`, the operator's Context)."""
    def decorate(handler):
        @functools.wraps(handler)  # kopf takes the handler's id from the wrapped function's name
        def run(*args, **kwargs):
            reconciles = kwargs["memo"].metrics.reconciles
            try:
                result = handler(*args, **kwargs)
            except kopf.TemporaryError:
                reconciles.labels(kind, handler.__name__, "retry").inc()
                raise
            except Exception:
                reconciles.labels(kind, handler.__name__, "error").inc()
                raise
            reconciles.labels(kind, handler.__name__, "ok").inc()
            return result
        return run
    return decorate
