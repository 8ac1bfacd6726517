#!/usr/bin/env bash
# On the device machine (scripts/device-bundle.sh made the parts):
#   scripts/device-run.sh unpack PART   unpack a part that this call carried into .cache/device/runtime
#   scripts/device-run.sh run CMD…      run CMD with that runtime: Java on PATH, Cassandra's jars where ringfeed
#                                       looks for them, the repository's Python sources with the wheel's native module
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
runtime=$PWD/.cache/device/runtime
python=${PYTHON:-python3}
tag=cp$($python -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')

case ${1:-} in
  unpack)
    part=.cache/device/$2
    mkdir -p "$runtime/site" "$runtime/cassandra-5.0.9/lib"
    if [[ -d $part/jre ]]; then
      rm -rf "$runtime/jre" && cp -a "$part/jre" "$runtime/jre" && cp "$part/jar-count" "$runtime/"
    fi
    for wheel in "$part"/wheels/*.whl "$part"/wheels/"$tag"/*.whl; do
      $python -m zipfile -e "$wheel" "$runtime/site"
    done
    for jar in "$part"/*.jar; do
      cp "$jar" "$runtime/cassandra-5.0.9/lib/"
    done
    # ringfeed.local takes the jars as complete once this marker exists: after the last part
    if [[ -f $runtime/jar-count && $(find "$runtime/cassandra-5.0.9/lib" -name "*.jar" | wc -l) -eq $(cat "$runtime/jar-count") ]]; then
      touch "$runtime/cassandra-5.0.9/lib/.complete"
    fi
    echo "unpacked $2: $(du -sm "$runtime" | cut -f1) MiB in $runtime"
    ;;
  run)
    shift
    [[ -f $runtime/cassandra-5.0.9/lib/.complete ]] || { echo "runtime incomplete: unpack part1-3 first" >&2; exit 1; }
    # The wheel's native module (manylinux_2_28, vendored OpenSSL) beside this checkout's Python sources.
    cp "$runtime"/site/ringfeed/_native.abi3.so dataplane/ringfeed/
    export PATH=$runtime/jre/bin:$PATH RINGFEED_CACHE=$runtime
    export PYTHONPATH=$PWD/dataplane:$PWD/client:$PWD/benchmarks:$runtime/site
    export PYTHONUNBUFFERED=1  # a step killed at its time limit keeps every line it printed
    echo "$(nproc) CPUs; $($python --version); $(java -version 2>&1 | head -1)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
    "$@"
    ;;
  *) echo "usage: $0 unpack PART | run CMD…" >&2; exit 2 ;;
esac
