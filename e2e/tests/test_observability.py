"""Observability on real parts, run last (conftest orders it): the session's Prometheus has scraped the operator, the
TrainingJobs' sidecars, the Rings' Cassandra nodes and the ring test's own loader while the other modules ran their
scenarios (a Ring resized under load, TrainingJobs trained) and evaluated the chart's rules. Every panel query of
every shipped dashboard and every rule expression runs against it here, over the whole session, and must answer
without error and (but for the few listed below, with the reason) with data. The Prometheus Operator's objects of
the chart are validated by the API server against that operator's own CRDs (v0.85.0, from its Go module).
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ARTIFACTS
from kubecluster import CACHE, CHART, REPO, Cluster
from prometheus import RULES, Prometheus
from test_ring import READER_JOB, RING

sys.path.insert(0, str(REPO / "monitoring"))
from render import legend, render  # noqa: E402  (monitoring/ is not a package)

DASHBOARDS = CHART / "files" / "monitoring" / "dashboards"
PROMETHEUS_OPERATOR_CRDS = CACHE / "prometheus-operator" / "crds"
STEP_S = 15
NAMESPACE = "e2e-prometheus-operator"
# Panels that may stay empty in this session's scenarios, and why.
CACHE_PANELS = {"Cache tier reads by source", "Memory tier used", "Cache workers", "Blocks evicted"}
MAY_BE_EMPTY = {
    "Reconcile errors": "a handler error is counted only when one happens",
    "Dropped messages/s": "only drops above zero are drawn; a healthy ring drops none",
    "Scaling state": "ringfeed_ring_scaling_held exists only while a step waits",
}
# Rules whose inputs this session does not produce, and why.
RULES_WITHOUT_INPUT = {
    "RingfeedIngestRejectsHigh": "the ingest Jobs do not serve metrics yet",
}


def panels(dashboard: dict):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", ())


def queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expr) of every panel target and annotation of the shipped dashboards."""
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in panels(dashboard):
            found += [(dashboard["uid"], panel["title"], t["expr"]) for t in panel.get("targets", ()) if t.get("expr")]
        found += [(dashboard["uid"], f"annotation {a['name']}", a["expr"])
                  for a in dashboard.get("annotations", {}).get("list", ()) if a.get("expr")]
    return found


