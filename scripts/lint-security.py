#!/usr/bin/env python3
"""`make lint-security`: checkov's Kubernetes checks on everything Ringfeed puts in a cluster.

- the chart, rendered by `helm template` with each value set charts/ringfeed/ci/*-values.yaml (helm's convention);
- every kind of object the operator makes, built by its real builders (scripts/render-operator-objects.py).

Each source is written one object per file into a scratch folder and checked by its own checkov run (checkov's
graph checks, NetworkPolicy coverage for one, see every object of a run as living side by side: the chart's value
sets are alternatives, the operator's objects share a namespace).

Skips come from checkov-skips.yaml, each with its reason. One scoped to objects becomes checkov's own suppression
on exactly those objects (a `checkov.io/skipN: CHECK=reason` annotation added to the scratch copy, which checkov
reports as skipped); one without objects is a `--skip-check` of the whole run. A scoped skip that no longer matches
anything fails the run, so that the list shrinks as findings are fixed.

Exit 0 when checkov finds nothing outside the skips; 1 otherwise, with the findings grouped by check.

    .venv/bin/python scripts/lint-security.py --checkov .cache/checkov-venv/bin/checkov --helm .cache/k8s/bin/helm
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "ringfeed"
RELEASE, RELEASE_NAMESPACE = "ringfeed", "ringfeed"
# Value sets rendered as if the cluster served these APIs (helm template knows no cluster): the production set
# runs where the Prometheus Operator is installed, so its ServiceMonitor, PodMonitors and PrometheusRule render.
API_VERSIONS = {"production": ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor",
                               "monitoring.coreos.com/v1/PrometheusRule"]}
SKIP_ANNOTATION = re.compile(r"^checkov\.io/skip\d+$")
CONTAINER_KEY = re.compile(r"(initContainers|containers)/\[(\d+)\]")


class NoAliases(yaml.SafeDumper):
    """Every object written out in full: the same dict used twice is not a YAML alias."""

    def ignore_aliases(self, data: object) -> bool:
        return True


@dataclasses.dataclass(frozen=True)
class Skip:
    check: str
    reason: str
    sources: tuple[str, ...]  # globs over sources: chart/default, operator/ring, ...; empty: a global skip
    kinds: tuple[str, ...]
    names: tuple[str, ...]  # globs over metadata.name

    @property
    def scoped(self) -> bool:
        return bool(self.sources or self.kinds or self.names)

    def covers(self, source: str, obj: dict) -> bool:
        def match(patterns: tuple[str, ...], value: str) -> bool:
            return not patterns or any(fnmatch.fnmatchcase(value, p) for p in patterns)
        return (match(self.sources, source) and match(self.kinds, obj.get("kind", ""))
                and match(self.names, obj.get("metadata", {}).get("name", "")))

    def describe(self) -> str:
        scope = [f"{key} {', '.join(values)}" for key, values in
                 (("source", self.sources), ("kind", self.kinds), ("name", self.names)) if values]
        return f"{self.check} ({'; '.join(scope) or 'everywhere'})"


def as_tuple(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else (str(value),)


def load_skips(path: Path) -> list[Skip]:
    entries = (yaml.safe_load(path.read_text()) or {}).get("skips") or []
    skips = []
    for number, entry in enumerate(entries, 1):
        unknown = set(entry) - {"check", "reason", "source", "kind", "name"}
        if unknown or not entry.get("check") or not str(entry.get("reason") or "").strip():
            raise SystemExit(f"{path}: skip #{number} needs `check` and `reason` (and may have `source`, `kind`, "
                             f"`name`){'; unknown: ' + ', '.join(sorted(unknown)) if unknown else ''}")
        skips.append(Skip(str(entry["check"]), " ".join(str(entry["reason"]).split()), as_tuple(entry.get("source")),
                          as_tuple(entry.get("kind")), as_tuple(entry.get("name"))))
    return skips


def helm_template(helm: str, values: Path, value_set: str) -> list[dict]:
    command = [helm, "template", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--values", str(values)]
    for api in API_VERSIONS.get(value_set, ()):
        command += ["--api-versions", api]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"helm template with {values.relative_to(REPO)} failed:\n{done.stderr}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def write_objects(folder: Path, objects: list[dict]) -> None:
    folder.mkdir(parents=True)
    for number, obj in enumerate(objects):
        meta = obj.get("metadata") or {}
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{obj.get('kind')}--{meta.get('name')}")
        (folder / f"{number:03d}-{name}.yaml").write_text(yaml.dump(obj, Dumper=NoAliases, sort_keys=False))


def read_objects(run: str, folder: Path) -> dict[Path, tuple[str, dict]]:
    """{file: (source, object)}: a chart run's source is the run; the operator's is each file's <source>-- prefix."""
    return {path: (run if run.startswith("chart/") else f"{run}/{path.name.split('--', 1)[0]}",
                   yaml.safe_load(path.read_text())) for path in sorted(folder.glob("*.yaml"))}


