#!/usr/bin/env bash
# Build kwok (simulated nodes, for make bench-operator-scale only) from the Go module proxy.
#
# Output: $RINGFEED_CACHE/kwok/<key>/kwok, where <key> hashes the pinned wrapper module and this script, and a
# symlink $RINGFEED_CACHE/kwok/bin pointing at its folder; reused at once when built. ~2 min cold on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/kwok
# shellcheck source=versions.env
source "$here/versions.env"

key=$(cd "$here" && cat build-kwok.sh gomod/kwok/go.mod gomod/kwok/go.sum | sha256sum | cut -c1-16)
out=$cache/$key
if [[ -f $out/.complete ]]; then
    ln -sfn "$key" "$cache/bin"
    echo "kwok: reusing $out/kwok (v$KWOK_VERSION)"
    exit 0
fi

command -v go >/dev/null || { echo "error: Go is needed to build kwok (apt install golang or go.dev)" >&2; exit 1; }
export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
rm -rf "$out" && mkdir -p "$out"
started=$(date +%s)
echo "kwok: v$KWOK_VERSION …"
(cd "$here/gomod/kwok" && go build -trimpath -ldflags "-s -w" -o "$out/kwok" sigs.k8s.io/kwok/cmd/kwok)
touch "$out/.complete"
ln -sfn "$key" "$cache/bin"
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "kwok: built in $(( $(date +%s) - started )) s into $out"
