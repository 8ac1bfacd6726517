"""The chart's values are documented everywhere a user looks: a `## @param` line in values.yaml for every value, the
same key typed in values.schema.json, and the same line in the README's table. `helm lint` checks the schema itself
(e2e/tests/test_operator.py); the monitoring values are rendered here when helm is at hand (`make k8s-binaries`
builds it; `make test` runs these tests after it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ringfeed_operator.builders.cache import labels as cache_labels
from ringfeed_operator.config import parse_network_policy

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ringfeed"
HELM = shutil.which("helm", path=REPO / ".cache" / "k8s" / "bin") or shutil.which("helm")
PROMETHEUS_OPERATOR_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
RULES = yaml.safe_load((CHART / "files" / "monitoring" / "rules.yaml").read_text())
VALUES_TEXT = (CHART / "values.yaml").read_text()
VALUES = yaml.safe_load(VALUES_TEXT)
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
PARAMS = dict(re.findall(r"^\s*## @param (\S+) (.+)$", VALUES_TEXT, re.MULTILINE))


def leaves(node: object, prefix: str = "") -> dict[str, object]:
    """Every value a user sets: scalars, lists and empty maps, by dotted path."""
    if isinstance(node, dict) and node:
        return {path: value for key, child in node.items() for path, value in leaves(child, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): node}


def schema_at(path: str) -> dict:
    node = SCHEMA
    for key in path.split("."):
        node = node["properties"][key]
    return node


def shown(value: object) -> str:
    """A default as the README's Value column shows it (bitnami's readme-generator style)."""
    return value if isinstance(value, str) and value else json.dumps(value)


def test_every_value_has_a_param_line_and_every_param_line_a_value():
    assert sorted(PARAMS) == sorted(leaves(VALUES))


def test_every_value_is_typed_in_the_schema_with_its_description():
    for path, description in PARAMS.items():
        assert schema_at(path)["description"] == description, path


def test_the_schema_forbids_keys_it_does_not_describe():
    def objects(node: dict, where: str):
        if node.get("type") == "object" and "properties" in node:
            yield where, node
            for key, child in node["properties"].items():
                yield from objects(child, f"{where}.{key}".lstrip("."))

    for where, node in objects(SCHEMA, ""):
        assert "additionalProperties" in node, where or "the root"


def test_the_readme_table_lists_every_value_with_its_description_and_default():
    readme = (CHART / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \| `(.*)` \|$", readme, re.MULTILINE)
    defaults = leaves(VALUES)
    assert [name for name, _, _ in rows] == list(PARAMS), "README rows must follow values.yaml's order"
    for name, description, default in rows:
        assert (description, default) == (PARAMS[name], shown(defaults[name])), name


def test_monitoring_is_shaped_like_the_ecosystems():
    monitoring = VALUES["monitoring"]
    assert monitoring["service"] == {"enabled": True} and monitoring["labels"] == {}
    assert all(monitoring[name]["enabled"] is True for name in ("serviceMonitor", "podMonitor", "prometheusRule",
                                                                "dashboards"))
    assert (monitoring["dashboards"]["label"], monitoring["dashboards"]["labelValue"]) == ("grafana_dashboard", "1")


def helm_template(*values: str, api_versions: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    arguments = [part for value in ("crds.install=false", *values) for part in ("--set", value)]  # CRDs: slow YAML
    arguments += [part for version in api_versions for part in ("--api-versions", version)]
    return subprocess.run([HELM, "template", "ringfeed", str(CHART), *arguments], capture_output=True, text=True,
                          check=False)


def rendered(*values: str, api_versions: tuple[str, ...] = ()) -> list[dict]:
    result = helm_template(*values, api_versions=api_versions)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


WITH_PROMETHEUS_OPERATOR = tuple(f"monitoring.coreos.com/v1/{kind}" for kind in PROMETHEUS_OPERATOR_KINDS)


@pytest.mark.skipif(HELM is None, reason="helm is not built (make k8s-binaries)")
def test_the_metrics_service_carries_the_scrape_annotations():
    def services(*values: str) -> list[dict]:
        return [d for d in rendered(*values) if d["kind"] == "Service"]

    [service] = services()
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    assert services("monitoring.service.enabled=false") == [] == services("operator.metricsPort=0")


@pytest.mark.skipif(HELM is None, reason="helm is not built (make k8s-binaries)")
def test_prometheus_operator_objects_come_only_where_its_api_is_served_with_the_selecting_labels():
    assert not [d for d in rendered() if d["kind"] in PROMETHEUS_OPERATOR_KINDS]
    objects = rendered("monitoring.labels.release=kube-prometheus-stack", api_versions=WITH_PROMETHEUS_OPERATOR)
    kinds = sorted(d["kind"] for d in objects if d["kind"] in PROMETHEUS_OPERATOR_KINDS)
    assert kinds == ["PodMonitor", "PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule", "ServiceMonitor"]
    for item in objects:
        if item["kind"] in PROMETHEUS_OPERATOR_KINDS:
            assert item["metadata"]["labels"]["release"] == "kube-prometheus-stack", item["metadata"]["name"]
    [monitor] = [d for d in objects if d["kind"] == "ServiceMonitor"]
    [service] = [d for d in objects if d["kind"] == "Service"]
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items()  # it selects the metrics Service
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The cache tiers' PodMonitor selects the master and worker Pods the operator makes, at their web port.
    [tiers] = [d for d in objects if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-cache-tiers")]
    for role in ("master", "worker"):
        pod_labels = cache_labels("demo", role)
        assert all(pod_labels.get(e["key"]) in e["values"] for e in tiers["spec"]["selector"]["matchExpressions"])
    assert tiers["spec"]["podMetricsEndpoints"][0]["port"] == "web"
    assert not all(cache_labels("demo", "fuse").get(e["key"]) in e["values"]
                   for e in tiers["spec"]["selector"]["matchExpressions"])
    [rule] = [d for d in objects if d["kind"] == "PrometheusRule"]
    assert rule["spec"] == RULES  # the rule file, as promtool tests it
    for name in ("serviceMonitor", "podMonitor", "prometheusRule"):
        off = rendered(f"monitoring.{name}.enabled=false", api_versions=WITH_PROMETHEUS_OPERATOR)
        assert len([d for d in off if d["kind"] in PROMETHEUS_OPERATOR_KINDS]) < len(kinds), name


@pytest.mark.skipif(HELM is None, reason="helm is not built (make k8s-binaries)")
def test_every_dashboard_ships_as_a_configmap_labelled_for_grafanas_sidecar():
    files = sorted((CHART / "files" / "monitoring" / "dashboards").glob("*.json"))
    assert len(files) == 3
    maps = {key: (d["metadata"]["labels"], value) for d in rendered() if d["kind"] == "ConfigMap"
            and d["metadata"]["labels"].get("app.kubernetes.io/component") == "monitoring"
            for key, value in d["data"].items()}
    assert sorted(maps) == [f.name for f in files]
    for file in files:
        labels, text = maps[file.name]
        assert labels["grafana_dashboard"] == "1" and json.loads(text) == json.loads(file.read_text())
    assert not [d for d in rendered("monitoring.dashboards.enabled=false") if d["kind"] == "ConfigMap"
                and d["metadata"]["labels"].get("app.kubernetes.io/component") == "monitoring"]


@pytest.mark.skipif(HELM is None, reason="helm is not built (make k8s-binaries)")
def test_the_network_policy_values_reach_the_operator_with_the_releases_namespace_and_labels():
    def operator_network(*values: str):
        documents = rendered(*values)
        [deployment] = [d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "ringfeed"]
        [argument] = [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                      if a.startswith("--network-policy=")]
        policies = [d for d in documents if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "ringfeed"]
        return parse_network_policy(argument.removeprefix("--network-policy=")), policies, deployment

    network, [policy], deployment = operator_network("networkPolicy.ringClients[0].ipBlock.cidr=10.9.0.0/16")
    assert network.enabled and network.monitoring_namespace == "monitoring"
    assert network.operator_pods == deployment["spec"]["selector"]["matchLabels"] == \
        policy["spec"]["podSelector"]["matchLabels"]
    assert network.cass_operator_pods == {"app.kubernetes.io/name": "cass-operator"}
    assert network.ring_clients == ({"ipBlock": {"cidr": "10.9.0.0/16"}},)
    metrics = next(rule for rule in policy["spec"]["ingress"] if "from" in rule)
    assert metrics["ports"] == [{"protocol": "TCP", "port": 9090}]
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    network, policies, _ = operator_network("networkPolicy.enabled=false", "networkPolicy.cassOperator.namespace=co",
                                            "networkPolicy.cassOperator.podLabels.app=co")
    assert not network.enabled and policies == []
    assert (network.cass_operator_namespace, network.cass_operator_pods) == ("co", {"app": "co"})


@pytest.mark.skipif(HELM is None, reason="helm is not built (make k8s-binaries)")
@pytest.mark.parametrize("account", [(), ("rbac.serviceAccount.name=feeder",)], ids=["default-account", "named"])
def test_the_operators_requests_have_a_priority_level_of_their_own_one_flow_per_namespace(account):
    objects = rendered(*account, "operator.apiPriority.shares=45")
    [deployment] = [d for d in objects if d["kind"] == "Deployment" and d["metadata"]["name"] == "ringfeed"]
    [level] = [d for d in objects if d["kind"] == "PriorityLevelConfiguration"]
    [schema] = [d for d in objects if d["kind"] == "FlowSchema"]
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    assert level["spec"]["limited"]["nominalConcurrencyShares"] == 45
    assert level["spec"]["limited"]["limitResponse"]["type"] == "Queue"  # a burst queues: no 429 while it fits
    assert schema["spec"]["distinguisherMethod"] == {"type": "ByNamespace"}
    # The schema matches the operator's own ServiceAccount, and before the built-in service-accounts (9000).
    [rule] = schema["spec"]["rules"]
    assert rule["subjects"] == [{"kind": "ServiceAccount", "serviceAccount": {
        "name": deployment["spec"]["template"]["spec"]["serviceAccountName"], "namespace": "default"}}]
    assert schema["spec"]["matchingPrecedence"] < 9000
    assert not [d for d in rendered(*account, "operator.apiPriority.enabled=false")
                if d["kind"] in ("PriorityLevelConfiguration", "FlowSchema")]
    refused = helm_template("operator.apiPriority.shares=0")
    assert refused.returncode != 0 and "shares" in refused.stderr
