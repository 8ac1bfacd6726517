"""The chart's values are documented everywhere a user looks: a `## @param` line in values.yaml for every value, the
same key typed in values.schema.json, and the same line in the README's table. `helm lint` checks the schema itself
(e2e/tests/test_operator.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "ringfeed"
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
