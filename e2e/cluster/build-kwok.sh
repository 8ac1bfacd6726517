#!/usr/bin/env bash
# Build kwok (simulated nodes, for make bench-operator-scale only) from the Go module proxy.
#
# Output: $RINGFEED_CACHE/kwok/<key>/bin/kwok, where <key> hashes the pinned wrapper module and this script, and a
# symlink $RINGFEED_CACHE/kwok/bin pointing at it; reused at once when built (keyed-build.sh). ~2 min cold on 2 cores.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=keyed-build.sh
source "$here/keyed-build.sh"

keyed_build_key "${RINGFEED_CACHE:?set RINGFEED_CACHE (the Makefile does)}/kwok" \
    "$here"/{build-kwok.sh,keyed-build.sh} "$here"/gomod/kwok/go.{mod,sum}
if keyed_build_reused; then
    echo "kwok: reusing $out/bin/kwok (v$KWOK_VERSION)"
    exit 0
fi
keyed_build_start
echo "kwok: v$KWOK_VERSION …"
(cd "$here/gomod/kwok" && go build -trimpath -ldflags "-s -w" -o "$out/bin/kwok" sigs.k8s.io/kwok/cmd/kwok)
keyed_build_done
echo "kwok: built in $(( $(date +%s) - started )) s into $out/bin"
