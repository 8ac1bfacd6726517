"""Prometheus metrics of the operator (served on --metrics-port)."""

from prometheus_client import Counter, Gauge

RECONCILES = Counter("ringfeed_operator_reconciles_total", "Handler runs by kind, handler and result.",
                     ["kind", "handler", "result"])
JOBS_CREATED = Counter("ringfeed_operator_jobs_created_total", "Jobs created, by role (ingest, split).", ["role"])
DATASET_SAMPLES = Gauge("ringfeed_dataset_samples", "Samples of a Dataset (catalog).", ["namespace", "dataset"])
DATASET_BYTES = Gauge("ringfeed_dataset_bytes", "Bytes of a Dataset's samples (catalog).", ["namespace", "dataset"])
DATASET_READY = Gauge("ringfeed_dataset_ready", "1 when the Dataset's Ready condition is True.",
                      ["namespace", "dataset"])
SPLIT_SAMPLES = Gauge("ringfeed_split_samples", "Samples per part of a computed Split.",
                      ["namespace", "split", "part"])


def forget_dataset(namespace: str, name: str) -> None:
    """A deleted Dataset's series end with it."""
    for gauge in (DATASET_SAMPLES, DATASET_BYTES, DATASET_READY):
        try:
            gauge.remove(namespace, name)
        except KeyError:
            pass
