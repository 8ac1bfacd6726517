#!/usr/bin/env bash
# The Prometheus Operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule, ...) of a pinned release, from its Go
# module (the Go module proxy serves it; no container registry needed): the e2e tests validate the chart's
# monitoring objects against them on the real API server.
# Usage: scripts/fetch-prometheus-operator-crds.sh DIR  → DIR/monitoring.coreos.com_*.yaml
set -euo pipefail

version=v0.85.0
target=${1:?usage: fetch-prometheus-operator-crds.sh DIR}
[[ -f $target/monitoring.coreos.com_servicemonitors.yaml ]] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "prometheus-operator: fetching the CRDs of $version (Go module) …"
dir=$(cd "$work" && go mod init fetch >/dev/null 2>&1 \
      && GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$version" \
      | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[[ -n $dir && -d $dir/example/prometheus-operator-crd ]] || {
    echo "error: go mod download github.com/prometheus-operator/prometheus-operator@$version failed" >&2
    exit 1
}
mkdir -p "$target"
cp "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$target/"
chmod u+w "$target"/*.yaml  # the module cache's files are read-only
