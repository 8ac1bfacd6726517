#!/usr/bin/env bash
# The venv of `make bench-peers`' peers (NVIDIA DALI, WebDataset, MosaicML Streaming, LitData, with torch and
# torchvision at the project's versions): exactly benchmarks/peers-requirements.txt, in a venv of its own, never in
# .venv (their pins clash with the project's). Kept under DIR/<key>, <key> a hash of the requirements and of this
# script, with DIR/current linking to it: a key already installed is reused at once; a new one replaces the old.
# Cold: ~5 GB of wheels (torch's CUDA libraries, DALI), a few minutes. Prints the venv's python.
# Usage: scripts/bench-peers-venv.sh [DIR]   (default .cache/bench-peers-venv)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=$(realpath -m "${1:-$repo/.cache/bench-peers-venv}")
requirements=$repo/benchmarks/peers-requirements.txt
python=${PYTHON:-python3.11}
key=$(cat "$requirements" "$0" | sha256sum | cut -c1-16)
venv=$cache/$key

if [[ ! -f $venv/.complete ]]; then
  command -v "$python" >/dev/null || { echo "error: $python is needed for the peers' venv (PYTHON=...)" >&2; exit 1; }
  echo "bench-peers: installing the peers into $venv …" >&2
  rm -rf "$venv"
  mkdir -p "$cache"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --requirement "$requirements" >&2
  touch "$venv/.complete"
fi
ln -sfn "$key" "$cache/current"
# Venvs of earlier requirements are of no further use.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
echo "$cache/current/bin/python"
