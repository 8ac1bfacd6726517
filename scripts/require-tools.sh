#!/usr/bin/env bash
# One clear line per missing tool, before any build starts.
missing=0
need() { command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is required: $2" >&2; missing=1; }; }
need python3.11 "install Python 3.11 (Debian: apt-get install python3.11 python3.11-venv)"
need cargo "install Rust (https://rustup.rs) — it builds Ringfeed's native data path"
need java "install Java 17 (Debian: apt-get install openjdk-17-jre-headless) — it runs Cassandra"
need mvn "install Maven (Debian: apt-get install maven) — it fetches Cassandra's jars"
need go "install Go 1.24+ (https://go.dev/dl) — it builds the local cluster's Kubernetes binaries"
need gcc "install gcc (Debian: apt-get install build-essential) — it builds the local node's pause program"
need openssl "install openssl (Debian: apt-get install openssl) — it makes the local cluster's certificates"
need pkg-config "install pkg-config (Debian: apt-get install pkg-config) — it finds OpenSSL for the native build"
pkg-config --exists openssl 2>/dev/null || { echo "error: OpenSSL headers are required: Debian: apt-get install libssl-dev — TLS to the ring" >&2; missing=1; }
if command -v java >/dev/null 2>&1; then
  major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
  [ "${major:-0}" -ge 17 ] || { echo "error: Java 17 or newer is required, found Java ${major:-unknown}" >&2; missing=1; }
fi
exit $missing