def substituted(expr: str, variables: dict[str, str], range_s: int) -> str:
    """Grafana's variables as Grafana would put them in."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", f"{STEP_S}s")
    expr = expr.replace("$__range", f"{range_s}s")
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m[1], m[0]), expr)


@pytest.fixture(scope="module")
def window(prometheus: Prometheus) -> tuple[float, float]:
    """The session so far, after one more rule evaluation."""
    time.sleep(2 * STEP_S)
    return prometheus.started, time.time()


def label_values(prometheus: Prometheus, expr: str, label: str, window: tuple[float, float]) -> set[str]:
    return {series["metric"].get(label, "") for series in prometheus.query_range(expr, *window, STEP_S)}


def busiest_trainingjob(prometheus: Prometheus, window: tuple[float, float]) -> tuple[str, str]:
    """(namespace, trainingjob) of the TrainingJob whose sidecars delivered the most samples in the session."""
    delivered: dict[tuple[str, str], float] = {}
    for series in prometheus.query_range('ringfeed_loader_samples_total{job="ringfeed-sidecar"}', *window, STEP_S):
        key = (series["metric"]["namespace"], series["metric"]["trainingjob"])
        delivered[key] = delivered.get(key, 0.0) + max(float(value) for _, value in series["values"])
    assert delivered, "the TrainingJob modules run before this one"
    return max(delivered, key=delivered.__getitem__)


def test_every_kind_of_target_was_scraped(prometheus: Prometheus, window):
    for job in ("ringfeed-operator", "ringfeed-sidecar", "cassandra", "ringfeed-loader", "alluxio"):
        up = prometheus.query_range(f'up{{job="{job}"}} == 1', *window, STEP_S)
        assert up, f"no target of job {job} was ever up: see artifacts/prometheus.log"


def test_every_dashboard_query_answers_with_data(prometheus: Prometheus, window):
    start, end = window
    reader_namespaces = label_values(prometheus, f'ringfeed_loader_samples_total{{trainingjob="{READER_JOB}"}}',
                                     "namespace", window)
    assert reader_namespaces, "the ring module runs before this one"
    # The ring test's namespace and loader (its reads while the ring scaled), for every dashboard; for the training
    # data path also the sidecars (the trainer stage) of the TrainingJob that read the most (several modules run
    # TrainingJobs, some too briefly for a rate; their namespaces have no Ring: any ring's panels).
    reader = {"namespace": next(iter(reader_namespaces)), "trainingjob": READER_JOB, "ring": RING}
    namespace, trainingjob = busiest_trainingjob(prometheus, window)
    sidecars = {"namespace": namespace, "trainingjob": trainingjob, "ring": ".*"}
    # The cache tier test's namespace for the panels of the cache tiers (no other module runs one).
    cache_namespaces = label_values(prometheus, 'Cluster_Workers{job="alluxio"}', "namespace", window)
    assert cache_namespaces, "the cache tier module runs before this one"
    cache = {"namespace": next(iter(cache_namespaces)), "trainingjob": "", "ring": ".*"}
    failures, empty = [], []
    for uid, title, expr in queries():
        if title in CACHE_PANELS:
            candidates = (cache,)
        elif uid == "ringfeed-training-data-path":
            candidates = (reader, sidecars)
        else:
            candidates = (reader,)
        for variables in candidates:
            query = substituted(expr, variables, int(end - start))
            try:
                result = prometheus.query_range(query, start, end, STEP_S)
            except ValueError as error:
                failures.append(f"{uid} / {title}: {query}: {error}")
                continue
            if not result and title not in MAY_BE_EMPTY:
                empty.append(f"{uid} / {title} ({variables['trainingjob']}): {query}")
    assert not failures, "\n".join(failures)
    assert not empty, "no data:\n" + "\n".join(empty)
    draw_training_data_path(prometheus, reader, window)


def draw_training_data_path(prometheus: Prometheus, variables: dict[str, str], window: tuple[float, float]) -> None:
    """The ★ dashboard's panels for the ring test's loader, drawn from Prometheus' answers (artifacts/observability;
    docs/observability.md shows one such picture)."""
    start, end = window
    dashboard = json.loads((DASHBOARDS / "ringfeed-training-data-path.json").read_text())
    results: dict = {"start": start, "end": end, "panels": {}, "annotations": []}
    for panel in panels(dashboard):
        drawn = results["panels"].setdefault(panel["title"], []) if panel.get("targets") else []
        for target in panel.get("targets", ()):
            for series in prometheus.query_range(substituted(target["expr"], variables, int(end - start)), start,
                                                 end, STEP_S):
                drawn.append({"legend": legend(target.get("legendFormat", ""), series["metric"]),
                              "values": series["values"]})
    for annotation in dashboard.get("annotations", {}).get("list", ()):
        if annotation.get("expr"):
            for series in prometheus.query_range(substituted(annotation["expr"], variables, int(end - start)),
                                                 start, end, STEP_S):
                stamps = [t for t, _ in series["values"]]
                results["annotations"] += [t for before, t in zip([None, *stamps], stamps, strict=False)
                                           if before is None or t - before > STEP_S]  # each step's first point
    folder = ARTIFACTS / "observability"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "training-data-path.json").write_text(json.dumps(results))
    render(dashboard, results, folder / "training-data-path.png")


def test_every_rule_expression_evaluates_and_every_recording_rule_was_recorded(prometheus: Prometheus, window):
    failures = []
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            try:
                prometheus.query_range(rule["expr"], *window, STEP_S)
            except ValueError as error:
                failures.append(f"{name}: {error}")
                continue
            if "record" in rule and not prometheus.query_range(name, *window, STEP_S):
                failures.append(f"{name}: Prometheus recorded no series from the rule file")
    assert not failures, "\n".join(failures)
    alerts = prometheus.api("rules", type="alert")["groups"]
    loaded = {rule["name"] for group in alerts for rule in group["rules"]}
    assert {"RingfeedLoaderStalling", "RingfeedRingReadLatencyHigh", "RingfeedRingScalingStuck"} <= loaded
    assert not [rule for group in alerts for rule in group["rules"] if rule.get("health") not in ("ok", None)]


def test_the_prometheus_operator_objects_pass_its_own_crds(cluster: Cluster, tmp_path: Path):
    """The chart as it renders where the Prometheus Operator's API is served, created against v0.85.0's CRDs."""
    crds = [PROMETHEUS_OPERATOR_CRDS / f"monitoring.coreos.com_{kind}.yaml"
            for kind in ("servicemonitors", "podmonitors", "prometheusrules")]
    assert all(path.exists() for path in crds), f"{PROMETHEUS_OPERATOR_CRDS}: run make prometheus"
    for path in crds:
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    try:
        for path in crds:
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
        api_versions = [f"--api-versions=monitoring.coreos.com/v1/{kind}"
                        for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
        rendered = cluster.helm("template", "ringfeed", str(CHART), "-n", NAMESPACE, "--set", "crds.install=false",
                                "--set", "monitoring.labels.release=kube-prometheus-stack", *api_versions).stdout
        objects = [d for d in yaml.safe_load_all(rendered) if d and d["apiVersion"].startswith("monitoring.coreos")]
        assert sorted(d["kind"] for d in objects) == [*["PodMonitor"] * 4, "PrometheusRule", "ServiceMonitor"]
        cluster.kubectl("create", "namespace", NAMESPACE)
        manifest = tmp_path / "prometheus-operator-objects.yaml"
        manifest.write_text(yaml.safe_dump_all(objects))
        created = cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(manifest), check=False)
        assert created.returncode == 0, created.stderr  # the API server checks each against its CRD's schema
        broken = dict(objects[0], spec={**objects[0]["spec"], "namespaceSelector": {"any": "everywhere"}})
        manifest.write_text(yaml.safe_dump(broken))
        refused = cluster.kubectl("apply", "--server-side", "-n", NAMESPACE, "-f", str(manifest), check=False)
        assert refused.returncode != 0 and "namespaceSelector" in refused.stderr  # the schema is really applied
    finally:
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", check=False)
        for path in crds:
            cluster.kubectl("delete", "-f", str(path), "--ignore-not-found", "--wait=true", check=False, timeout=120)
