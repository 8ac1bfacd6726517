"""The README's benchmark figures are docs/benchmarks.md's: every number of its "## Benchmarks" section appears
there, written the same way (copied, not rounded or remembered)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# A number as written: 2,829 · 16.73 · 0.999 · 4,350 (not the digits inside a name such as H200 or bench_wan2).
NUMBER = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])")


def section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    following = text.find("\n## ", start + 1)
    return text[start:following if following != -1 else len(text)]


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text))


def missing_figures(readme: str, benchmarks: str) -> list[str]:
    return sorted(numbers(section(readme, "## Benchmarks")) - numbers(benchmarks),
                  key=lambda n: float(n.replace(",", "")))


def test_every_readme_benchmark_figure_is_in_docs_benchmarks():
    readme = (REPO / "README.md").read_text()
    figures = numbers(section(readme, "## Benchmarks"))
    assert {"2,829", "16.73", "0.94"} <= figures, sorted(figures)  # the section was found and read
    missing = missing_figures(readme, (REPO / "docs" / "benchmarks.md").read_text())
    assert not missing, f"README figures not in docs/benchmarks.md: {missing}"


def test_a_figure_that_is_not_in_the_benchmarks_page_is_found():
    readme = "# R\n\n## Benchmarks\n\ningest at 2,830 samples/s, 1.4 s and 0.94 of local disk (H200)\n\n## Next\n9.99\n"
    assert missing_figures(readme, "2,829 samples/s; 0.94; 1.35 s") == ["1.4", "2,830"]