def annotate(objects: dict[Path, tuple[str, dict]], skips: list[Skip]) -> None:
    """Adds checkov's suppression annotation of every scoped skip to the objects it covers (scratch copies only)."""
    for path, (source, obj) in objects.items():
        annotations = (obj.setdefault("metadata", {}).get("annotations") or {})
        if any(SKIP_ANNOTATION.match(key) for key in annotations):
            raise SystemExit(f"{source}: {obj.get('kind')} {obj['metadata'].get('name')} carries its own "
                             "checkov.io/skip annotation: put the skip in checkov-skips.yaml instead")
        covering = [skip for skip in skips if skip.scoped and skip.covers(source, obj)]
        if not covering:
            continue
        for number, skip in enumerate(covering, 1):
            annotations[f"checkov.io/skip{number}"] = f"{skip.check}={skip.reason}"
        obj["metadata"]["annotations"] = annotations
        path.write_text(yaml.dump(obj, Dumper=NoAliases, sort_keys=False))


def start_checkov(checkov: str, scratch: Path, folder: Path, global_skips: list[str]) -> subprocess.Popen:
    command = [checkov, "--directory", str(folder.relative_to(scratch)), "--framework", "kubernetes", "--output",
               "json", "--skip-download", "--compact"]
    if global_skips:
        command += ["--skip-check", ",".join(global_skips)]
    # BC_SKIP_MAPPING: no download of check guidelines either (there is no network in CI).
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "LOG_LEVEL": "WARNING"}
    return subprocess.Popen(command, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@dataclasses.dataclass(frozen=True)
class Result:
    check: str
    title: str  # the check's
    source: str
    kind: str
    object: str  # metadata.name
    namespace: str  # "" for cluster-scoped objects
    container: str  # the (first) container the check found wrong, "" when it looked at the whole Pod
    reason: str | None = None  # a skip's


def container(obj: dict, evaluated_keys: list[str] | tuple[()]) -> str:
    """The name of the container a check's evaluated key points into (checkov reports the first wrong one)."""
    for key in evaluated_keys:
        if match := CONTAINER_KEY.search(key):
            pod = obj.get("spec") or {}
            if obj.get("kind") != "Pod":
                pod = ((pod.get("jobTemplate") or {}).get("spec") or pod).get("template", {}).get("spec") or {}
            containers = pod.get(match[1]) or []
            index = int(match[2])
            if index < len(containers):
                return str(containers[index].get("name", index)) + (" (init)" if match[1] == "initContainers" else "")
    return ""


def results(run: str, scratch: Path, process: subprocess.Popen, objects: dict[Path, tuple[str, dict]]) -> tuple[
        list[Result], list[Result], int]:
    """(failed, skipped, passed) of one checkov run."""
    stdout, stderr = process.communicate()
    (scratch / f"checkov-{run.replace('/', '-')}.json").write_text(stdout)  # kept with --keep
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"checkov on {run} gave no report (exit {process.returncode}):\n{stderr[-4000:]}"
                         ) from None
    reports = report if isinstance(report, list) else [report]
    kubernetes = [r for r in reports if r.get("check_type") == "kubernetes"]
    if not kubernetes:  # checkov's answer when it found nothing to check
        raise SystemExit(f"checkov checked no Kubernetes object of {run}:\n{stdout[:2000]}{stderr[-2000:]}")
    summary = kubernetes[0]["summary"]
    if summary.get("parsing_errors"):
        raise SystemExit(f"checkov could not parse {summary['parsing_errors']} file(s) of {run}:\n{stderr[-4000:]}")

    def result(entry: dict) -> Result:
        source, obj = objects.get(scratch / entry["file_path"].lstrip("/"), (run, {}))
        meta = obj.get("metadata") or {}
        name = meta.get("name", entry["resource"])
        return Result(entry["check_id"], entry["check_name"], source, obj.get("kind", "?"), name,
                      meta.get("namespace", ""), container(obj, (entry.get("check_result") or {}).get(
                          "evaluated_keys") or ()), (entry.get("check_result") or {}).get("suppress_comment"))

    results = kubernetes[0]["results"]
    return ([result(e) for e in results.get("failed_checks", ())],
            [result(e) for e in results.get("skipped_checks", ())], summary["passed"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkov", required=True, help="the checkov executable (its own venv)")
    parser.add_argument("--helm", required=True, help="the helm executable")
    parser.add_argument("--skips", type=Path, default=REPO / "checkov-skips.yaml")
    parser.add_argument("--keep", type=Path, help="write the rendered objects and checkov's reports here and keep them")
    args = parser.parse_args()

    skips = load_skips(args.skips)
    global_skips = sorted({skip.check for skip in skips if not skip.scoped})
    version = subprocess.run([args.checkov, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    scratch = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="lint-security-"))
    scratch.mkdir(parents=True, exist_ok=bool(not args.keep))
    running: dict[str, subprocess.Popen] = {}
    try:
        runs: dict[str, Path] = {}  # one checkov run each: a chart value set, the operator's objects
        for values in sorted((CHART / "ci").glob("*-values.yaml")):
            value_set = values.name.removesuffix("-values.yaml")
            runs[f"chart/{value_set}"] = scratch / "chart" / value_set
            write_objects(runs[f"chart/{value_set}"], helm_template(args.helm, values, value_set))
        runs["operator"] = scratch / "operator"
        subprocess.run([sys.executable, str(REPO / "scripts" / "render-operator-objects.py"), str(runs["operator"])],
                       check=True, stdout=subprocess.DEVNULL)
        objects = {run: read_objects(run, folder) for run, folder in runs.items()}
        for run_objects in objects.values():
            annotate(run_objects, skips)
        for run, folder in runs.items():
            running[run] = start_checkov(args.checkov, scratch, folder, global_skips)
        failed: list[Result] = []
        skipped: list[Result] = []
        print(f"lint-security: checkov {version}, --framework kubernetes"
              + (f", --skip-check {','.join(global_skips)}" if global_skips else ""))
        for run, process in running.items():
            run_failed, run_skipped, passed = results(run, scratch, process, objects[run])
            failed += run_failed
            skipped += run_skipped
            print(f"  {run:<34} {len(objects[run]):3d} objects: {passed:4d} passed, {len(run_failed):3d} failed, "
                  f"{len(run_skipped):3d} skipped")
    finally:
        for process in running.values():  # still running after a failure: not needed any more
            if process.poll() is None:
                process.kill()
                process.wait()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)

    stale = [skip for skip in skips if skip.scoped and not any(
        r.check == skip.check and r.reason == skip.reason and skip.covers(r.source, {
            "kind": r.kind, "metadata": {"name": r.object}}) for r in skipped)]
    if skipped:
        print(f"\nskipped by {args.skips.name}:")
        for skip in skips:
            covered = sorted({(r.source, r.kind, r.object) for r in skipped if r.check == skip.check
                              and r.reason == skip.reason})
            if covered:
                print(f"    {skip.describe()}: {len(covered)} object(s)")
    if failed:
        by_check: dict[tuple[str, str], list[Result]] = collections.defaultdict(list)
        for r in failed:
            by_check[r.check, r.title].append(r)
        print(f"\n{len(failed)} finding(s) outside {args.skips.name}, by check:")
        for (check, title), found in sorted(by_check.items(), key=lambda item: (-len(item[1]), item[0])):
            print(f"\n{check}  {title}  ({len(found)})")
            for r in sorted(set(found), key=lambda r: (r.source, r.kind, r.object)):
                where = f"{r.namespace}/{r.object}" if r.namespace else r.object
                print(f"    {r.source:<30} {r.kind:<12} {where}" + (f"  [container {r.container}]" if r.container
                                                                     else ""))
    if stale:
        print(f"\n{len(stale)} skip(s) of {args.skips.name} that no longer match anything (remove them):")
        for skip in stale:
            print(f"    {skip.describe()}")
    if failed or stale:
        print(f"\nFix the objects, or, where a finding is inherent to the design, add a skip with its reason to "
              f"{args.skips.name} (docs/development.md, Security lint).")
        return 1
    print(f"lint-security: no finding outside {args.skips.name} ({len(skipped)} skipped, each with its reason)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
