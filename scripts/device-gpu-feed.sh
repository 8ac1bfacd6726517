#!/usr/bin/env bash
# The GPU feed's checks on the device machine (issue 32), after scripts/device-run.sh has unpacked part1-4:
#   scripts/device-gpu-feed.sh decode [CODEC]    the trainer's decode on the GPU: its tests (GPU against CPU, within
#                                                decoder tolerance, every codec), bench_gpu_decode (every codec), then
#                                                bench-train with ResNet-18 decoding on the GPU with CODEC
#   scripts/device-gpu-feed.sh resnet50 [CODEC]  bench-train with ResNet-50 decoding on the GPU with CODEC
#   scripts/device-gpu-feed.sh resnet18-cpu      ResNet-18 decoding on the CPU (the sidecar's 14 threads), the same
#                                                photographs
# CODEC: nvimgcodec (default) or torchvision (ringfeed_client.codecs). AHEAD=N in the environment: the trainer
# decodes N batches ahead of its loop, on a thread (tensors(feed, ahead=N)); 1 by default (the configuration not yet
# measured on a GPU: the decode in the loop, AHEAD=0, was, on an H100: docs/benchmarks.md).
# Each step has a time limit that keeps the call inside the device's 10 minutes; output goes to $OUT as well.
set -uo pipefail
cd "$(dirname "$0")/.." || exit
out=${OUT:-.state/device}
mkdir -p "$out"
step() { # name limit_s command…
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s)"
    timeout --signal=TERM --kill-after=10 "$limit" scripts/device-run.sh run "$@" 2>&1 | tee "$out/$name.log" | tail -40
    echo "== $name: exit ${PIPESTATUS[0]} (124: stopped at its time limit)"
}
codec=${2:-nvimgcodec}
ahead=${AHEAD:-1}
train() { # model decode-device limit
    step "train-$1-$2-$codec-ahead$ahead" "$3" python3 benchmarks/bench_sidecar.py --train --model "$1" \
        --images imagenet --jpegs 4000 --rounds 5 --decode-device "$2" --codec "$codec" --ahead "$ahead"
}
# Before any step: a torch that sees no GPU would pass the decode tests on their CPU cases alone and fail the rest.
scripts/device-run.sh run python3 - <<'CHECK' || exit 1
import torch, torchvision
print("torch", torch.__version__, "CUDA", torch.version.cuda, "torchvision", torchvision.__version__)
try:
    from nvidia import nvimgcodec
    print("nvImageCodec", nvimgcodec.__version__)
except ImportError as error:
    print("nvImageCodec: not importable:", error)
if not torch.cuda.is_available():
    raise SystemExit("torch sees no CUDA device (a driver older than its CUDA needs?): nothing to measure here")
print("device", torch.cuda.get_device_name())
CHECK
case ${1:-} in
  decode)
    step decode-tests 150 python3 -m pytest -q -p no:cacheprovider dataplane/tests/unit/test_trainer_decode.py
    step gpu-decode 120 python3 benchmarks/bench_gpu_decode.py --images 2048 --rounds 5
    if ! grep -q "^BAR gpu_decode_vs_cpu_decode_$codec " "$out/gpu-decode.log"; then
      echo "== $codec was not measured here: ResNet-18 is fed through torchvision's decode instead"
      codec=torchvision
    fi
    train resnet18 gpu 280
    ;;
  resnet50)
    train resnet50 gpu 290
    ;;
  resnet18-cpu)
    train resnet18 cpu 250
    ;;
  *) echo "usage: $0 decode [CODEC] | resnet50 [CODEC] | resnet18-cpu" >&2; exit 2 ;;
esac
