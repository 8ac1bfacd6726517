"""The Ring autoscaler's default bounds are the capacity model's (benchmarks/capacity_model.py, from the figures of
docs/benchmarks.md), everywhere they are written: the operator's constants, the CRD's CEL rule and descriptions, the
sample's comment and docs/api/ring.md. A change of a figure that moves them fails here until all of them move."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from ringfeed_operator.builders.ring import DEFAULT_SCALE_DOWN_BELOW, DEFAULT_SCALE_UP_ABOVE

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from capacity_model import autoscaling_bounds, node_reads_per_s  # noqa: E402

UP, DOWN = autoscaling_bounds()
READS = round(node_reads_per_s())


def autoscaling_schema() -> dict:
    crd = yaml.safe_load((REPO / "crds" / "ringfeed.io_rings.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["autoscaling"]


def test_the_operators_defaults_are_the_models():
    assert (DEFAULT_SCALE_UP_ABOVE, DEFAULT_SCALE_DOWN_BELOW) == (UP, DOWN)


def test_the_crd_leaves_the_bounds_to_the_operator_and_states_the_models_defaults():
    schema = autoscaling_schema()
    bounds = schema["properties"]
    # No schema default (the apiserver would fill it for ReadLatencyP99Micros too) and not required.
    assert "required" not in schema
    assert "default" not in bounds["scaleUpAbove"] and "default" not in bounds["scaleDownBelow"]
    crossed = next(rule["rule"] for rule in schema["x-kubernetes-validations"] if "<" in rule["rule"])
    assert re.findall(r"\? self\.(scale\w+) : (\d+)\)", crossed) == [("scaleDownBelow", str(DOWN)),
                                                                      ("scaleUpAbove", str(UP))]
    for field, default in (("scaleUpAbove", UP), ("scaleDownBelow", DOWN)):
        description = " ".join(bounds[field]["description"].split())
        assert f"Default with ReadsPerSecondPerNode: {default}," in description, description
        assert f" {READS} reads/s" in description, description


def test_the_sample_and_the_api_page_state_the_models_defaults():
    said = f"scaleUpAbove {UP} and scaleDownBelow {DOWN} by default"
    assert said in (REPO / "crds" / "samples" / "ring.yaml").read_text()
    page = (REPO / "docs" / "api" / "ring.md").read_text()
    assert said in page
    assert f"**{READS} reads/s**" in page and f"3/4 of that, **{UP}**" in page and f"3/10, **{DOWN}**" in page
    assert f"| int | `{UP}`, `{DOWN}` with `ReadsPerSecondPerNode`" in page
    assert f"an absent bound counts as its default ({UP}, {DOWN})" in page
