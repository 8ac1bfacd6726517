"""`ringfeed-operator`'s options: --job-resources and --ring-resources are checked before the operator starts, --help
says what runs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import ringfeed_operator
from ringfeed_operator.cli import main
from ringfeed_operator.config import JobsConfig, RingsConfig, parse_job_resources, parse_ring_resources

DEFAULTS = JobsConfig().resources


def test_job_resources_replace_the_roles_given_and_keep_the_others():
    split = {"requests": {"cpu": "500m", "memory": "4Gi"}, "limits": {"memory": 8 * 2**30}}
    resources = parse_job_resources(json.dumps({"split": split}), DEFAULTS)
    assert resources == {"ingest": DEFAULTS["ingest"], "split": split, "sidecar": DEFAULTS["sidecar"]}
    assert parse_job_resources("{}", DEFAULTS) == DEFAULTS


def test_job_resources_from_the_chart_defaults_are_the_operator_defaults():
    chart = '{"ingest":{"limits":{"memory":"4Gi"},"requests":{"cpu":"1","memory":"1Gi"}},' \
            '"split":{"limits":{"memory":"8Gi"},"requests":{"cpu":"1","memory":"2Gi"}},' \
            '"sidecar":{"limits":{"memory":"2Gi"},"requests":{"cpu":"1","memory":"512Mi"}}}'   # helm's toJson
    assert parse_job_resources(chart, DEFAULTS) == DEFAULTS


BAD_JOB_RESOURCES = [
    ("null", "give a JSON object with keys among ingest, split, sidecar, not 'null'"),
    ("5", "give a JSON object with keys among ingest, split, sidecar, not '5'"),
    ('["ingest"]', "give a JSON object with keys among ingest, split, sidecar"),
    ("{ingest: {}}", "not JSON (Expecting property name enclosed in double quotes"),
    ('{"train": {}}', "unknown role 'train': the roles are ingest, split, sidecar"),
    ('{"ingest": "2Gi"}', "ingest: give an object with limits and/or requests"),
    ('{"ingest": null}', "ingest: give an object with limits and/or requests"),
    ('{"split": {"request": {"memory": "4Gi"}}}', "split: unknown field 'request' (fields: limits, requests)"),
    ('{"split": {"claims": [{"name": "gpu"}]}}', "split: unknown field 'claims' (fields: limits, requests)"),
    ('{"split": {"limits": "4Gi"}}', "split.limits: give an object of resource quantities"),
    ('{"split": {"limits": {"memory": "4 GB"}}}', "split.limits.memory: '4 GB' is not a quantity"),
    ('{"split": {"limits": {"memory": true}}}', "split.limits.memory: True is not a quantity"),
    ('{"split": {"limits": {"memory": "NaN"}}}', "split.limits.memory: 'NaN' is not a quantity"),
    ('{"split": {"limits": {"memory": "1_000Mi"}}}', "split.limits.memory: '1_000Mi' is not a quantity"),
    ('{"split": {"limits": {"memory": "4Gb"}}}', "split.limits.memory: '4Gb' is not a quantity"),
    ('{"split": {"limits": {"cpu": "0.5e"}}}', "split.limits.cpu: '0.5e' is not a quantity"),
]


@pytest.mark.parametrize("text,message", BAD_JOB_RESOURCES, ids=[text for text, _ in BAD_JOB_RESOURCES])
def test_bad_job_resources_are_refused_with_the_reason(text: str, message: str):
    with pytest.raises(ValueError) as refused:
        parse_job_resources(text, DEFAULTS)
    assert message in str(refused.value)


@pytest.mark.parametrize("text,message", BAD_JOB_RESOURCES, ids=[text for text, _ in BAD_JOB_RESOURCES])
def test_bad_job_resources_end_the_command_with_a_usage_error(text: str, message: str):
    # A usage error is raised before the operator starts, so no cluster is needed.
    result = CliRunner().invoke(main, ["--metrics-port=0", f"--job-resources={text}"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --job-resources" in result.output and message in " ".join(result.output.split())


def test_ring_resources_from_the_chart_defaults_are_the_operator_defaults():
    chart = '{"limits":{"memory":"4Gi"},"requests":{"cpu":"1","memory":"2Gi"}}'   # helm's toJson
    assert parse_ring_resources(chart) == RingsConfig().resources


BAD_RING_RESOURCES = [
    ("null", "give a JSON object with limits and/or requests, not 'null'"),
    ('{"request": {"cpu": "1"}}', "rings.resources: unknown field 'request' (fields: limits, requests)"),
    ('{"limits": {"memory": "4 GB"}}', "rings.resources.limits.memory: '4 GB' is not a quantity"),
]


@pytest.mark.parametrize("text,message", BAD_RING_RESOURCES, ids=[text for text, _ in BAD_RING_RESOURCES])
def test_bad_ring_resources_end_the_command_with_a_usage_error(text: str, message: str):
    result = CliRunner().invoke(main, ["--metrics-port=0", f"--ring-resources={text}"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --ring-resources" in result.output and message in " ".join(result.output.split())


def test_help_and_package_say_which_kinds_are_reconciled():
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "Reconcile Ringfeed's Dataset, Split, TrainingJob and Ring objects." in " ".join(result.output.split())
    assert "Dataset, Split, TrainingJob and Ring" in " ".join(ringfeed_operator.__doc__.split())
