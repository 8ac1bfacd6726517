"""The chart's global.imagePullSecrets reach every Pod the operator makes: Jobs, TrainingJob ranks (beside the
template's own), cache tiers and Ring nodes; without any, no Pod spec changes."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner
from test_builders import DATASET, SETTINGS
from test_cache_builders import CACHE, cached
from test_ring_builders import RING, RINGS
from test_trainingjob_builders import trainingjob

from ringfeed_operator.builders.cache import cache_objects
from ringfeed_operator.builders.datacenter import datacenter
from ringfeed_operator.builders.jobs import ingest_job, split_job
from ringfeed_operator.builders.trainingjob import rank_job
from ringfeed_operator.cli import main
from ringfeed_operator.config import NetworkConfig, parse_secret_names

SECRETS = ("registry-login", "mirror-login")
EXPECTED = [{"name": "registry-login"}, {"name": "mirror-login"}]
SPLIT = {"apiVersion": "ringfeed.io/v1alpha1", "kind": "Split",
         "metadata": {"name": "by-patient", "namespace": "ml", "uid": "u-1"}, "spec": {"dataset": "slides"}}


def pod_specs(secrets: tuple[str, ...], template_secrets: list[dict] | None = None) -> dict[str, dict]:
    jobs = dataclasses.replace(SETTINGS, image_pull_secrets=secrets)
    cache = dataclasses.replace(CACHE, image_pull_secrets=secrets)
    rings = dataclasses.replace(RINGS, image_pull_secrets=secrets)
    body = trainingjob()
    if template_secrets is not None:
        body["spec"]["template"]["spec"]["imagePullSecrets"] = template_secrets
    specs = {
        "ingest": ingest_job(DATASET, "tumour_slides", "f1", jobs)["spec"]["template"]["spec"],
        "split": split_job(SPLIT, DATASET, "tumour_slides", ["--ratios=7,2,1"], jobs)["spec"]["template"]["spec"],
        "ranks": rank_job(body, DATASET, "tumour_slides", 3, jobs, cache)["spec"]["template"]["spec"],
        "ring": datacenter(RING, rings)["spec"]["podTemplateSpec"]["spec"],
    }
    for obj in cache_objects(cached(), "tumour_slides", cache, NetworkConfig()):
        if obj["kind"] in ("StatefulSet", "DaemonSet"):
            specs[f"cache {obj['metadata']['name']}"] = obj["spec"]["template"]["spec"]
    return specs


def test_every_pod_the_operator_makes_pulls_with_the_charts_secrets():
    specs = pod_specs(SECRETS)
    assert len([name for name in specs if name.startswith("cache")]) == 3
    for name, spec in specs.items():
        assert spec["imagePullSecrets"] == EXPECTED, name


def test_without_secrets_no_pod_spec_gains_the_field():
    for name, spec in pod_specs(()).items():
        assert "imagePullSecrets" not in spec, name


def test_a_trainingjob_templates_own_secrets_come_first_and_are_not_repeated():
    given = [{"name": "team-registry"}, {"name": "mirror-login"}]
    ranks = pod_specs(SECRETS, given)["ranks"]
    assert ranks["imagePullSecrets"] == [*given, {"name": "registry-login"}]


@pytest.mark.parametrize(("text", "names"), [
    ("", ()), ("a", ("a",)), ("a,b", ("a", "b")), (" a , b ,", ("a", "b")), ("a,a", ("a",)),
    ("login.registry-1", ("login.registry-1",)),
])
def test_secret_names(text, names):
    assert parse_secret_names(text) == names


@pytest.mark.parametrize("text", ["Upper", "a_b", "-a", "a-", "a..b", "a/b", "x" * 254])
def test_a_name_no_secret_can_have_is_a_usage_error(text):
    result = CliRunner().invoke(main, ["--metrics-port=0", f"--image-pull-secrets={text}"])
    assert result.exit_code == 2, result.output
    assert "--image-pull-secrets" in result.output and "is not a Secret name" in result.output
