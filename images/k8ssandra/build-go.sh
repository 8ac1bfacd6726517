#!/usr/bin/env bash
# Build cass-operator and k8ssandra-client's `config build` from the source tarballs in third_party/ (neither module
# is on the Go module proxy; their dependencies are, pinned by the tarballs' go.sum and cfgbuild/go.sum), and render
# cass-operator's CRDs.
#
#   build-go.sh OUT   → OUT/cass-operator, OUT/kubectl-k8ssandra (static: they run FROM scratch), OUT/crds.yaml
#
# Cold on 2 cores: ~4-5 min (cass-operator's dependencies compile once into the Go build cache, ~1.1 GB); ~1.5 min
# with the cache warm. images/build.sh calls it only when the tarballs or these files change.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: build-go.sh OUT}
kubectl=${KUBECTL:-${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/k8s/bin/kubectl}
# shellcheck source=../../scripts/go-env.sh
source "$here/../../scripts/go-env.sh"
export CGO_ENABLED=0

work=$(mktemp -d "${TMPDIR:-/tmp}/ringfeed-k8ssandra-go.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cass-operator" "$work/k8ssandra-client" "$work/stub-k8ssandra-operator" "$work/cfgbuild" "$out"
tar -xzf "$repo"/third_party/cass-operator-*.tar.gz -C "$work/cass-operator" --strip-components=1
tar -xzf "$repo"/third_party/k8ssandra-client-*.tar.gz -C "$work/k8ssandra-client" --strip-components=1

(cd "$work/cass-operator" && go build -trimpath -ldflags "-s -w" -o "$out/cass-operator" ./cmd/)

# k8ssandra-client's go.mod requires k8ssandra-operator, which the proxy does not serve and pkg/config does not
# import: an empty module stands in for it.
printf 'module github.com/k8ssandra/k8ssandra-operator\n\ngo 1.24\n' >"$work/stub-k8ssandra-operator/go.mod"
cp "$here"/cfgbuild/{main.go,go.mod,go.sum} "$work/cfgbuild/"
(cd "$work/cfgbuild" && go build -trimpath -ldflags "-s -w" -o "$out/kubectl-k8ssandra" .)

# config/crd's kustomization drops the free-form spec.config schema (x-kubernetes-preserve-unknown-fields instead).
"$kubectl" kustomize "$work/cass-operator/config/crd" >"$out/crds.yaml"
