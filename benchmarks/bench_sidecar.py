"""make bench-sidecar / make bench-train: the TrainingJob handoff (loader sidecar → shared memory → trainer) measured
against the in-process loader, and a training loop fed by it against the same loop on synthetic batches.

One dedicated local node holds JPEGs (320×240, ~20 kB) and one split part. The sidecar is a real `ringfeed serve`
process; the trainer side is `ringfeed_client.Feed` in this process, as in a TrainingJob's Pod.

bench-sidecar (default): per round, epochs through the in-process `ringfeed.Loader`, then through the sidecar +
client (decoded 224×224 and stored bytes), each consumer touching every batch once: 3 epochs in a row per side, the
first not timed (it absorbs the read-ahead each side did while the other ran). The ratio is the median over rounds
of the paired rates. The client's copies are counted: every array must be a view of a slot.

bench-train (`--train`): a training loop fed through the sidecar vs the same loop on one synthetic batch held in
memory (the seed metric of the Alluxio/ResNet-50 study: steps/s with real data over steps/s with synthetic data).
`--model small` (this machine): a small CNN on 64×64 batches, torch on one core and the sidecar decoding on the
other; `resnet18` / `resnet50` (a GPU machine): torchvision's model on 224×224 batches of 256, the sidecar decoding
RandomResizedCrop + flip with every core but two. `--images imagenet` feeds ImageNet-sized photographs (~500×375,
~100 kB, bench_decode's) instead of the 20 kB set.

A round cannot be flattered by what is buffered: each timed round takes at least ROUND_POOLS (20) times every batch
the feed can hold ahead (the sidecar's prefetch + 1 slots and its loader's prefetch), so the buffers filled while the
synthetic round ran are a twentieth of the fed round at most. Each round runs both sides, the fed one second in even
rounds and first in odd ones; each side's images/s and their ratio are printed per round, the bar is the median ratio.

Ends with one BAR line per bar.
"""

from __future__ import annotations

import argparse
import mmap
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from bench_loader import make_jpeg_folder, settle
from ringfeed.connection import ClusterAddress
from ringfeed.ingest import IngestOptions, ingest
from ringfeed.loader import Decode, Loader, LoaderSource
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.serve import wait_for_socket
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store
from ringfeed_client import Blobs, Feed

from bench_node import dedicated_node

DATASET = "bench_sidecar"
BARS = {"sidecar_vs_inprocess": 0.95, "train_vs_synthetic": 0.97, "train_vs_synthetic_resnet18": 0.97,
        "train_vs_synthetic_resnet50": 0.97}
ROUND_POOLS = 20  # a timed round takes this many times every batch the feed can hold ahead
MAX_CLIENT_COPY_BYTES_PER_BATCH = 0
EPOCHS = 3  # per side and round; the first one is not timed


class Sidecar:
    """`ringfeed serve` for one decode setting, in its own process, stopped by PID."""

    def __init__(self, host: str, directory: Path, *flags: str):
        directory.mkdir(parents=True, exist_ok=True)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.directory = directory
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ringfeed", "--hosts", host, "serve", DATASET, "all", "--epochs", "1000000",
             "--feed-dir", str(directory), "--bind", "127.0.0.1", "--http-port", str(port), *flags],
            stderr=subprocess.DEVNULL)
        wait_for_socket(directory, timeout_s=120)
        self.feed = Feed(directory)

    def stop(self) -> None:
        self.feed.close()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


