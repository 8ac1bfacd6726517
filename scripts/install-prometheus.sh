#!/usr/bin/env bash
# Prometheus and promtool from Debian's package, unpacked into the cache: no root, no service started (the
# package's scripts would start one), the same version on every machine.
# Usage: scripts/install-prometheus.sh DIR  → DIR/usr/bin/{prometheus,promtool}
set -euo pipefail

version=2.42.0+ds-5+deb12u1
target=${1:?usage: install-prometheus.sh DIR}
[[ -x $target/usr/bin/promtool && -x $target/usr/bin/prometheus ]] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "prometheus: downloading Debian's prometheus $version …"
download() { (cd "$work" && apt-get download -qq "prometheus=$version" 2>/dev/null); }
# A fresh machine may have no package lists yet: fetch them once (root only) and try again.
download || { [[ $(id -u) -eq 0 ]] && apt-get update -qq && download; } || {
    echo "error: apt-get download prometheus=$version failed: is Debian's package index reachable (apt-get update)?" >&2
    exit 1
}
mkdir -p "$target"
dpkg-deb -x "$work"/prometheus_*.deb "$target"
"$target/usr/bin/promtool" --version | head -1
