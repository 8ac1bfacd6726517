# shellcheck shell=bash
# Sourced by build-binaries.sh and build-kwok.sh: Go builds kept under $cache/<key>/bin, where <key> hashes the files
# that pin them, with a symlink $cache/bin to the current one. A key already built is reused at once.

# keyed_build_key CACHE FILE…: sets `key` (of the FILEs' contents) and `out` ($CACHE/<key>). Not in a condition: a
# FILE that is missing must stop the build (errexit does not apply inside an `if`). Holds $CACHE's lock until the
# script exits: a second build of the same binaries (make test starts one in the background) waits for the first,
# then reuses what it built.
keyed_build_key() {
    cache=$1
    key=$(cat "${@:2}" | sha256sum | cut -c1-16)
    out=$cache/$key
    mkdir -p "$cache"
    exec {keyed_build_lock}>"$cache/.lock"
    flock --nonblock "$keyed_build_lock" || {
        echo "$(basename "$cache"): waiting for the build in progress (make test's is logged in .state/k8s-binaries.log)"
        flock "$keyed_build_lock"
    }
}

# keyed_build_reused: when `key` is built, links $cache/bin to it and succeeds; else fails (the caller builds into
# $out/bin after keyed_build_start, then calls keyed_build_done).
keyed_build_reused() {
    [[ -f $out/.complete ]] && ln -sfn "$key/bin" "$cache/bin"
}

# keyed_build_start: Go is there; an empty $out/bin; the time the build started in `started`.
keyed_build_start() {
    command -v go >/dev/null || { echo "error: Go is needed to build from the Go module proxy (apt install golang or go.dev)" >&2; exit 1; }
    # shellcheck source=../../scripts/go-env.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/go-env.sh"
    rm -rf "$out" && mkdir -p "$out/bin"
    # shellcheck disable=SC2034  # read by the caller for its "built in" line
    started=$(date +%s)
}

# keyed_build_done: marks $out built and current; builds of earlier pinned versions are of no further use.
keyed_build_done() {
    touch "$out/.complete"
    ln -sfn "$key/bin" "$cache/bin"
    find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
}
