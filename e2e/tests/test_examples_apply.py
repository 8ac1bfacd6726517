"""Every Ringfeed object the repository shows a user applies as it is: the files of crds/samples/ and each ```yaml
block of the documentation (docs/, the READMEs) that holds a Dataset, Split or TrainingJob.

They are applied with kubectl to the real apiserver (server-side dry run, strict field validation): kubectl reads
YAML as YAML 1.1 through sigs.k8s.io/yaml, where a bare y, n, yes, no, on or off is a boolean, while Python's yaml
reads y and n as strings; only kubectl shows what a user gets. The YAML 1.1 check below needs no cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kubecluster import REPO, Cluster
from test_crd_validation import PLURALS, Api, crds  # noqa: F401  (crds: the module's CRDs fixture)

GROUP = "ringfeed.io"
DOCUMENTS = sorted([*(REPO / "docs").rglob("*.md"), *REPO.glob("*/README.md"), *REPO.glob("*/*/README.md"),
                    REPO / "README.md"])
FENCED_YAML = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)
# Plain scalars that YAML 1.1 (kubectl) reads as booleans; a string among them must be quoted.
YAML11_BOOLEANS = {spelling for word in ("y", "yes", "n", "no", "on", "off", "true", "false")
                   for spelling in (word, word.capitalize(), word.upper())}


@dataclass(frozen=True)
class Example:
    source: str  # path relative to the repository, and the line of the block in a document
    text: str

    @property
    def objects(self) -> list[dict]:
        return [doc for doc in yaml.safe_load_all(self.text) if is_ours(doc)]


def is_ours(document: object) -> bool:
    return (isinstance(document, dict) and str(document.get("apiVersion", "")).startswith(f"{GROUP}/")
            and document.get("kind") in PLURALS)


def examples() -> list[Example]:
    found = [Example(str(path.relative_to(REPO)), path.read_text())
             for path in sorted((REPO / "crds" / "samples").glob("*.yaml"))]
    for path in DOCUMENTS:
        text = path.read_text()
        for block in FENCED_YAML.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            example = Example(f"{path.relative_to(REPO)}:{line}", block.group(1))
            if example.objects:
                found.append(example)
    return found


EXAMPLES = examples()


def test_examples_are_found_for_every_kind():
    kinds = {obj["kind"] for example in EXAMPLES for obj in example.objects}
    assert kinds == set(PLURALS), kinds
    for page in ("dataset", "split", "trainingjob"):   # the Sample section of each API page
        assert any(e.source.startswith(f"docs/api/{page}.md:") for e in EXAMPLES), page


def yaml11_traps(text: str) -> list[str]:
    """Plain (unquoted) scalars that YAML 1.1 reads as booleans but that are not written true or false."""
    traps = []
    for token in yaml.scan(text):
        if (isinstance(token, yaml.ScalarToken) and token.plain and token.value in YAML11_BOOLEANS
                and token.value not in ("true", "false")):
            traps.append(f"line {token.start_mark.line + 1}: {token.value}")
    return traps


def test_yaml11_trap_detection():
    assert yaml11_traps("naturalKeys:\n  - {name: y, type: int}\n  - {name: 'n'}\nsuspend: Off\nok: true\n") == [
        "line 2: y", "line 4: Off"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.source for e in EXAMPLES])
def test_example_has_no_yaml11_boolean_trap(example: Example):
    assert not yaml11_traps(example.text), f"{example.source}: quote these strings: {yaml11_traps(example.text)}"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.source for e in EXAMPLES])
def test_example_applies_to_the_apiserver(cluster: Cluster, crds: Api, namespace: str, example: Example,  # noqa: F811
                                          tmp_path: Path):
    manifest = tmp_path / "example.yaml"
    manifest.write_text(example.text)
    result = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", str(manifest),
                             check=False)
    assert result.returncode == 0, f"{example.source}:\n{result.stderr}"
    applied = [line for line in result.stdout.splitlines() if line.endswith("created (server dry run)")]
    assert len(applied) == len(example.objects), result.stdout
