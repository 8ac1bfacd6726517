# shellcheck shell=bash
# Sourced by build-binaries.sh and build-kwok.sh: Go builds kept under $cache/<key>/bin, where <key> hashes the files
# that pin them, with a symlink $cache/bin to the current one. A key already built is reused at once.

# keyed_build_reuse CACHE DIR FILE…: sets `key` (of the FILEs, relative to DIR) and `out` ($CACHE/<key>); links
# $CACHE/bin and succeeds when that key is built, else fails (the caller builds into $out/bin, then keyed_build_done).
keyed_build_reuse() {
    cache=$1
    key=$(cd "$2" && cat "${@:3}" | sha256sum | cut -c1-16)
    out=$cache/$key
    [[ -f $out/.complete ]] && ln -sfn "$key/bin" "$cache/bin"
}

# keyed_build_start: Go is there; an empty $out/bin; the time the build started in `started`.
keyed_build_start() {
    command -v go >/dev/null || { echo "error: Go is needed to build from the Go module proxy (apt install golang or go.dev)" >&2; exit 1; }
    export GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
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
