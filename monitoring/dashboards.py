"""Ringfeed's Grafana dashboards, as code.

    python monitoring/dashboards.py           # (re)writes charts/ringfeed/files/monitoring/dashboards/<uid>.json
    python monitoring/dashboards.py --check   # exits 1, naming the files, when a committed one differs

Built with grafana-foundation-sdk's typed builders, pinned in dataplane/pyproject.toml's `test` extra (a bare
`pip install grafana-foundation-sdk` picks its Grafana 10.1 build). One function per dashboard; every panel and
query reads the `${datasource}` variable (a Prometheus data source); the metric names are those of
monitoring/contract.py, which monitoring/tests/test_dashboards.py enforces.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as builders
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models

REPOSITORY = Path(__file__).resolve().parent.parent
OUTPUT = REPOSITORY / "charts" / "ringfeed" / "files" / "monitoring" / "dashboards"

DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["ringfeed"]
WIDTH = 24  # Grafana's grid

# Prometheus annotation fields Grafana reads that the SDK's AnnotationQuery does not model; added to the JSON after
# encoding (the round-trip test leaves exactly these out).
ANNOTATION_EXTRAS = ("step", "tagKeys", "textFormat", "titleFormat")

# -- building blocks ---------------------------------------------------------------------------------------------------

Query = tuple[str, str]  # (PromQL, legend)
Targets = list[cogbuilder.Builder[cogvariants.Dataquery]]


def targets(*queries: Query, instant: bool = False) -> Targets:
    """Prometheus queries through ${datasource}, with refIds A, B, … in order."""
    built: Targets = []
    for index, (expr, legend) in enumerate(queries):
        query = (prometheus.Dataquery().ref_id(chr(ord("A") + index)).datasource(DATASOURCE).expr(expr)
                 .legend_format(legend))
        built.append(query.instant() if instant else query.range())
    return built


def thresholds(*steps: tuple[float | None, str]) -> builders.ThresholdsConfig:
    return (builders.ThresholdsConfig().mode(models.ThresholdsMode.ABSOLUTE)
            .steps([models.Threshold(value=value, color=color) for value, color in steps]))


def value_texts(texts: dict[str, tuple[str, str]]) -> list[models.ValueMapping]:
    """A value mapping: value → (text, colour)."""
    return [models.ValueMap(options={value: models.ValueMappingResult(text=text, color=color, index=index)
                                     for index, (value, (text, color)) in enumerate(texts.items())})]


def graph(title: str, description: str, unit: str, queries: Targets, *, w: int = 12, h: int = 8,
          minimum: float | None = 0, maximum: float | None = None, limit: float | None = None,
          bars: bool = False) -> timeseries.Panel:
    """A time series panel; `limit` draws a dashed red line where an alert's threshold lies."""
    panel = (timeseries.Panel().title(title).description(description).datasource(DATASOURCE).targets(queries)
             .unit(unit).span(w).height(h)
             .legend(common_builders.VizLegendOptions().display_mode(common.LegendDisplayMode.LIST)
                     .placement(common.LegendPlacement.BOTTOM).show_legend(True))
             .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI)
                      .sort(common.SortOrder.DESCENDING)))
    if minimum is not None:
        panel = panel.min(minimum)
    if maximum is not None:
        panel = panel.max(maximum)
    if bars:
        panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(60)
    else:
        panel = panel.line_width(1).fill_opacity(10).show_points(common.VisibilityMode.NEVER)
    if limit is not None:
        panel = (panel.thresholds(thresholds((None, "green"), (limit, "red")))
                 .thresholds_style(common_builders.GraphThresholdsStyleConfig()
                                   .mode(common.GraphThresholdsStyleMode.DASHED)))
    return panel


