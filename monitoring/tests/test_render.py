"""monitoring/render.py draws the panels that have results, where their gridPos puts them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from matplotlib import image

MONITORING = Path(__file__).resolve().parent.parent
DASHBOARD = json.loads((MONITORING.parent / "charts" / "ringfeed" / "files" / "monitoring" / "dashboards"
                        / "ringfeed-training-data-path.json").read_text())

sys.path.insert(0, str(MONITORING))
from render import render  # noqa: E402


def test_the_panels_with_results_are_drawn_into_a_png(tmp_path: Path):
    titles = [p["title"] for p in DASHBOARD["panels"] if p.get("targets")]
    results = {"start": 1_800_000_000, "end": 1_800_000_600, "annotations": [1_800_000_300],
               "panels": {title: [{"legend": "rank 0", "values": [[1_800_000_000 + 15 * i, str(i % 7)]
                                                                  for i in range(40)]}] for title in titles}}
    out = tmp_path / "path.png"
    render(DASHBOARD, results, out)
    pixels = image.imread(out)
    assert pixels.shape[1] == 1400 and pixels.shape[0] > 600  # 14 in wide at 100 dpi, one row of panels each
    assert pixels.std() > 0.05  # lines drawn, not a blank page


def test_no_results_is_an_error_not_an_empty_picture(tmp_path: Path):
    with pytest.raises(ValueError, match="no panel"):
        render(DASHBOARD, {"start": 0, "end": 1, "panels": {}}, tmp_path / "x.png")
