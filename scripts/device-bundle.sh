#!/usr/bin/env bash
# Packs what the GPU machine lent through `device` needs to run the node benchmarks there: it has Python (with numpy,
# Pillow and PyTorch), no Java and no network. Parts of < 64 MiB (one device call carries at most 64 MiB):
#   .cache/device/part1  a jlink'd Java 17 runtime
#   .cache/device/part2  the Python dependencies for CPython 3.11-3.13 (manylinux wheels, constraints.txt; pytest),
#                        Cassandra's jars, first half
#   .cache/device/part3  the ringfeed wheel (its native module), Cassandra's jars, second half
#   .cache/device/part4  nvImageCodec and nvJPEG (the trainer's GPU codecs; scripts/device-gpu-feed.sh only), small
#                        enough to travel with the call that runs the checks
# On the device, scripts/device-run.sh unpacks each part as it arrives, then runs a benchmark with them
# (docs/benchmarks.md, "On the device machine").
set -euo pipefail
cd "$(dirname "$0")/.."
export RINGFEED_CACHE=${RINGFEED_CACHE:-$PWD/.cache}
out=.cache/device
rm -rf "$out" && mkdir -p "$out"/part1 "$out"/part2/wheels "$out"/part3 "$out"/part4/wheels

jlink --add-modules java.se,jdk.unsupported,jdk.management,jdk.management.agent,jdk.naming.rmi,jdk.crypto.ec,jdk.jfr,jdk.attach,jdk.zipfs \
  --strip-debug --no-header-files --no-man-pages --compress=2 --output "$out"/part1/jre

images/build.sh wheels >/dev/null
# In part3 (the smallest): each call also carries the working tree, ~8 MiB.
mkdir -p "$out"/part3/wheels
cp "$RINGFEED_CACHE"/images/wheels/ringfeed-*-abi3-manylinux_2_28_x86_64.whl "$out"/part3/wheels/
for version in 3.11 3.12 3.13; do
  .venv/bin/pip download --quiet --only-binary=:all: --python-version "$version" \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -c constraints.txt \
    -d "$out/part2/wheels/cp${version/./}" cassandra-driver click rich prometheus-client pytest
  # The device's own numpy and Pillow stay (its PyTorch is built against them).
  rm -f "$out/part2/wheels/cp${version/./}"/numpy-* "$out/part2/wheels/cp${version/./}"/pillow-*
done

# py3-none wheels: one copy serves every CPython.
.venv/bin/pip download --quiet --only-binary=:all: --no-deps --platform manylinux_2_28_x86_64 \
  --platform manylinux2014_x86_64 -c constraints.txt -d "$out"/part4/wheels nvidia-nvimgcodec-cu13 nvidia-nvjpeg

lib=$(.venv/bin/python -c 'from ringfeed.local.jars import ensure_cassandra_jars; print(ensure_cassandra_jars())')
half=0
total=$(du -sb "$lib" | cut -f1)
for jar in "$lib"/*.jar; do
  size=$(stat -c %s "$jar")
  if (( half < total / 2 )); then cp "$jar" "$out"/part2/; half=$((half + size)); else cp "$jar" "$out"/part3/; fi
done
find "$lib" -name "*.jar" | wc -l >"$out"/part1/jar-count  # the device takes the jars as complete at this count
for part in "$out"/part*; do
  echo "$(du -sm "$part" | cut -f1) MiB  $part"
done