def stat_panel(title: str, description: str, unit: str, queries: Targets, *, w: int = 8,
               h: int = 6, mappings: list[models.ValueMapping] | None = None) -> stat.Panel:
    panel = (stat.Panel().title(title).description(description).datasource(DATASOURCE).targets(queries)
             .unit(unit).span(w).height(h).graph_mode(common.BigValueGraphMode.NONE)
             .text_mode(common.BigValueTextMode.VALUE_AND_NAME)
             .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if mappings:
        panel = panel.mappings(mappings).color_mode(common.BigValueColorMode.BACKGROUND)
    else:
        panel = panel.color_mode(common.BigValueColorMode.NONE)
    return panel


def state_panel(title: str, description: str, queries: Targets, texts: dict[str, tuple[str, str]],
                *, w: int = 12, h: int = 8) -> statetimeline.Panel:
    return (statetimeline.Panel().title(title).description(description).datasource(DATASOURCE).targets(queries)
            .span(w).height(h).mappings(value_texts(texts)).show_value(common.VisibilityMode.NEVER)
            .merge_values(True))


def datasource_variable() -> builders.DatasourceVariable:
    return builders.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(name: str, label: str, query: str, *, multi: bool) -> builders.QueryVariable:
    """A variable from `label_values(...)`; a multi-value one offers All (regex .*) and starts there."""
    variable = (builders.QueryVariable(name).label(label).datasource(DATASOURCE).query(query)
                .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(models.VariableSort.ALPHABETICAL_ASC))
    if multi:
        variable = (variable.multi(True).include_all(True).all_value(".*")
                    .current(models.VariableOption(selected=True, text="All", value="$__all")))
    return variable


def ring_size_targets(selector: str) -> Targets:
    """A Ring's nodes, desired nodes and ready nodes (the operator's gauges), one series each per ring."""
    return targets(*((f"sum by (namespace, ring) (ringfeed_ring_{gauge}{{{selector}}})", f"{{{{ring}}}} {legend}")
                     for gauge, legend in (("nodes", "nodes"), ("desired_nodes", "desired"),
                                           ("ready_nodes", "ready"))))


def steps_annotation(selector: str) -> builders.AnnotationQuery:
    """A marker at each scaling step of a ring (its step counter moved)."""
    return (builders.AnnotationQuery().name("Ring scaling steps").datasource(DATASOURCE).enable(True)
            .icon_color("orange").expr(f"changes(ringfeed_ring_steps_total{{{selector}}}[1m]) > 0"))


STEP_ANNOTATION_EXTRAS = {"step": "1m", "tagKeys": "ring,direction", "textFormat": "",
                          "titleFormat": "{{namespace}}/{{ring}}: scaling step {{direction}}"}


def dashboard(uid: str, title: str, description: str) -> builders.Dashboard:
    return (builders.Dashboard(title).uid(uid).description(description).tags(TAGS).timezone("browser")
            .time("now-6h", "now").refresh("30s").tooltip(models.DashboardCursorSync.CROSSHAIR)
            .link(builders.DashboardLink("Ringfeed").type(models.DashboardLinkType.DASHBOARDS).tags(TAGS)
                  .as_dropdown(True).include_vars(True).keep_time(True)))


# -- the dashboards ----------------------------------------------------------------------------------------------------


def overview() -> builders.Dashboard:
    ns = 'namespace=~"$namespace"'
    return (
        dashboard("ringfeed-overview", "Ringfeed / Overview",
                  "Datasets, splits, training jobs, rings and the operator at a glance.")
        .with_variable(datasource_variable())
        .with_variable(query_variable("namespace", "Namespace", "label_values(ringfeed_dataset_ready, namespace)",
                                      multi=True))
        .with_row(builders.Row("Datasets"))
        .with_panel(stat_panel(
            "Dataset samples", "Samples of each Dataset (the catalog's count).", "short",
            targets((f"sum by (namespace, dataset) (ringfeed_dataset_samples{{{ns}}})", "{{namespace}}/{{dataset}}"))))
        .with_panel(stat_panel(
            "Dataset bytes", "Bytes of each Dataset's samples (the catalog's count).", "bytes",
            targets((f"sum by (namespace, dataset) (ringfeed_dataset_bytes{{{ns}}})", "{{namespace}}/{{dataset}}"))))
        .with_panel(stat_panel(
            "Dataset ready", "The Dataset's Ready condition: tables created and ingest done.", "none",
            targets((f"max by (namespace, dataset) (ringfeed_dataset_ready{{{ns}}})", "{{namespace}}/{{dataset}}")),
            mappings=value_texts({"0": ("Not ready", "red"), "1": ("Ready", "green")})))
        .with_row(builders.Row("Splits"))
        .with_panel(bargauge.Panel().title("Samples per split part")
                    .description("Samples in each part (train, val, test or a fold) of each computed Split.")
                    .datasource(DATASOURCE).unit("short").min(0).span(WIDTH).height(8)
                    .display_mode(common.BarGaugeDisplayMode.BASIC).orientation(common.VizOrientation.HORIZONTAL)
                    .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
                    .targets(targets((f"sum by (namespace, split, part) (ringfeed_split_samples{{{ns}}})",
                                      "{{namespace}}/{{split}} {{part}}"))))
        .with_row(builders.Row("Training jobs"))
        .with_panel(graph(
            "Samples/s per TrainingJob", "Samples handed to the trainers of each job, all ranks together. Loaders "
            "outside a TrainingJob show with an empty name.", "short",
            targets((f"sum by (namespace, trainingjob) (rate(ringfeed_loader_samples_total{{{ns}}}[$__rate_interval]))",
                     "{{namespace}}/{{trainingjob}}"))))
        .with_panel(graph(
            "Worst-rank trainer wait share", "Share of wall time the slowest rank of each job waits for its next "
            "batch. Above 50% for 10 minutes fires RingfeedLoaderStalling: open Ringfeed / Training data path.",
            "percentunit",
            targets((f"max by (namespace, trainingjob) "
                     f"(rate(ringfeed_loader_trainer_wait_seconds_total{{{ns}}}[$__rate_interval]))",
                     "{{namespace}}/{{trainingjob}}")),
            limit=0.5))
        .with_row(builders.Row("Rings"))
        .with_panel(graph(
            "Ring nodes", "Nodes each Ring has (started, not leaving), the size it should have (spec or autoscaler) "
            "and how many are ready.", "none",
            ring_size_targets(ns)))
        .with_panel(state_panel(
            "Ring scaling", "Whether a scaling step of each Ring is under way (Ringfeed / Ring has the details).",
            targets((f"max by (namespace, ring) (ringfeed_ring_scaling{{{ns}}})", "{{namespace}}/{{ring}}")),
            {"0": ("settled", "green"), "1": ("scaling", "blue")}))
        .with_row(builders.Row("Cache tiers"))
        .with_panel(graph(
            "Cache tier reads by source", "Bytes/s each Dataset's cache tier served from its workers' memory and "
            "read from the ring (a file's first read). A warm epoch reads (almost) nothing from the ring.", "Bps",
            targets((f"sum by (namespace, pod) (rate(Cluster_BytesReadCache{{{ns}}}[$__rate_interval]))",
                     "{{namespace}}/{{pod}} from memory"),
                    (f"sum by (namespace, pod) (rate(Cluster_BytesReadUfsAll{{{ns}}}[$__rate_interval]))",
                     "{{namespace}}/{{pod}} from the ring"))))
        .with_panel(graph(
            "Memory tier used", "Share of the workers' memory tiers (spec.cache.alluxio.memory each) holding file "
            "blocks. Near 100% the tier starts evicting (RingfeedCacheEvicting): give it more memory.",
            "percentunit",
            targets((f"sum by (namespace, pod) (Cluster_CapacityUsedTierMEM{{{ns}}}) / "
                     f"sum by (namespace, pod) (Cluster_CapacityTotalTierMEM{{{ns}}})", "{{namespace}}/{{pod}}")),
            limit=0.9))
        .with_panel(stat_panel(
            "Cache workers", "Workers registered with each tier's master, and workers it lost.", "none",
            targets((f"max by (namespace, pod) (Cluster_Workers{{{ns}}})", "{{namespace}}/{{pod}} workers"),
                    (f"max by (namespace, pod) (Cluster_LostWorkers{{{ns}}})", "{{namespace}}/{{pod}} lost"),
                    instant=True),
            w=12))
        .with_panel(graph(
            "Blocks evicted", "File blocks the workers dropped to make room (the preset avoids eviction: any is a "
            "memory tier too small for the working set).", "short",
            targets((f"sum by (namespace, pod) (increase(Worker_BlocksEvicted{{{ns}}}[$__rate_interval]))",
                     "{{namespace}}/{{pod}}")),
            bars=True))
        .with_row(builders.Row("Operator"))
        .with_panel(graph(
            "Reconciles/s by result", "Handler runs of the operator by kind and result: ok, retry (waiting for "
            "something) or error (RingfeedOperatorReconcileErrors).", "ops",
            targets(("sum by (kind, result) (rate(ringfeed_operator_reconciles_total[$__rate_interval]))",
                     "{{kind}} {{result}}"))))
        .with_panel(graph(
            "Reconcile errors", "Failed handler runs by kind and handler: the operator's log says why.", "short",
            targets(('sum by (kind, handler) (increase(ringfeed_operator_reconciles_total{result="error"}'
                     '[$__rate_interval]))', "{{kind}}/{{handler}}")),
            bars=True))
        .with_panel(graph(
            "First status of new objects, p99", "From an object's creation to its first status (Ready=False, "
            "Accepted) by kind; over a few seconds, the operator or the API server is behind.", "s",
            targets(("histogram_quantile(0.99, sum by (kind, le) "
                     "(rate(ringfeed_operator_first_status_seconds_bucket[$__rate_interval])))", "{{kind}}")),
            w=WIDTH))
        .with_panel(graph(
            "Jobs created and their outcomes", "Ingest and split Jobs the operator created, and how they ended.",
            "short",
            targets(("sum by (role) (increase(ringfeed_operator_jobs_created_total[$__rate_interval]))",
                     "{{role}} created"),
                    ("sum by (role, outcome) (increase(ringfeed_operator_job_outcomes_total[$__rate_interval]))",
                     "{{role}} {{outcome}}")),
            w=WIDTH, bars=True))
    )


def ring() -> builders.Dashboard:
    ns, rings = 'namespace=~"$namespace"', 'ring=~"$ring"'
    # MAAC's series name the Ring by `cluster` (the Cassandra cluster is named after the Ring) and the node by
    # `pod_name`; they are not filtered by namespace, a label only some scrape configurations add.
    cassandra = 'cluster=~"$ring"'
    read = f'request_type="Read",{cassandra}'
    return (
        dashboard("ringfeed-ring", "Ringfeed / Ring",
                  "A Cassandra ring of Ringfeed: reads per node, node health, size and scaling steps (annotations).")
        .with_variable(datasource_variable())
        .with_variable(query_variable("namespace", "Namespace", "label_values(ringfeed_ring_nodes, namespace)",
                                      multi=True))
        .with_variable(query_variable("ring", "Ring",
                                      'label_values(ringfeed_ring_nodes{namespace=~"$namespace"}, ring)', multi=True))
        .annotation(steps_annotation(f"{ns},{rings}"))
        .with_row(builders.Row("Reads"))
        .with_panel(graph(
            "Read p99 per node", "99th percentile of the reads each node coordinated (Cassandra's ClientRequest "
            "latency, exported in microseconds). Above 5 ms for 10 minutes fires RingfeedRingReadLatencyHigh.", "s",
            targets((f"histogram_quantile(0.99, sum by (cluster, pod_name, le) "
                     f"(rate(org_apache_cassandra_metrics_client_request_latency_bucket{{{read}}}[$__rate_interval])))"
                     f" / 1e6", "{{pod_name}}")),
            limit=0.005))
        .with_panel(graph(
            "Reads/s per node", "Reads each node coordinated per second; one node far above the others: unbalanced "
            "tokens or a hot partition.", "reqps",
            targets((f"sum by (cluster, pod_name) "
                     f"(rate(org_apache_cassandra_metrics_client_request_latency_count{{{read}}}[$__rate_interval]))",
                     "{{pod_name}}"))))
        .with_row(builders.Row("Node health"))
        .with_panel(graph(
            "Pending compactions", "Compactions each node has still to run; a growing queue (after an ingest) slows "
            "reads.", "none",
            targets((f"max by (cluster, pod_name) "
                     f"(org_apache_cassandra_metrics_compaction_pending_tasks{{{cassandra}}})", "{{pod_name}}"))))
        .with_panel(graph(
            "Dropped messages/s", "Messages each node dropped because they waited past their timeout, by verb "
            "(READ_REQ, MUTATION_REQ, ...): the node is overloaded.", "short",
            targets((f"sum by (cluster, pod_name, message_type) "
                     f"(rate(org_apache_cassandra_metrics_dropped_message_dropped_total{{{cassandra}}}"
                     f"[$__rate_interval])) > 0", "{{pod_name}} {{message_type}}")))
            .no_value("0"))
        .with_row(builders.Row("Size and scaling"))
        .with_panel(graph(
            "Ring size", "Nodes the Ring has (started, not leaving), should have, and has ready. The orange markers "
            "are scaling steps.", "none",
            ring_size_targets(f"{ns},{rings}")))
        .with_panel(state_panel(
            "Scaling state", "Whether a step is under way (RingfeedRingScalingStuck after 30 minutes) and whether the "
            "autoscaler holds one back, with the guard's reason (the Ring's ScalingHeld condition).",
            targets((f"max by (namespace, ring) (ringfeed_ring_scaling{{{ns},{rings}}})", "{{ring}} scaling"),
                    (f"max by (namespace, ring, reason) (ringfeed_ring_scaling_held{{{ns},{rings}}})",
                     "{{ring}} held ({{reason}})")),
            {"0": ("no", "green"), "1": ("yes", "orange")}))
        .with_panel(graph(
            "Autoscaler input", "The metric the autoscaler decides on, as it last read it: reads/s per node or the "
            "highest read p99 (µs).", "none",
            targets((f"ringfeed_ring_autoscaler_value{{{ns},{rings}}}", "{{ring}} {{metric}}"))))
        .with_panel(stat_panel(
            "Mean scaling step duration", "From a step's start to the ring settling, over the dashboard's time range.",
            "s",
            targets((f"sum by (namespace, ring, direction) "
                     f"(increase(ringfeed_ring_step_duration_seconds_sum{{{ns},{rings}}}[$__range])) / "
                     f"sum by (namespace, ring, direction) "
                     f"(increase(ringfeed_ring_step_duration_seconds_count{{{ns},{rings}}}[$__range]))",
                     "{{ring}} {{direction}}"), instant=True),
            w=12, h=8))
    )


def training_data_path() -> builders.Dashboard:
    """One TrainingJob's data path, top to bottom on one time axis: the trainer waits, the loader's queue and
    stages, its reads and decoding, the ring's reads, the ring's size."""
    job = 'namespace="$namespace",trainingjob="$trainingjob"'
    rings = 'ring=~"$ring"'
    height = 7
    return (
        dashboard("ringfeed-training-data-path", "Ringfeed / Training data path",
                  "Why a training job waits for data: read top to bottom, every panel on the same time axis.")
        .with_variable(datasource_variable())
        .with_variable(query_variable("namespace", "Namespace",
                                      "label_values(ringfeed_loader_samples_total, namespace)", multi=False))
        .with_variable(query_variable(
            "trainingjob", "TrainingJob",
            'label_values(ringfeed_loader_samples_total{namespace="$namespace"}, trainingjob)', multi=False))
        .with_variable(query_variable("ring", "Ring", "label_values(ringfeed_ring_nodes, ring)", multi=True))
        .annotation(steps_annotation(rings))
        .with_panel(graph(
            "1 · Trainer: wait share per rank", "Share of wall time each rank's trainer waits for its next batch, "
            "and the worst rank, which sets a synchronous job's pace. Above 50%: the data path is the bottleneck; "
            "read on downwards.", "percentunit",
            targets((f"rate(ringfeed_loader_trainer_wait_seconds_total{{{job}}}[$__rate_interval])", "rank {{rank}}"),
                    (f"max(rate(ringfeed_loader_trainer_wait_seconds_total{{{job}}}[$__rate_interval]))",
                     "worst rank")),
            w=WIDTH, h=height, limit=0.5))
        .with_panel(graph(
            "2 · Loader: prefetch queue per rank", "Batches read and assembled, waiting for the trainer. Empty while "
            "the trainer waits: the loader cannot keep up; full: the trainer is the bottleneck.", "none",
            targets((f"ringfeed_loader_prefetch_batches{{{job}}}", "rank {{rank}}")),
            w=WIDTH, h=height))
        .with_panel(graph(
            "3 · Loader: stage readiness (ready ÷ requests)", "Of the times each stage went for its next input, the "
            "share it found ready. Near 1: the stage before keeps up. decode below 1: waiting for ring reads; batch: "
            "waiting for decoding; trainer: waiting for the sidecar's slots.", "percentunit",
            targets((f"sum by (stage) (rate(ringfeed_loader_stage_ready_total{{{job}}}[$__rate_interval])) / "
                     f"sum by (stage) (rate(ringfeed_loader_stage_requests_total{{{job}}}[$__rate_interval]))",
                     "{{stage}}")),
            w=WIDTH, h=height, maximum=1))
        .with_panel(graph(
            "4 · Loader: fetch latency and decode time", "One read request to the ring (sent to answered, retries "
            "included) and one image decoded, all ranks together. Slow fetches: look at the ring below; slow "
            "decoding: the sidecar's CPU.", "s",
            targets((f"histogram_quantile(0.5, sum by (le) "
                     f"(rate(ringfeed_loader_fetch_latency_seconds_bucket{{{job}}}[$__rate_interval])))", "fetch p50"),
                    (f"histogram_quantile(0.99, sum by (le) "
                     f"(rate(ringfeed_loader_fetch_latency_seconds_bucket{{{job}}}[$__rate_interval])))", "fetch p99"),
                    (f"histogram_quantile(0.5, sum by (le) "
                     f"(rate(ringfeed_loader_decode_seconds_bucket{{{job}}}[$__rate_interval])))", "decode p50"),
                    (f"histogram_quantile(0.99, sum by (le) "
                     f"(rate(ringfeed_loader_decode_seconds_bucket{{{job}}}[$__rate_interval])))", "decode p99")),
            w=WIDTH, h=height))
        .with_panel(graph(
            "5 · Ring: read p99 per node", "99th percentile of the reads each Cassandra node coordinated (MAAC's "
            "histogram, in microseconds, converted). One slow node: Ringfeed / Ring has its compactions and drops.",
            "s",
            targets(("histogram_quantile(0.99, sum by (cluster, pod_name, le) "
                     '(rate(org_apache_cassandra_metrics_client_request_latency_bucket{request_type="Read",'
                     'cluster=~"$ring"}[$__rate_interval]))) / 1e6', "{{pod_name}}")),
            w=WIDTH, h=height, limit=0.005))
        .with_panel(graph(
            "6 · Ring: size and scaling steps", "Nodes the ring has, should have and has ready; the orange markers "
            "are scaling steps (a node streaming in or out slows reads for a while).", "none",
            ring_size_targets(rings), w=WIDTH, h=height))
    )


DASHBOARDS: dict[str, Callable[[], builders.Dashboard]] = {
    "ringfeed-overview": overview,
    "ringfeed-ring": ring,
    "ringfeed-training-data-path": training_data_path,
}


def render(build: Callable[[], builders.Dashboard]) -> dict:
    """The dashboard as Grafana's JSON model: panels numbered in order, the annotations' extra fields added."""
    model = build().build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    document = json.loads(json.dumps(model, cls=JSONEncoder))
    for annotation in document.get("annotations", {}).get("list", []):
        if annotation.get("name") == "Ring scaling steps":
            annotation.update(STEP_ANNOTATION_EXTRAS)
    return document


def text(document: dict) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a committed dashboard differs")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="folder of the JSON files")
    args = parser.parse_args(argv)
    stale = []
    for uid, build in DASHBOARDS.items():
        path = args.output / f"{uid}.json"
        wanted = text(render(build))
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != wanted:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(wanted, encoding="utf-8")
    if stale:
        names = ", ".join(str(path.relative_to(REPOSITORY)) if path.is_relative_to(REPOSITORY) else str(path)
                          for path in stale)
        print(f"error: {names} differ from monitoring/dashboards.py; run: python monitoring/dashboards.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
