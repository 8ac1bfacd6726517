"""Render a dashboard's panels to a PNG from Prometheus query results, laid out by the dashboard JSON's gridPos:
how the ★ training-data-path dashboard of docs/observability.md is drawn without a Grafana server.

    python monitoring/render.py DASHBOARD.json RESULTS.json OUT.png

RESULTS.json is what e2e/tests/test_observability.py saves: {"start": s, "end": s, "panels": {title: [{"legend": str,
"values": [[t, v], ...]}, ...]}, "annotations": [t, ...]} (the annotations' times: scaling steps, drawn as lines).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.dates as mdates  # noqa: E402  (after the backend is chosen)
import matplotlib.pyplot as plt  # noqa: E402

GRID_COLUMNS = 24  # Grafana's grid
ROW_INCHES = 0.32  # one gridPos unit of height
HEADER_INCHES, TITLE_INCHES, TICKS_INCHES = 0.6, 0.3, 0.35  # the dashboard's title; each panel's title; time labels
UNITS = {"percentunit": "share, 1 = 100 %", "s": "seconds", "bytes": "bytes", "short": ""}  # Grafana's unit ids


def legend(format_: str, labels: dict[str, str]) -> str:
    """A target's legendFormat with its {{label}}s filled in, as Grafana shows it."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m[1], ""), format_) if format_ else str(labels)


def render(dashboard: dict, results: dict, out: Path) -> None:
    """One axes per panel with results, placed by gridPos, all sharing the time axis."""
    placed = sorted((p for p in dashboard["panels"] if p.get("targets") and p["title"] in results["panels"]),
                    key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    if not placed:
        raise ValueError("no panel of the dashboard has results")
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in placed)
    height_in = bottom * ROW_INCHES + HEADER_INCHES
    figure = plt.figure(figsize=(14, height_in))
    figure.suptitle(dashboard["title"], x=0.01, ha="left", fontsize=13)
    times = [dt.datetime.fromtimestamp(t, dt.UTC) for t in (results["start"], results["end"])]
    first = None
    for panel in placed:
        grid = panel["gridPos"]
        left, width = grid["x"] / GRID_COLUMNS, grid["w"] / GRID_COLUMNS
        cell_top = 1 - (HEADER_INCHES + grid["y"] * ROW_INCHES) / height_in
        cell_height = grid["h"] * ROW_INCHES / height_in
        axes = figure.add_axes((left + 0.05 * width, cell_top - cell_height + TICKS_INCHES / height_in,
                                0.92 * width, cell_height - (TICKS_INCHES + TITLE_INCHES) / height_in), sharex=first)
        first = first or axes
        for series in results["panels"][panel["title"]]:
            stamps = [dt.datetime.fromtimestamp(t, dt.UTC) for t, _ in series["values"]]
            axes.plot(stamps, [float(v) for _, v in series["values"]], linewidth=1.2, label=series["legend"])
        for step in results.get("annotations", ()):
            axes.axvline(dt.datetime.fromtimestamp(step, dt.UTC), color="#c33", linestyle="--", linewidth=0.8)
        unit = UNITS.get((panel.get("fieldConfig") or {}).get("defaults", {}).get("unit", ""), "")
        axes.set_title(f"{panel['title']}" + (f"  [{unit}]" if unit else ""), loc="left", fontsize=10)
        axes.set_xlim(*times)
        axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
        axes.grid(alpha=0.3)
        if results["panels"][panel["title"]]:
            axes.legend(fontsize=7, loc="upper left", ncol=4, framealpha=0.6)
    figure.savefig(out, dpi=100)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dashboard", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    render(json.loads(args.dashboard.read_text()), json.loads(args.results.read_text()), args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