def is_view_of_a_slot(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def consume(epochs) -> tuple[int, float, int]:
    """`epochs` (an iterable of epochs, each an iterable of batches), touching each batch once: (samples, seconds)
    of all epochs but the first, and the bytes the consumer copied. Both loaders read ahead into the next epoch
    while their consumer is away (up to their memory bound, more than one epoch of this data set): the first epoch
    absorbs that head start, the others run at the steady rate."""
    samples, copied, started = 0, 0, 0.0
    for number, batches in enumerate(epochs):
        for x, y in batches:
            arrays = [x.data, x.spans] if isinstance(x, Blobs) else [x]
            for array in (*arrays, y):
                if not is_view_of_a_slot(array):
                    copied += array.nbytes
            int(arrays[0].flat[0])  # one read of the batch memory
            samples += len(y) if number else 0
        if number == 0:
            started = time.perf_counter()
    return samples, time.perf_counter() - started, copied


def handoff(host: str, source: LoaderSource, tmp: Path, rounds: int, threads: int) -> tuple[float, float]:
    """In-process loader vs sidecar + client, decoded and stored bytes; → (the worst median ratio, the bytes the
    client copied per batch)."""
    worst, copies, batches = float("inf"), 0, 0
    cases = {"decoded 224×224": (dict(decode=Decode(224, 224)), ["--decode", "224x224"]),
             "stored bytes": ({}, [])}
    print(f"\n{'case':>16} {'samples':>8} {'in-process/s':>13} {'sidecar/s':>10} {'ratio':>6} "
          f"{'client copies/batch':>20}")
    for case, (options, flags) in cases.items():
        loader = Loader.from_source(source, batch_size=128, decode_threads=threads, **options)
        sidecar = Sidecar(host, tmp / f"feed-{len(flags)}", "--batch-size", "128", "--decode-threads",
                          str(threads), *flags)
        try:
            consume([loader])  # untimed: connections, the node's caches
            consume([sidecar.feed])
            ratios, rates = [], {"in": [], "side": []}
            for _ in range(rounds):
                n, s, _ = consume([loader] * EPOCHS)
                m, t, copied = consume([sidecar.feed] * EPOCHS)
                rates["in"].append(n / s)
                rates["side"].append(m / t)
                ratios.append((m / t) / (n / s))
                copies += copied
                batches += -(-m // 128) * EPOCHS // (EPOCHS - 1)
                case_copies = copied
            ratio = statistics.median(ratios)
            worst = min(worst, ratio)
            assert m == n, f"the sidecar's epochs had {m} samples, the loader's {n}"
            print(f"{case:>16} {m:>8,} {max(rates['in']):>13,.0f} {max(rates['side']):>10,.0f} {ratio:>6.2f} "
                  f"{case_copies / (-(-m // 128) * EPOCHS // (EPOCHS - 1)):>18,.0f} B", flush=True)
        finally:
            loader.close()
            sidecar.stop()
    return worst, copies / batches


def train(host: str, tmp: Path, rounds: int, node_pid: int, model_name: str, decode_device: str,
          codec: str, ahead: int) -> float:
    """Training steps/s fed by the sidecar over steps/s on one synthetic in-memory batch (median of rounds).
    ``decode_device`` gpu: the sidecar hands the bytes with each image's crop and the trainer decodes them with
    `codec` (``ringfeed_client.codecs``: on a GPU, its CPU decoder without one) inside the timed loop, or on a
    thread of its own `ahead` batches ahead of it.

    ``small``: a small CNN on decoded 64×64 batches of 64, torch on one core and the sidecar decoding on the other.
    ``resnet18`` / ``resnet50`` (a GPU machine): torchvision's model on 224×224 batches of 256, bf16 autocast,
    channels-last, the sidecar decoding RandomResizedCrop + flip with every core but two."""
    import torch

    from ringfeed_client.torch import tensors

    gpu = model_name != "small"
    device = torch.device("cuda" if gpu else "cpu")
    torch.manual_seed(0)
    if gpu:
        import torchvision

        batch, size, classes, threads, prefetch = 256, 224, 1000, max(1, (os.cpu_count() or 4) - 2), 4
        model = getattr(torchvision.models, model_name)().to(device, memory_format=torch.channels_last)
        print(f"{model_name} on {torch.cuda.get_device_name(device)}; the sidecar decodes with {threads} threads")
        decode = ["--decode", f"{size}x{size}", "--resize", "random", "--flip", "0.5"]
    else:
        # The training step and the sidecar each get one of the 2 cores, as a GPU and the host's cores would: the
        # step's compute does not wait for decoding unless the feed is too slow, which is what the ratio shows.
        torch.set_num_threads(1)
        batch, size, classes, threads, prefetch = 64, 64, 10, 1, 2
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(128, classes))
        decode = ["--decode", f"{size}x{size}"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # Every batch the feed holds ahead: the sidecar's slots (prefetch + 1) and its loader's read-ahead (prefetch).
    buffered = 2 * prefetch + 1
    steps = ROUND_POOLS * buffered

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        # The same work for both sides: uint8 NHWC from host memory to the device, then float NCHW.
        images = x.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
        labels = (y % classes).to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        if gpu:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(images.contiguous(memory_format=torch.channels_last)),
                                                         labels)
        else:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()

    sidecar = Sidecar(host, tmp / "feed-train", "--batch-size", str(batch), *decode, "--decode-threads",
                      str(threads), "--prefetch", str(prefetch), "--decode-device", decode_device)
    # The ring runs on machines of its own in a deployment: here its node yields the cores to the step and the
    # sidecar (nice 19), so the ratio shows the feed's cost, not this machine's third tenant.
    for thread in Path(f"/proc/{node_pid}/task").iterdir():  # niceness is per thread on Linux
        os.setpriority(os.PRIO_PROCESS, int(thread.name), 19)
    real = _forever(sidecar.feed, lambda feed: tensors(feed, device=device, codec=codec, ahead=ahead))
    synthetic = (torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8), torch.randint(0, classes, (batch,)))

    def timed(batches: Callable[[], tuple], count: int) -> float:
        started = time.perf_counter()
        for _ in range(count):
            step(*batches())
        if gpu:
            torch.cuda.synchronize()
        return count / (time.perf_counter() - started)

    try:
        # Untimed: torch's first steps (cuDNN's choice of kernels), the node's caches, the feed's buffers filled.
        timed(lambda: next(real), buffered * 2)
        ratios = []
        print(f"\n{steps} steps of {batch} per round: {ROUND_POOLS}× the {buffered} batches the feed holds ahead")
        print(f"{'round':>5} {'synthetic images/s':>19} {'fed images/s':>13} {'ratio':>6}")
        for index in range(rounds):
            # Which side goes first turns round each round: neither always follows the other's pause.
            if index % 2:
                fed = timed(lambda: next(real), steps)
                fake = timed(lambda: synthetic, steps)
            else:
                fake = timed(lambda: synthetic, steps)
                fed = timed(lambda: next(real), steps)
            ratios.append(fed / fake)
            print(f"{index:>5} {fake * batch:>19,.0f} {fed * batch:>13,.0f} {fed / fake:>6.3f}", flush=True)
    finally:
        sidecar.stop()
    return statistics.median(ratios)


