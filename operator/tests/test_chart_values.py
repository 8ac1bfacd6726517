"""The chart's values are documented everywhere a user looks: a `## @param` line in values.yaml for every value, the
same key typed in values.schema.json, and the same line in the README's table. `helm lint` checks the schema itself
(e2e/tests/test_operator.py); the monitoring values are rendered here when helm is at hand (`make deps` builds it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ringfeed"
HELM = shutil.which("helm", path=REPO / ".cache" / "k8s" / "bin") or shutil.which("helm")
RESERVED_MONITORING = ("serviceMonitor", "podMonitor", "prometheusRule", "dashboards")
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


def test_monitoring_is_shaped_like_the_ecosystems_and_off_but_for_the_service():
    monitoring = VALUES["monitoring"]
    assert monitoring["service"] == {"enabled": True}
    assert all(monitoring[name]["enabled"] is False for name in RESERVED_MONITORING)
    assert (monitoring["dashboards"]["label"], monitoring["dashboards"]["labelValue"]) == ("grafana_dashboard", "1")


def helm_template(*values: str) -> subprocess.CompletedProcess:
    arguments = [part for value in ("crds.install=false", *values) for part in ("--set", value)]  # CRDs: slow YAML
    return subprocess.run([HELM, "template", "ringfeed", str(CHART), *arguments], capture_output=True, text=True,
                          check=False)


@pytest.mark.skipif(HELM is None, reason="helm is not installed (make deps)")
def test_the_metrics_service_carries_the_scrape_annotations_and_reserved_values_are_refused():
    def services(*values: str) -> list[dict]:
        rendered = helm_template(*values)
        assert rendered.returncode == 0, rendered.stderr
        return [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Service"]

    [service] = services()
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}
    assert services("monitoring.service.enabled=false") == [] == services("operator.metricsPort=0")
    for name in RESERVED_MONITORING:
        refused = helm_template(f"monitoring.{name}.enabled=true")
        assert refused.returncode != 0
        assert f"monitoring.{name}.enabled: not rendered by this chart version yet" in refused.stderr
