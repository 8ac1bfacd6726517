"""The CRDs agree with the code that consumes them, checked without a server (the apiserver's own checks are in
e2e/tests/test_crd_validation.py): the CQL keywords refused as names are the data plane's, no field is left
unchecked where a real schema exists, and quantities follow the apiserver's pattern."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ringfeed.loader import RandomResizedCrop
from ringfeed.schema import CATALOG_KEYSPACE, CQL_RESERVED
from ringfeed_operator.builders.trainingjob import RANDOM_CROP_DEFAULTS
from ringfeed_operator.config import quantity

CRDS = Path(__file__).resolve().parents[2] / "crds"


def crd(plural: str) -> dict:
    return yaml.safe_load((CRDS / f"ringfeed.io_{plural}.yaml").read_text())


def walk(node: object, path: str = ""):
    """(path, schema) of every schema node below node."""
    if isinstance(node, dict):
        yield path, node
        for key, child in node.items():
            yield from walk(child, f"{path}.{key}" if path else key)
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from walk(child, f"{path}[{index}]")


def listed_words(rule: str) -> set[str]:
    """The words of the rule's `in [...]` list."""
    return set(re.findall(r"'([a-z_]+)'", re.search(r" in \[(.*?)\]", rule, re.DOTALL).group(1)))


def test_names_refused_as_cql_keywords_are_the_data_planes():
    rules = [rule["rule"] for _, node in walk(crd("datasets")) for rule in node.get("x-kubernetes-validations", ())]
    keyword_rules = [rule for rule in rules if "'columnfamily'" in rule]
    assert len(keyword_rules) == 4, keyword_rules   # metadata.name, spec.keyspace, naturalKeys[], metadata[]
    for rule in keyword_rules:
        assert listed_words(rule) - {CATALOG_KEYSPACE} == CQL_RESERVED, rule


def test_unknown_fields_are_kept_only_in_the_trainer_pod_template_and_the_loader_states():
    kept = [path for plural in ("datasets", "splits", "trainingjobs")
            for path, node in walk(crd(plural)) if node.get("x-kubernetes-preserve-unknown-fields")]
    root = "spec.versions[0].schema.openAPIV3Schema.properties"
    template = f"{root}.spec.properties.template"
    assert kept == [template, f"{template}.properties.metadata", f"{template}.properties.spec",
                    f"{template}.properties.spec.properties.containers.items",
                    f"{root}.status.properties.ranks.items.properties.position"]


# The API server's own pattern for a resource quantity (500m, 2, 4Gi, 1e3).
QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
                      r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")


# What a container's resources and a volume's size may be: the same, never negative (a Pod with one is refused).
NON_NEGATIVE_QUANTITY = re.compile(QUANTITY.pattern.replace(r"^(\+|-)?", r"^\+?", 1))


def test_quantities_use_the_apiservers_pattern_without_its_sign():
    """Heap and storage sizes are whole bytes or binary units: patterns of their own."""
    patterns = {node["pattern"] for plural in ("datasets", "trainingjobs", "rings") for _, node in walk(crd(plural))
                if node.get("x-kubernetes-int-or-string") and not node["pattern"].startswith("^[0-9]+(")}
    assert patterns == {NON_NEGATIVE_QUANTITY.pattern}
    assert NON_NEGATIVE_QUANTITY.pattern != QUANTITY.pattern
    for text in ("500m", "+2", "1e-3", "4Gi"):
        assert NON_NEGATIVE_QUANTITY.match(text), text
    for text in ("-1", "-0.5Gi", "- 1"):
        assert not NON_NEGATIVE_QUANTITY.match(text), text


@pytest.mark.parametrize("text", ["500m", "2", "4Gi", "1e3", "+1", ".5", "1.5Gi", "2E", "-1", "1E+3", "4 GB", "4Gb",
                                  "NaN", "Infinity", "1_000", " 1", "1ki", "0.5e", "", "Mi"])
def test_the_operators_quantity_reader_takes_what_the_apiservers_pattern_takes(text):
    """config.quantity (kubernetes.utils.parse_quantity and the server's refusals) agrees with the CRDs' pattern."""
    try:
        quantity(text)
        read = True
    except ValueError:
        read = False
    assert read == bool(QUANTITY.match(text)), text


def test_the_random_crop_defaults_are_the_builders_and_torchvisions():
    """The CRD's defaults of spec.loader.decode.randomCrop are those the builder fills in when the field is absent,
    and torchvision's RandomResizedCrop and RandomHorizontalFlip (ratio 4/3 to the thousandth)."""
    loader = crd("trainingjobs")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"]["loader"]["properties"]
    fields = loader["decode"]["properties"]["randomCrop"]["properties"]
    assert {name: field["default"] for name, field in fields.items()} == RANDOM_CROP_DEFAULTS
    torchvision = RandomResizedCrop()
    assert (fields["scaleMinPercent"]["default"] / 100, fields["scaleMaxPercent"]["default"] / 100) == \
        torchvision.scale
    assert fields["ratioMinPermille"]["default"] == round(torchvision.ratio[0] * 1000)
    assert fields["ratioMaxPermille"]["default"] == int(torchvision.ratio[1] * 1000)
    assert fields["flipPercent"]["default"] / 100 == torchvision.flip
