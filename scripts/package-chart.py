"""`make chart`: the Helm chart as a package for one registry, and pushed there as an OCI artifact.

The package differs from charts/ringfeed in three ways only: the CRDs are copied in (the source chart links them from
the repository's crds/, which a copied chart would lose), every image names that registry, and every image is pinned
by the digest `images/build.sh push` recorded for it there. It refuses to package an image that was not pushed, or
whose pushed tag is not the chart's.

    python scripts/package-chart.py --helm HELM --pushed .cache/images/pushed/<registry> --registry R --out DIR
        [--chart CHART] [--push [--ca-file CA] [--registry-config AUTH]]

CHART is charts/ringfeed by default; a packaged chart (.tgz) is packaged again for the registry (the upgrade e2e's
previous release).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "ringfeed"
# values.yaml path of each image → the image's name as images/build.sh pushes it (<registry>/ringfeed/<name>).
IMAGES = {
    "operator.image": "operator",
    "jobs.image": "dataplane",
    "cache.image": "alluxio",
    "rings.image": "cassandra-maac",
    "cassOperator.image": "cass-operator",
    "cassOperator.configBuilderImage": "k8ssandra-client",
}
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")


def pushed_images(folder: Path) -> dict[str, tuple[str, str]]:
    """name → (tag, digest) from the records `images/build.sh push` writes: '<image id> <digest> <reference>'."""
    images = {}
    for name in IMAGES.values():
        record = folder / name
        if not record.is_file():
            sys.exit(f"error: {name} was never pushed to this registry ({record} missing); run: make push")
        _, digest, reference = record.read_text().split()
        images[name] = (reference.rsplit(":", 1)[1], digest)
    return images


def pin_values(text: str, registry: str, images: dict[str, tuple[str, str]], app_version: str) -> str:
    """values.yaml with each image's registry and digest set, its comments and layout kept (a line-by-line walk
    of the block mappings, which is all values.yaml uses)."""
    values = yaml.safe_load(text)
    path: list[tuple[int, str]] = []
    lines = []
    for line in text.splitlines():
        match = KEY.match(line)
        if match and not line.lstrip().startswith("#"):
            indent = len(match["indent"])
            path = [(level, key) for level, key in path if level < indent] + [(indent, match["key"])]
            parent, field = ".".join(key for _, key in path[:-1]), match["key"]
            if parent in IMAGES and field in ("registry", "digest"):
                tag, digest = images[IMAGES[parent]]
                node = values
                for key in parent.split("."):
                    node = node[key]
                wanted = node.get("tag") or app_version
                if wanted != tag:
                    sys.exit(f"error: {parent}.tag is {wanted!r} but {IMAGES[parent]} was pushed as {tag!r}")
                line = f"{match['indent']}{field}: {registry if field == 'registry' else digest}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--pushed", required=True, type=Path, help="the registry's folder of push records")
    parser.add_argument("--registry", required=True, help="host[:port][/path] the images were pushed to")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--chart", type=Path, default=CHART, help="a chart folder or a packaged chart (.tgz)")
    parser.add_argument("--push", action="store_true", help="push the package to oci://<registry>/charts")
    parser.add_argument("--ca-file", help="CA of the registry's certificate (helm push --ca-file)")
    parser.add_argument("--registry-config", help="the registry's login as a docker config (HELM_REGISTRY_CONFIG)")
    options = parser.parse_args()

    images = pushed_images(options.pushed)
    options.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        chart = Path(work) / "ringfeed"
        if options.chart.is_dir():
            shutil.copytree(options.chart, chart, symlinks=False)  # the CRDs' link becomes the files themselves
        else:
            with tarfile.open(options.chart) as package:
                package.extractall(work, filter="data")
        app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
        values = chart / "values.yaml"
        values.write_text(pin_values(values.read_text(), options.registry, images, app_version))
        subprocess.run([options.helm, "lint", "--strict", str(chart)], check=True, stdout=subprocess.DEVNULL)
        packaged = subprocess.run([options.helm, "package", str(chart), "--destination", str(options.out)],
                                  check=True, capture_output=True, text=True).stdout.strip().rsplit(" ", 1)[-1]
    print(f"chart: {packaged}")
    if options.push:
        env = dict(os.environ)
        if options.registry_config:
            env["HELM_REGISTRY_CONFIG"] = options.registry_config
        command = [options.helm, "push", packaged, f"oci://{options.registry}/charts"]
        if options.ca_file:
            command += ["--ca-file", options.ca_file]
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        if result.returncode:
            sys.exit(f"error: helm push failed: {result.stderr.strip()}")
        digest = re.search(r"Digest: (\S+)", result.stdout + result.stderr)
        print(f"chart: pushed to oci://{options.registry}/charts/ringfeed" + (f"@{digest[1]}" if digest else ""))


if __name__ == "__main__":
    main()
