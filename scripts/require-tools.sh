#!/usr/bin/env bash
# What `make deps` (so `make demo` and `make test`) needs, checked before any build starts: each tool that is missing
# or too old is named once, on one line of its own, with where to get it; exit 1 if any is. A tool the build can do
# without, more slowly, is named in a warning (exit 0).
#
# The least versions are the builds' own (dataplane/tests/unit/test_require_tools.py checks each against its source):
PYTHON_MIN=3.11  # requires-python of client/, dataplane/, operator/; the venv is made with $PYTHON (python3.11)
RUST_MIN=1.88    # rust-version of the crates: dataplane/native, benchmarks/{refreader,refwriter,wanproxy}
JAVA_MIN=17      # Cassandra 5.0.9 (the local ring) and the cache tier's Alluxio extension
MAVEN_MIN=3.6.3  # the plugins of dataplane/alluxio's pom (maven-compiler-plugin 3.13, maven-dependency-plugin 3.8)
GO_MIN=1.26.7    # the newest `go` line of the go.mod files built with GOTOOLCHAIN=local (third_party's cass-operator)
python=${PYTHON:-python3.11}
missing=0

fail() { echo "error: $*" >&2; missing=1; }
# at_least VERSION MIN: true when VERSION >= MIN (dotted numbers).
at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }
# check NAME MIN FOUND HOW: one line when the tool is missing (FOUND empty because the command is not there) or older.
check() {
    local name=$1 min=$2 found=$3 how=$4
    if [ -z "$found" ]; then
        fail "$name $min or newer is required, found none: $how"
    elif ! at_least "$found" "$min"; then
        fail "$name $min or newer is required, found $found: $how"
    fi
}
has() { command -v "$1" >/dev/null 2>&1; }

found=$(has "$python" && "$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
check "$python" "$PYTHON_MIN" "$found" \
    "install Python $PYTHON_MIN (Debian: apt-get install python3.11 python3.11-venv), or make PYTHON=python3.x"

for tool in cargo rustc; do
    found=$(has $tool && $tool --version 2>/dev/null | sed -n "s/^$tool \\([0-9][0-9.]*\\).*/\\1/p")
    check $tool "$RUST_MIN" "$found" "install Rust with rustup (https://rustup.rs), or rustup update — it builds Ringfeed's native data path"
done

# `java -version` says "17.0.15" (or "1.8.0_292" before Java 9) on stderr.
found=$(has java && java -version 2>&1 | sed -n 's/.*version "\([0-9._]*\)".*/\1/p' | head -n 1)
case $found in 1.*) found=${found#1.} ;; esac
check Java "$JAVA_MIN" "${found%%[._]*}" "install Java 17 (Debian: apt-get install openjdk-17-jre-headless) — it runs Cassandra"

found=$(has mvn && mvn --version 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | sed -n 's/^Apache Maven \([0-9.]*\).*/\1/p')
check Maven "$MAVEN_MIN" "$found" "install Maven (Debian: apt-get install maven) — it fetches Cassandra's jars"

# The local toolchain, as the builds run it (GOTOOLCHAIN=local: no download of another).
found=$(has go && GOTOOLCHAIN=local go version 2>/dev/null | sed -n 's/^go version go\([0-9][0-9.]*\).*/\1/p')
check Go "$GO_MIN" "$found" "install Go $GO_MIN or newer (https://go.dev/dl) — it builds the local cluster's binaries and the ring's images"

has gcc || fail "gcc is required: apt-get install build-essential — it builds the local node's pause program"
has cmake || fail "cmake is required: apt-get install cmake — it builds libjpeg-turbo into the native decoder"
has nasm || echo "warning: nasm is missing: apt-get install nasm — without it libjpeg-turbo is built without SIMD and \
the fused random-crop decode is ~15 % slower (docs/benchmarks.md#make-bench-decode)" >&2
has openssl || fail "openssl is required: apt-get install openssl — it makes the certificates of the local ring and cluster"
if ! has pkg-config; then
    fail "pkg-config is required: apt-get install pkg-config — it finds OpenSSL for the native build"
elif ! pkg-config --exists openssl 2>/dev/null; then
    fail "OpenSSL's headers (libssl-dev) are required: apt-get install libssl-dev — the native build's TLS to the ring"
fi
exit $missing
