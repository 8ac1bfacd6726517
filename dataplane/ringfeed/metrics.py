"""Prometheus metrics of the data path: the loader's and the ingest's. A loader's figures (in the trainer's process,
or in the TrainingJob's sidecar) are read at scrape time from its counters, the native ones included: the hot path
only bumps atomics.

Every loader family is labelled by ``dataset``, ``split``, ``part``, ``rank`` and ``trainingjob`` (empty outside a
TrainingJob): a bounded set, one series per rank; the ingest's by ``dataset``. docs/observability.md lists the
families and what each says about a slow training step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

if TYPE_CHECKING:
    from ringfeed._native import LoaderMetrics, MetricsSnapshot, WindowStats
    from ringfeed.ingest import IngestSummary

NO_WINDOW: WindowStats = {"window_bytes": 0, "in_flight_bytes": 0, "peak_in_flight_bytes": 0, "pending_bytes": 0,
                          "min_rtt_ms": None, "srtt_ms": None}

LABELS = ("dataset", "split", "part", "rank", "trainingjob")
# Stages of the path, each asked "was your input ready when your consumer wanted it?": a decoder thread going for
# fetched samples, the loader's consumer going for the next batch, and (sidecar) the trainer going for its slot.
STAGES = ("decode", "batch", "trainer")


@dataclasses.dataclass
class PathFigures:
    """What one loader (or the sidecar in front of it) has done, at one moment."""

    samples: int
    batches: int
    bytes: int
    trainer_wait_s: float
    retries: int
    skipped: dict[str, int]  # reason (missing, corrupt) → samples
    epoch: int
    position_samples: int
    native: MetricsSnapshot
    window_bytes: int = 0
    in_flight_bytes: int = 0
    queued_batches: int = 0  # ready beyond the native reader (the sidecar's slots written, not handed out)
    trainer_stage: tuple[int, int] | None = None  # (asked, found ready), sidecar only


class PathCollector:
    """Turns `readings()` into metric families at each scrape: one series per reading, labelled by `labels` and the
    reading's own (a sidecar's feeds differ by rank); nothing when there is no reading yet."""

    def __init__(self, readings: Callable[[], Iterable[tuple[dict[str, str], PathFigures]]], labels: dict[str, str]):
        unknown = set(labels) - set(LABELS)
        if unknown:
            raise ValueError(f"unknown metric labels {sorted(unknown)}; the loader's labels are {LABELS}")
        self._readings = readings
        self._labels = labels

    def collect(self) -> Iterator[Metric]:
        readings = [([str({**self._labels, **own}.get(name, "")) for name in LABELS], figures)
                    for own, figures in self._readings()]
        if not readings:
            return

        def family(kind, name: str, documentation: str, value: Callable[[PathFigures], float]) -> Metric:
            item = kind(f"ringfeed_loader_{name}", documentation, labels=LABELS)
            for values, figures in readings:
                item.add_metric(values, value(figures))
            return item

        def labelled(kind, name: str, documentation: str, label: str,
                     values_of: Callable[[PathFigures], dict[str, float]]) -> Metric:
            item = kind(f"ringfeed_loader_{name}", documentation, labels=[*LABELS, label])
            for values, figures in readings:
                for key, value in values_of(figures).items():
                    item.add_metric([*values, key], value)
            return item

        yield family(CounterMetricFamily, "samples", "Samples handed to the trainer.", lambda f: f.samples)
        yield family(CounterMetricFamily, "batches", "Batches handed to the trainer.", lambda f: f.batches)
        yield family(CounterMetricFamily, "delivered_bytes", "Bytes of the batches handed to the trainer.",
                     lambda f: f.bytes)
        yield family(CounterMetricFamily, "trainer_wait_seconds",
                     "Time the trainer spent blocked on its next batch; its rate is the share of wall time the "
                     "trainer waits for data.", lambda f: f.trainer_wait_s)
        yield family(CounterMetricFamily, "retries", "Read requests retried after a transient failure.",
                     lambda f: f.retries)
        yield labelled(CounterMetricFamily, "skipped_samples", "Samples left out of their batch, by reason "
                       "(missing: no row; corrupt: could not be decoded).", "reason",
                       lambda f: {reason: f.skipped.get(reason, 0) for reason in ("missing", "corrupt")})
        yield family(GaugeMetricFamily, "epoch", "The epoch being delivered.", lambda f: f.epoch)
        yield family(GaugeMetricFamily, "position_samples",
                     "Samples of this rank delivered since the first epoch began.", lambda f: f.position_samples)
        yield family(GaugeMetricFamily, "prefetch_batches",
                     "Batches read and assembled, waiting for the trainer (the prefetch queue).",
                     lambda f: f.native["batches_ready"] + f.queued_batches)
        yield family(GaugeMetricFamily, "window_bytes", "Bytes the adaptive window lets be in flight.",
                     lambda f: f.window_bytes)
        yield family(GaugeMetricFamily, "in_flight_bytes", "Bytes of the read requests in flight.",
                     lambda f: f.in_flight_bytes)
        histograms: list[tuple[str, str, Callable[[PathFigures], tuple]]] = [
            ("fetch_latency_seconds", "One read request, sent to answered (retries included).",
             lambda f: f.native["fetch_latency_seconds"]),
            ("decode_seconds", "One image, decoded and resized.", lambda f: f.native["decode_seconds"])]
        for name, documentation, reading in histograms:
            histogram = HistogramMetricFamily(f"ringfeed_loader_{name}", documentation, labels=LABELS)
            for values, figures in readings:
                bounds, cumulative, total = reading(figures)
                buckets = [(repr(float(bound)), count) for bound, count in zip(bounds, cumulative, strict=False)]
                histogram.add_metric(values, [*buckets, ("+Inf", cumulative[-1])], sum_value=total)
            yield histogram

        def stages(figures: PathFigures) -> dict[str, tuple[int, int]]:
            found = {"decode": figures.native["decode_input"], "batch": figures.native["batch_handoff"]}
            if figures.trainer_stage is not None:
                found["trainer"] = figures.trainer_stage
            return found

        yield labelled(CounterMetricFamily, "stage_requests",
                       "Times a stage went for its next input: a decoder thread for fetched samples (decode), the "
                       "loader's consumer for a batch (batch), the trainer for its slot (trainer, sidecar).", "stage",
                       lambda f: {stage: asked for stage, (asked, _) in stages(f).items()})
        yield labelled(CounterMetricFamily, "stage_ready",
                       "Of those, the times its input was ready (ready ÷ requests near 1: the stage before keeps "
                       "up).", "stage", lambda f: {stage: ready for stage, (_, ready) in stages(f).items()})


def loader_figures(loader, metrics: LoaderMetrics) -> PathFigures:
    """An in-process Loader's figures (the trainer's waits are its waits in the loader)."""
    stats, window = loader.stats, loader.window_stats() or NO_WINDOW
    return PathFigures(samples=stats.samples, batches=stats.batches, bytes=stats.bytes, trainer_wait_s=stats.wait_s,
                       retries=stats.retries, skipped={"missing": stats.missing, "corrupt": stats.corrupt},
                       epoch=loader.epoch, position_samples=loader.plan.samples_delivered(loader.epoch, loader.offset),
                       native=metrics.snapshot(), window_bytes=window["window_bytes"],
                       in_flight_bytes=window["in_flight_bytes"])


def serve_loader_metrics(loader, port: int, *, addr: str = "0.0.0.0", **labels: str) -> int:
    """Serve `loader`'s metrics on ``http://addr:port/metrics`` from a thread (port 0: any free one); returns the
    port. Labels: ``trainingjob``, and any of dataset, split, part and rank to name them otherwise than the loader
    does."""
    labels = {"dataset": loader.source.dataset, "split": loader.source.split_name, "part": loader.source.part,
              "rank": str(loader.options.rank), **labels}
    registry = CollectorRegistry()
    registry.register(PathCollector(lambda: [({}, loader_figures(loader, loader.metrics))], labels))
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return server.server_address[1]


class IngestCollector:
    """An ingest's figures from its live summary (``ringfeed ingest --metrics-port``: the operator's ingest Jobs)."""

    def __init__(self, summary: IngestSummary):
        self._summary = summary

    def collect(self) -> Iterator[Metric]:
        summary, labels = self._summary, ["dataset"]
        rejected = dict(summary.rejected)  # a copy: the ingest thread adds reasons as it meets them

        def family(kind, name: str, documentation: str, value: float) -> Metric:
            item = kind(f"ringfeed_ingest_{name}", documentation, labels=labels)
            item.add_metric([summary.dataset], value)
            return item

        yield family(CounterMetricFamily, "inputs", "Source samples read.", summary.inputs)
        yield family(CounterMetricFamily, "samples", "Samples written.", summary.written)
        yield family(CounterMetricFamily, "bytes", "Bytes of the samples written.", summary.bytes)
        reasons = CounterMetricFamily("ringfeed_ingest_rejected_samples", "Source samples rejected, by reason "
                                      "(corrupt, unreadable, too large, bad metadata, ...).",
                                      labels=[*labels, "reason"])
        for reason, count in sorted(rejected.items()):
            reasons.add_metric([summary.dataset, reason], count)
        yield reasons
        yield family(GaugeMetricFamily, "elapsed_seconds", "Seconds since the ingest started.", summary.elapsed_s())


def serve_ingest_metrics(summary: IngestSummary, port: int, addr: str = "0.0.0.0") -> int:
    """Serve an ingest's metrics from a thread while it runs; returns the port."""
    registry = CollectorRegistry()
    registry.register(IngestCollector(summary))
    server, _ = start_http_server(port, addr=addr, registry=registry)
    return server.server_address[1]
