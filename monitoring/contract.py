"""The metric contract: every metric family the dashboards and rules may read, with its type and labels.

monitoring/tests imports it: a name in a dashboard's or rule's expression must be one of these (or a recording rule
of charts/ringfeed/files/monitoring/rules.yaml). Names are written as they appear in PromQL: counters with their
``_total``, histograms by their base name (their series are ``<name>_bucket``, ``_count`` and ``_sum``).

Labels are the ones the exporter sets; scraping adds ``job``, ``instance`` and, through Kubernetes service
discovery, ``namespace`` and ``pod`` (the operator's ServiceMonitor uses honorLabels, so its ``namespace`` is that
of the object a series describes).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Type = Literal["counter", "gauge", "histogram"]


@dataclasses.dataclass(frozen=True)
class Family:
    type: Type
    labels: tuple[str, ...]


LOADER = ("dataset", "split", "part", "rank", "trainingjob")

# -- the loader: in the trainer's process or in the TrainingJob's sidecar (dataplane/ringfeed/metrics.py) ------------
_LOADER: dict[str, Family] = {
    "ringfeed_loader_samples_total": Family("counter", LOADER),
    "ringfeed_loader_batches_total": Family("counter", LOADER),
    "ringfeed_loader_delivered_bytes_total": Family("counter", LOADER),
    # its rate: the share of wall time the trainer waits for its next batch
    "ringfeed_loader_trainer_wait_seconds_total": Family("counter", LOADER),
    "ringfeed_loader_retries_total": Family("counter", LOADER),
    "ringfeed_loader_skipped_samples_total": Family("counter", (*LOADER, "reason")),  # missing | corrupt
    "ringfeed_loader_stage_requests_total": Family("counter", (*LOADER, "stage")),  # decode | batch | trainer
    "ringfeed_loader_stage_ready_total": Family("counter", (*LOADER, "stage")),  # ready ÷ requests ≈ 1: keeps up
    "ringfeed_loader_epoch": Family("gauge", LOADER),
    "ringfeed_loader_position_samples": Family("gauge", LOADER),
    "ringfeed_loader_prefetch_batches": Family("gauge", LOADER),
    "ringfeed_loader_window_bytes": Family("gauge", LOADER),
    "ringfeed_loader_in_flight_bytes": Family("gauge", LOADER),
    "ringfeed_loader_fetch_latency_seconds": Family("histogram", LOADER),  # one read request
    "ringfeed_loader_decode_seconds": Family("histogram", LOADER),  # one image
}

# -- the operator (operator/ringfeed_operator/metrics.py) --------------------------------------------------------------
_OPERATOR: dict[str, Family] = {
    "ringfeed_operator_reconciles_total": Family("counter", ("kind", "handler", "result")),  # ok | retry | error
    "ringfeed_operator_jobs_created_total": Family("counter", ("role",)),
    "ringfeed_operator_job_outcomes_total": Family("counter", ("role", "outcome")),  # succeeded | failed
    # a new object's first status, written by the acceptor
    "ringfeed_operator_first_statuses_total": Family("counter", ("kind", "result")),  # written | superseded | failed
    "ringfeed_operator_first_status_seconds": Family("histogram", ("kind",)),
    "ringfeed_dataset_samples": Family("gauge", ("namespace", "dataset")),
    "ringfeed_dataset_bytes": Family("gauge", ("namespace", "dataset")),
    "ringfeed_dataset_ready": Family("gauge", ("namespace", "dataset")),
    "ringfeed_split_samples": Family("gauge", ("namespace", "split", "part")),
    "ringfeed_ring_nodes": Family("gauge", ("namespace", "ring")),
    "ringfeed_ring_ready_nodes": Family("gauge", ("namespace", "ring")),
    "ringfeed_ring_desired_nodes": Family("gauge", ("namespace", "ring")),
    "ringfeed_ring_scaling": Family("gauge", ("namespace", "ring")),
    "ringfeed_ring_scaling_held": Family("gauge", ("namespace", "ring", "reason")),
    "ringfeed_ring_steps_total": Family("counter", ("namespace", "ring", "direction")),  # up | down
    "ringfeed_ring_step_duration_seconds": Family("histogram", ("namespace", "ring", "direction")),
    "ringfeed_ring_autoscaler_value": Family("gauge", ("namespace", "ring", "metric")),
}

# -- ingest Jobs -------------------------------------------------------------------------------------------------------
_INGEST: dict[str, Family] = {
    "ringfeed_ingest_inputs_total": Family("counter", ("dataset",)),
    "ringfeed_ingest_samples_total": Family("counter", ("dataset",)),
    "ringfeed_ingest_rejected_samples_total": Family("counter", ("dataset", "reason")),
    "ringfeed_ingest_bytes_total": Family("counter", ("dataset",)),
    "ringfeed_ingest_elapsed_seconds": Family("gauge", ("dataset",)),
}

# -- the ring: Cassandra's own metrics as MAAC, the Management API agent in each Cassandra Pod, exports them on port
# 9000 (third_party/management-api-for-apache-cassandra-dbc7629230d9.tar.gz, management-api-agent-common/).
# Every series carries the agent's default labels host (host ID), instance (broadcast address: scraped, it becomes
# exported_instance), cluster (= the Ring's name: the operator names the Cassandra cluster after the Ring), datacenter
# and rack (CassandraMetricsTools.DEFAULT_LABEL_NAMES), plus pod_name and node_name from the POD_NAME and NODE_NAME
# environment variables (default-metric-settings.yaml `labels.env`; cass-operator sets both).
#
# How a name comes about (io/k8ssandra/metrics/builder/CassandraMetricNameParser.java): the Dropwizard name is matched
# against the relabel rules of default-metric-settings.yaml (which move parts of it into labels), then clean()
# splits camelCase with "_", lowercases, and "." becomes "_"; the listener (CassandraMetricRegistryListener.java)
# appends "_total" to a Meter (type counter), exports a Timer as a histogram (_bucket with MAAC's fixed le bounds
# 35 … 17436917 in MICROSECONDS on Cassandra ≥ 4.1, _sum, _count), a Gauge or a Counter as a gauge with no suffix.
# The three names below were also checked by running the agent's own parser (CassandraMetricNameParser with
# ConfigReader.readConfig(), from the datastax-mgmtapi-agent.jar of the locally built cassandra-maac image), and
# the Dropwizard names against Cassandra 5.0.9's classes (javap of CompactionMetrics and DroppedMessageMetrics).
_CASSANDRA: dict[str, Family] = {
    # org.apache.cassandra.metrics.ClientRequest.Latency.Read (a Timer): the rule "ClientRequest\.(\w+)\.(\w+)$" makes
    # it org_apache_cassandra_metrics_client_request_latency{request_type="Read"} (the test
    # CassandraMetricsTest: ClientRequest.MetricName.RequestType → ..._client_request_metric_name{request_type}).
    # Its _count is the reads a node coordinated since it started: reads/s is its rate (no separate throughput
    # metric; ClientRequest.TotalLatency.Read is the sum of latencies, a Counter).
    "org_apache_cassandra_metrics_client_request_latency": Family(
        "histogram", ("host", "instance", "cluster", "datacenter", "rack", "pod_name", "node_name", "request_type")),
    # org.apache.cassandra.metrics.Compaction.PendingTasks (a Gauge): no relabel rule matches Compaction
    # (default-metric-settings.yaml lists "# Compaction metrics" without one), so clean() alone names it:
    # Compaction.PendingTasks → compaction.pending_tasks → org_apache_cassandra_metrics_compaction_pending_tasks.
    "org_apache_cassandra_metrics_compaction_pending_tasks": Family(
        "gauge", ("host", "instance", "cluster", "datacenter", "rack", "pod_name", "node_name")),
    # org.apache.cassandra.metrics.DroppedMessage.Dropped.<VERB> (a Meter, one per Verb: READ_REQ, MUTATION_REQ,
    # RANGE_REQ, ...; Cassandra 5.0's legacy aliases such as READ are JMX-only, so they are not counted twice): the
    # rule "DroppedMessage\.(\w+)\.(\w+)" → org_apache_cassandra_metrics_dropped_message_dropped{message_type="<VERB>"}
    # (test CassandraMetricsTest: DroppedMessage.MetricName.X → ..._dropped_message_metric_name), and a Meter gets
    # "_total".
    "org_apache_cassandra_metrics_dropped_message_dropped_total": Family(
        "counter", ("host", "instance", "cluster", "datacenter", "rack", "pod_name", "node_name", "message_type")),
}

# -- the cache tiers: Alluxio 2.9.6's own metrics at /metrics/prometheus/ of a Dataset's cache master (Cluster_*,
# the cluster-wide sums the workers report to it) and workers (Worker_*). Alluxio exports its running totals as
# gauges with no labels of their own; scraping adds namespace and pod (<dataset>-cache-master-0, …). Names checked
# against a running tier (ringfeed cache up, curl of both endpoints).
_ALLUXIO: dict[str, Family] = {
    "Cluster_BytesReadUfsAll": Family("gauge", ()),  # bytes the workers read from the ring (cold reads)
    "Cluster_BytesReadCache": Family("gauge", ()),  # bytes served from the workers' memory
    "Cluster_CapacityUsedTierMEM": Family("gauge", ()),
    "Cluster_CapacityTotalTierMEM": Family("gauge", ()),
    "Cluster_Workers": Family("gauge", ()),
    "Cluster_LostWorkers": Family("gauge", ()),
    "Worker_BlocksEvicted": Family("gauge", ()),  # blocks a worker dropped to make room: the tier is too small
}

# -- Prometheus itself -------------------------------------------------------------------------------------------------
_PROMETHEUS: dict[str, Family] = {
    "up": Family("gauge", ("job", "instance")),  # 1 when the target's last scrape succeeded
}

METRICS: dict[str, Family] = {**_LOADER, **_OPERATOR, **_INGEST, **_CASSANDRA, **_ALLUXIO, **_PROMETHEUS}

HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")


def series_names() -> set[str]:
    """Every series name the contract allows in PromQL (a histogram's as its three suffixed names)."""
    names: set[str] = set()
    for name, family in METRICS.items():
        if family.type == "histogram":
            names.update(name + suffix for suffix in HISTOGRAM_SUFFIXES)
        else:
            names.add(name)
    return names
