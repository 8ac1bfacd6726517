#!/usr/bin/env bash
# Build Kueue's controller manager from the Go module proxy at the release gomod/go.mod pins, and copy that release's
# Helm chart out of the same module (the e2e installs Kueue with it, as a platform team would).
#
#   build-go.sh OUT   → OUT/kueue (static: it runs FROM scratch), OUT/chart/ (charts/kueue of the module)
#
# images/build.sh calls it (`build.sh kueue`) only when gomod/ or this file changes.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-go.sh OUT}
# shellcheck source=../../scripts/go-env.sh
source "$here/../../scripts/go-env.sh"
export CGO_ENABLED=0
mkdir -p "$out"
cd "$here/gomod"
go build -trimpath -ldflags "-s -w" -o "$out/kueue" sigs.k8s.io/kueue/cmd/kueue
module=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
rm -rf "$out/chart" && cp -r "$module/charts/kueue" "$out/chart" && chmod -R u+w "$out/chart"