def write_photographs(root: Path, count: int) -> int:
    """bench_decode's ImageNet-sized photographs as an ImageFolder tree of 10 classes; → the bytes written."""
    from bench_decode import photographs

    written = 0
    for index, jpeg in enumerate(photographs(count)):
        folder = root / f"class{index % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index}.jpg").write_bytes(jpeg)
        written += len(jpeg)
    return written


def _forever(feed: Feed, epoch: Callable[[Feed], Iterable[tuple]]) -> Iterator[tuple]:
    while True:
        yield from epoch(feed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="store_true", help="bench-train instead of bench-sidecar.")
    parser.add_argument("--jpegs", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="Decode threads of either loader (bench-sidecar).")
    parser.add_argument("--model", choices=("small", "resnet18", "resnet50"), default="small",
                        help="--train: a small CNN on the CPU, or ResNet-18/50 on a GPU (CUDA).")
    parser.add_argument("--images", choices=("20k", "imagenet"), default="20k",
                        help="320×240 JPEGs of ~20 kB, or ImageNet-sized photographs (~500×375, ~100 kB).")
    parser.add_argument("--decode-device", choices=("cpu", "gpu"), default="cpu",
                        help="--train: images decoded by the sidecar (cpu) or by the trainer (gpu).")
    parser.add_argument("--codec", choices=("torchvision", "nvimgcodec"), default="torchvision",
                        help="--decode-device gpu: the trainer's codec (ringfeed_client.codecs).")
    parser.add_argument("--ahead", type=int, default=0,
                        help="--decode-device gpu: batches the trainer decodes ahead of its loop, on a thread.")
    args = parser.parse_args()
    with dedicated_node("bench-sidecar", jmx_base=7540) as ring, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        with Store(ClusterAddress(tuple(ring.hosts))) as store:
            if args.images == "imagenet":
                print(f"writing {args.jpegs:,} ImageNet-sized photographs into the ring …", flush=True)
                written = write_photographs(tmp / "jpegs", args.jpegs)
            else:
                print(f"writing {args.jpegs:,} JPEGs (320×240) into the ring …", flush=True)
                written = make_jpeg_folder(tmp / "jpegs", args.jpegs)
            print(f"{written / args.jpegs / 1000:.0f} kB per JPEG on average")
            store.create_dataset(DatasetSchema(DATASET, (Column("path", "text"),), Encoding("jpeg")))
            ingest(store, DATASET, str(tmp / "jpegs"), IngestOptions(concurrency=64))
            create_split(store, DATASET, "all", SplitSpec(ratios=(1,), names=("train",)))
            source = LoaderSource.from_split(DATASET, "all", "train", store=store)
            settle(ring, source.keyspace)
        print(f"{os.cpu_count()} cores; sidecar and loader with {args.threads} decode thread(s)")
        if args.train:
            name = "train_vs_synthetic" + ("" if args.model == "small" else f"_{args.model}")
            if args.decode_device == "gpu":
                name += "_gpu_decode" + ("" if args.codec == "torchvision" else f"_{args.codec}")
                name += f"_ahead{args.ahead}" if args.ahead else ""
            bars = [(name, train(ring.hosts[0], tmp, args.rounds, ring.pid(1), args.model, args.decode_device,
                                 args.codec, args.ahead))]
        else:
            ratio, copied = handoff(ring.hosts[0], source, tmp, args.rounds, args.threads)
            bars = [("sidecar_vs_inprocess", ratio)]
    for name, value in bars:
        target = BARS[name.split("_gpu_decode")[0]]  # the same bar whichever side decodes, with whichever codec
        print(f"BAR {name} {value:.3f} {target} {'PASS' if value >= target else 'FAIL'}")
    if not args.train:
        verdict = "PASS" if copied <= MAX_CLIENT_COPY_BYTES_PER_BATCH else "FAIL"
        print(f"BAR client_bytes_copied_per_batch {copied:.0f} {MAX_CLIENT_COPY_BYTES_PER_BATCH} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
