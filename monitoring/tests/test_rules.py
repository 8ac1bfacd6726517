"""The Prometheus rules of charts/ringfeed/files/monitoring/rules.yaml: promtool's checks and unit tests
(rules_test.yaml), and the coverage of those tests: every alert fires in one case and stays silent in another, every
recording rule's value is checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

MONITORING = Path(__file__).resolve().parent.parent
REPOSITORY = MONITORING.parent
RULES = REPOSITORY / "charts" / "ringfeed" / "files" / "monitoring" / "rules.yaml"
RULE_TESTS = Path(__file__).resolve().with_name("rules_test.yaml")
SEVERITIES = {"critical", "warning", "info"}

sys.path.insert(0, str(MONITORING))
import contract  # noqa: E402


def promtool() -> Path:
    """promtool of `make prometheus`: $RINGFEED_CACHE/prometheus/usr/bin/promtool (RINGFEED_CACHE: <repo>/.cache)."""
    path = Path(os.environ.get("RINGFEED_CACHE", REPOSITORY / ".cache")) / "prometheus" / "usr" / "bin" / "promtool"
    if not path.exists():
        pytest.fail(f"{path} is missing: run make prometheus")
    return path


def run(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(promtool()), *map(str, args)], capture_output=True, text=True, timeout=120)


def load(path: Path) -> dict:
    with path.open(encoding="utf-8") as file:
        return yaml.safe_load(file)


def rules() -> list[dict]:
    return [rule for group in load(RULES)["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


def alert_cases() -> list[dict]:
    return [case for group in load(RULE_TESTS)["tests"] for case in group.get("alert_rule_test", [])]


def test_promtool_check_rules():
    result = run("check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules():
    result = run("test", "rules", RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_read_the_shipped_rules():
    assert [(RULE_TESTS.parent / path).resolve() for path in load(RULE_TESTS)["rule_files"]] == [RULES]


def test_every_alert_fires_in_one_case_and_stays_silent_in_another():
    firing = {case["alertname"] for case in alert_cases() if case.get("exp_alerts")}
    silent = {case["alertname"] for case in alert_cases() if not case.get("exp_alerts")}
    assert not set(alerts()) - firing, f"alerts without a firing case in {RULE_TESTS.name}"
    assert not set(alerts()) - silent, f"alerts without a silent case (exp_alerts: []) in {RULE_TESTS.name}"
    assert not (firing | silent) - set(alerts()), "test cases of alerts that rules.yaml does not define"


def test_every_recording_rule_value_is_checked():
    checked = " ".join(case["expr"] for group in load(RULE_TESTS)["tests"]
                       for case in group.get("promql_expr_test", []))
    unchecked = [rule["record"] for rule in rules() if "record" in rule and rule["record"] not in checked]
    assert not unchecked, f"recording rules without a promql_expr_test in {RULE_TESTS.name}"


def test_alerts_say_how_bad_and_where_to_look():
    for name, rule in alerts().items():
        assert name.startswith("Ringfeed"), name
        assert rule.get("labels", {}).get("severity") in SEVERITIES, name
        assert rule.get("for"), f"{name} fires on a single evaluation"
        annotations = rule.get("annotations", {})
        assert annotations.get("summary", "").strip(), name
        assert len(annotations.get("description", "").split()) >= 15, f"{name}: a description that says what to do"


def test_recording_rules_are_named_level_metric_operations():
    for rule in rules():
        if "record" in rule:
            parts = rule["record"].split(":")
            assert len(parts) == 3 and parts[0] == "ringfeed" and all(parts), rule["record"]


def test_the_tests_input_series_are_in_the_contract():
    """A misspelt input series would test nothing: every series the unit tests feed in is a contract name."""
    known = contract.series_names()
    names = {series["series"].split("{")[0] for group in load(RULE_TESTS)["tests"]
             for series in group.get("input_series", [])}
    assert names and not names - known, sorted(names - known)
