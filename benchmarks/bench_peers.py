"""make bench-peers: Ringfeed against the data loaders people train with, on the same JPEGs, to the same training
input, on the same cores.

The images are bench_decode's ImageNet-sized photographs (~500×375, ~100 kB); every row turns them into 224×224 uint8
images through a RandomResizedCrop (scale 0.08-1, ratio 3/4-4/3, torchvision's defaults) and a horizontal flip
(p 0.5), in batches of ``--batch-size``, shuffled, with ``--cores`` threads or worker processes:

- **Ringfeed, CPU decode**: the in-process ``ringfeed.Loader`` over a split stored in a dedicated Cassandra node
  (bench_node's, 127.0.35.1), ``Decode(224, 224, random_crop=RandomResizedCrop())``, ``decode_threads`` = cores;
- **Ringfeed, GPU decode** (a CUDA device only): the same loader with ``device="gpu"``, its batches decoded by
  nvJPEG through ``ringfeed_client.torch.tensors``;
- **torchvision**: ``ImageFolder`` over the photographs as files + ``DataLoader``, workers = cores,
  ``RandomResizedCrop(224)`` + ``RandomHorizontalFlip()`` + ``PILToTensor()``;
- **DALI, CPU**: ``fn.readers.file`` + ``fn.decoders.image_random_crop(device="cpu")`` + ``fn.resize`` +
  ``fn.flip``, ``num_threads`` = cores; **DALI, mixed** (a CUDA device only): the same with the GPU decoder;
- **WebDataset**: tar shards, ``WebDataset(...).decode("pil").map(...)`` with the same transform, in a DataLoader;
- **MosaicML Streaming**: MDS shards on local disk, ``StreamingDataset(local=...)`` with the same transform, in a
  DataLoader;
- **LitData**: ``litdata.optimize`` chunks, ``litdata.StreamingDataset`` + ``StreamingDataLoader``, same transform.

The PIL-based peers store the JPEGs' bytes as they are and decode them the way ImageFolder does
(``Image.open(...).convert("RGB")``); each format (tar shards, MDS shards, LitData chunks; about 4 per worker) is
written once, untimed.

**Where each row runs.** The Ringfeed rows run in this process (the project's .venv). Each peer runs in a process of
its own, started once and kept for the whole run (its DataLoader's workers persist), driven through a pipe: "run N
epochs" → "done, K images". torchvision runs with this process's Python (it is the project's own dependency); DALI,
WebDataset, Streaming and LitData with the peers' venv (``--peers-python``, default
.cache/bench-peers-venv/current/bin/python, made by ``scripts/bench-peers-venv.sh`` from the pinned
benchmarks/peers-requirements.txt: their pins clash with the project's, e.g. mosaicml-streaming wants numpy < 2.2,
so they never go into .venv). A peer that cannot start (its venv or package missing) is reported with the reason.

**Measurement.** The node first serves ``--node-warm-up-s`` (120) seconds of untimed reads of the stored bytes: a
fresh node's JIT-compiled read path costs it several times the CPU per row, and a ring in use is warm. Every row then
gets one untimed epoch; then ``--rounds`` timed rounds, the order of the rows rotating and turning round from one
round to the next (``round_order``: each row is first once every len(rows) rounds). A round is as many epochs as it
takes to read ``ROUND_BUFFERS`` (20) times the largest buffer any row holds ahead (Ringfeed: the most batches its
loader had in flight, read from its stats after the warm-up, the next epoch's included; a DataLoader: workers ×
prefetch factor batches; DALI: its prefetch queue), so that no buffer filled before a round can hide a slow stage in
it. Ringfeed's loader is connected before its round and closed after it, untimed: it starts each round empty (what
it read ahead into the next epoch is dropped, and was paid for in the round). Each figure is the median over the
rounds. ``--round-buffers`` below 20 makes a smoke run, said so in the output and on the figure.

**CPU.** Per round, the CPU time (user + system, from /proc) of every process doing the work: for a peer, its process
and all its descendants (DataLoader workers, DALI threads, anything they start; the children they reaped included);
for Ringfeed, this process ("loader only": its I/O and decoder threads) and, beside it, the Cassandra node's
process tree ("with the node"). The bar is judged with the node included. Every process runs on the same ``--cores``
CPUs: this process pins itself before it starts anything, and the node and every peer inherit it.

Ends with one line per peer that ran: ``BAR ringfeed_vs_<peer> <value> 1.0 PASS|FAIL``, value = Ringfeed's images per
CPU-second (images/s ÷ CPU-seconds per second, the node included) ÷ the peer's; the GPU peer (DALI mixed) is compared
with Ringfeed's GPU decode, the others with its CPU decode. ``--plot PATH`` writes a figure of both columns.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import importlib
import io
import json
import math
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PEERS_PYTHON = REPO / ".cache" / "bench-peers-venv" / "current" / "bin" / "python"
DATASET = "bench_peers"
BAR = 1.0
ROUND_BUFFERS = 20  # a timed round reads at least this many times the largest buffer any row holds ahead
PREFETCH_FACTOR = 2  # batches each DataLoader worker holds ahead (torch's default)
DALI_QUEUE_DEPTH = 2  # batches a DALI pipeline runs ahead (DALI's default)
SHARDS_PER_WORKER = 4  # tar shards, MDS shards, LitData chunks: every worker gets several
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ANSWER_TIMEOUT_S = 3600  # a peer that says nothing this long (set-up, or a round) is taken as hung


@dataclasses.dataclass(frozen=True)
class Kind:
    """One row: ``ringfeed`` rows run in this process; the others in a peer process (``venv``: the peers' venv)."""

    label: str
    gpu: bool = False  # needs a CUDA device
    venv: bool = False  # runs with the peers' Python, not this one
    versus: str = "ringfeed"  # the Ringfeed row its bar compares with (peers only)


ROWS = {
    "ringfeed": Kind("Ringfeed, CPU decode"),
    "ringfeed_gpu": Kind("Ringfeed, GPU decode", gpu=True),
    "torchvision": Kind("torchvision ImageFolder + DataLoader"),
    "dali_cpu": Kind("DALI, CPU decoder", venv=True),
    "dali_mixed": Kind("DALI, mixed (GPU) decoder", gpu=True, venv=True, versus="ringfeed_gpu"),
    "webdataset": Kind("WebDataset + DataLoader", venv=True),
    "streaming": Kind("MosaicML Streaming + DataLoader", venv=True),
    "litdata": Kind("LitData StreamingDataLoader", venv=True),
}


# -- pure logic (dataplane/tests/unit/test_bench_peers.py) -------------------------------------------------------------

def round_order(names: Sequence[str], round_: int) -> list[str]:
    """The rows' order in round `round_`: rotated by one each round and turned round every other round, so that each
    row is first once every len(names) rounds and follows a different row from one round to the next."""
    if not names:
        return []
    if round_ % 2 == 0:
        shift = round_ % len(names)
        return [*names[shift:], *names[:shift]]
    shift = (round_ + 1) % len(names)
    return [*names[shift:], *names[:shift]][::-1]


def epochs_per_round(images: int, buffered: int, multiple: int = ROUND_BUFFERS) -> int:
    """Epochs of `images` a round needs to read at least `multiple` times `buffered` images (and at least one)."""
    return max(1, math.ceil(multiple * buffered / images))


def parse_stat(line: str) -> tuple[int, int, int]:
    """(pid, ppid, CPU ticks) of a /proc/<pid>/stat line; the ticks are utime + stime of the process (all its threads)
    and cutime + cstime (the children it has reaped). The command name may hold spaces and parentheses: the fields
    are read after its last ')'."""
    pid = int(line[:line.index(" ")])
    fields = line[line.rindex(")") + 2:].split()  # fields[0] is field 3 (state)
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
    return pid, ppid, utime + stime + cutime + cstime


def tree_ticks(stats: Iterable[tuple[int, int, int]], root: int) -> int:
    """CPU ticks of `root` and all its living descendants, from (pid, ppid, ticks) of every process. A descendant that
    ended and was reaped is in its reaper's children's ticks, so it is counted once, as long as its reaper lives."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    ticks: dict[int, int] = {}
    for pid, ppid, cpu in stats:
        ticks[pid] = cpu
        if pid != ppid:
            children[ppid].append(pid)
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def all_stats() -> list[tuple[int, int, int]]:
    """(pid, ppid, ticks) of every process now (ones that end while /proc is read are left out)."""
    stats = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stats.append(parse_stat(Path(entry.path, "stat").read_text()))
    return stats


def tree_cpu_seconds(root: int) -> float:
    return tree_ticks(all_stats(), root) / CLOCK_TICKS


def own_cpu_seconds() -> float:
    """This process's CPU (every thread), without its children: the node and the peers are children of it."""
    times = os.times()
    return times.user + times.system


@dataclasses.dataclass(frozen=True)
class Sample:
    """One timed round of one row."""

    images: int
    seconds: float
    cpu_s: float  # the loader's processes
    node_cpu_s: float | None = None  # the Cassandra node's (Ringfeed rows)

    @property
    def rate(self) -> float:
        return self.images / self.seconds

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu_s / self.images

    @property
    def total_cpu_ms(self) -> float:
        return 1000 * (self.cpu_s + (self.node_cpu_s or 0.0)) / self.images


@dataclasses.dataclass(frozen=True)
class Result:
    """A row's medians over its rounds."""

    images_per_s: float
    cpu_ms: float  # per image, the loader's processes
    total_cpu_ms: float  # per image, the node included (= cpu_ms for peers)
    with_node: bool

    @property
    def images_per_cpu_s(self) -> float:
        return 1000 / self.total_cpu_ms

    @classmethod
    def of(cls, samples: Sequence[Sample]) -> Result:
        return cls(statistics.median(s.rate for s in samples), statistics.median(s.cpu_ms for s in samples),
                   statistics.median(s.total_cpu_ms for s in samples), samples[0].node_cpu_s is not None)


def bars(results: dict[str, Result]) -> list[tuple[str, float]]:
    """(bar name, value) per peer with a result: Ringfeed's images per CPU-second (node included) ÷ the peer's, against
    the Ringfeed row of the peer's kind (GPU decode for a GPU peer); none where that Ringfeed row has no result."""
    out = []
    for name, result in results.items():
        kind = ROWS[name]
        if name.startswith("ringfeed") or kind.versus not in results:
            continue
        out.append((f"ringfeed_vs_{name}", results[kind.versus].images_per_cpu_s / result.images_per_cpu_s))
    return out


# -- the peers, each in a process of its own (--worker NAME) ----------------------------------------------------------

def pil_transform(size: int) -> Callable[[Any], Any]:
    """torchvision's training transform: RandomResizedCrop (default scale and ratio) + flip, to a uint8 tensor."""
    from torchvision import transforms

    return transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(),
                               transforms.PILToTensor()])


def pil_image(data: bytes) -> Any:
    """A JPEG's bytes decoded as ImageFolder's loader decodes a file."""
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


class StoredPhotograph:
    """A stored sample {"image": JPEG bytes, "label": int} → (transformed image, label); a class, not a closure:
    LitData pickles it into its workers."""

    def __init__(self, size: int):
        self.transform = pil_transform(size)

    def __call__(self, sample: dict[str, Any]) -> tuple[Any, int]:
        return self.transform(pil_image(sample["image"])), sample["label"]


def labelled_files(folder: Path) -> list[tuple[Path, int]]:
    """The ImageFolder tree's files with their labels (class folders in sorted order, as ImageFolder numbers them)."""
    classes = sorted(entry.name for entry in folder.iterdir() if entry.is_dir())
    return [(path, label) for label, name in enumerate(classes) for path in sorted((folder / name).glob("*.jpg"))]


def per_shard(count: int, workers: int) -> int:
    return max(1, math.ceil(count / (SHARDS_PER_WORKER * workers)))


def count_batches(batches: Iterable[Any]) -> int:
    """Images in an epoch of (x, y) batches, each batch's memory read once."""
    images = 0
    for x, y in batches:
        int(x.reshape(-1)[0])
        images += len(y)
    return images


def dataloader(dataset: Any, batch: int, workers: int, **options: Any) -> Any:
    import torch.utils.data

    return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers, persistent_workers=True,
                                       prefetch_factor=PREFETCH_FACTOR, **options)


def torchvision_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    from torchvision import datasets

    loader = dataloader(datasets.ImageFolder(str(data / "folder"), transform=pil_transform(size)), batch, workers,
                        shuffle=True)
    return lambda: count_batches(loader), workers * PREFETCH_FACTOR * batch


def webdataset_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    wds = importlib.import_module("webdataset")
    files = labelled_files(data / "folder")
    shards = data / "webdataset"
    shards.mkdir()
    with wds.ShardWriter(str(shards / "shard-%06d.tar"), maxcount=per_shard(len(files), workers), verbose=0) as sink:
        for index, (path, label) in enumerate(files):
            sink.write({"__key__": f"{index:08d}", "jpg": path.read_bytes(), "cls": label})
    urls = sorted(str(path) for path in shards.glob("*.tar"))
    transform = pil_transform(size)
    dataset = (wds.WebDataset(urls, shardshuffle=len(urls)).decode("pil")
               .map(lambda sample: (transform(sample["jpg"]), sample["cls"])))
    loader = dataloader(dataset, batch, workers)
    return lambda: count_batches(loader), workers * PREFETCH_FACTOR * batch


def streaming_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    streaming = importlib.import_module("streaming")
    importlib.import_module("streaming.base.util").clean_stale_shared_memory()
    files = labelled_files(data / "folder")
    shards = data / "mds"
    mean_bytes = sum(path.stat().st_size for path, _ in files) / len(files)
    with streaming.MDSWriter(out=str(shards), columns={"image": "bytes", "label": "int"},
                             size_limit=int(per_shard(len(files), workers) * mean_bytes * 1.05)) as sink:
        for path, label in files:
            sink.write({"image": path.read_bytes(), "label": label})
    transform = pil_transform(size)

    base: Any = streaming.StreamingDataset

    class Photographs(base):
        def __getitem__(self, index: int) -> tuple[Any, int]:
            sample = super().__getitem__(index)
            return transform(pil_image(sample["image"])), sample["label"]

    loader = dataloader(Photographs(local=str(shards), shuffle=True, batch_size=batch), batch, workers)
    return lambda: count_batches(loader), workers * PREFETCH_FACTOR * batch


def litdata_record(item: tuple[str, int]) -> dict[str, Any]:
    """LitData's optimize: one sample, the JPEG's bytes as they are."""
    path, label = item
    return {"image": Path(path).read_bytes(), "label": label}


def litdata_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    litdata = importlib.import_module("litdata")
    files = labelled_files(data / "folder")
    chunks = data / "litdata"
    litdata.optimize(fn=litdata_record, inputs=[(str(path), label) for path, label in files], output_dir=str(chunks),
                     chunk_size=per_shard(len(files), workers), num_workers=workers, verbose=False)
    dataset = litdata.StreamingDataset(str(chunks), shuffle=True, transform=StoredPhotograph(size))
    loader = litdata.StreamingDataLoader(dataset, batch_size=batch, num_workers=workers, persistent_workers=True,
                                         prefetch_factor=PREFETCH_FACTOR)
    return lambda: count_batches(loader), workers * PREFETCH_FACTOR * batch


def dali_peer(data: Path, batch: int, workers: int, size: int, gpu: bool) -> tuple[Callable[[], int], int]:
    dali = importlib.import_module("nvidia.dali")
    fn, types = dali.fn, dali.types

    @dali.pipeline_def(batch_size=batch, num_threads=workers, device_id=0 if gpu else None,
                       prefetch_queue_depth=DALI_QUEUE_DEPTH, seed=1)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=str(data / "folder"), random_shuffle=True, name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="mixed" if gpu else "cpu", output_type=types.RGB,
                                               random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3],
                                               num_attempts=10)
        images = fn.resize(images, resize_x=size, resize_y=size)
        images = fn.flip(images, horizontal=fn.random.coin_flip(probability=0.5))
        return images, labels

    pipe = pipeline()
    pipe.build()
    iterations = math.ceil(pipe.epoch_size("reader") / batch)  # the reader wraps round: whole batches

    def epoch() -> int:
        images = None
        for _ in range(iterations):
            images, _labels = pipe.run()
        if gpu and images is not None:
            images.as_cpu()  # waits for the last batch's GPU work
        return iterations * batch
    return epoch, DALI_QUEUE_DEPTH * batch


def dali_cpu_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    return dali_peer(data, batch, workers, size, gpu=False)


def dali_mixed_peer(data: Path, batch: int, workers: int, size: int) -> tuple[Callable[[], int], int]:
    return dali_peer(data, batch, workers, size, gpu=True)


PEER_PACKAGES = {"torchvision": "torchvision", "dali_cpu": "nvidia.dali", "dali_mixed": "nvidia.dali",
                 "webdataset": "webdataset", "streaming": "streaming", "litdata": "litdata"}
PEERS: dict[str, Callable[[Path, int, int, int], tuple[Callable[[], int], int]]] = {
    "torchvision": torchvision_peer,
    "dali_cpu": dali_cpu_peer,
    "dali_mixed": dali_mixed_peer,
    "webdataset": webdataset_peer,
    "streaming": streaming_peer,
    "litdata": litdata_peer,
}


def worker(name: str, data: Path, batch: int, workers: int, size: int) -> int:
    """A peer's process: set up (untimed), say {"ready": buffered images}, then per {"epochs": n} line on stdin run n
    epochs and say {"images": k}. Libraries print to stdout: the replies go through a copy of it, and stdout
    becomes stderr."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(**message: Any) -> None:
        replies.write(json.dumps(message) + "\n")

    try:
        epoch, buffered = PEERS[name](data, batch, workers, size)
    except Exception as exc:  # the package is missing or cannot run here: say why
        reply(error=f"{type(exc).__name__}: {exc}".strip())
        return 1
    reply(ready=buffered, version=getattr(importlib.import_module(PEER_PACKAGES[name]), "__version__", "?"))
    for line in sys.stdin:
        command = json.loads(line)
        if "epochs" not in command:
            break
        reply(images=sum(epoch() for _ in range(command["epochs"])))
    return 0


# -- the rows as the benchmark drives them --------------------------------------------------------------------------

class RowError(Exception):
    """A row that cannot run here, and why."""


class PeerRow:
    """A peer in its own process; its CPU is that process's tree."""

    def __init__(self, name: str, python: str, data: Path, batch: int, cores: int, size: int, log: Path):
        self.name = name
        self.log = log
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            [python, __file__, "--worker", name, "--data", str(data), "--batch-size", str(batch), "--cores",
             str(cores), "--size", str(size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, bufsize=1)
        ready = self._receive("ready")
        self.buffered = int(ready["ready"])
        self.version = str(ready.get("version"))

    def _receive(self, key: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        if not select.select([self.process.stdout], [], [], ANSWER_TIMEOUT_S)[0]:
            self.process.kill()
            self.close()
            raise RowError(f"no answer in {ANSWER_TIMEOUT_S} s (its log: {self.log})")
        line = self.process.stdout.readline()
        message = json.loads(line) if line.strip() else {}
        if key in message:
            return message
        self.close()
        reason = message.get("error") or (self.log.read_text().strip().splitlines() or ["(no output)"])[-1]
        raise RowError(reason)

    def prepare(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def run(self, epochs: int) -> tuple[int, float, float | None]:
        """(images, CPU-seconds of the peer's processes, None) of `epochs` epochs."""
        assert self.process.stdin is not None
        before = tree_cpu_seconds(self.process.pid)
        self.process.stdin.write(json.dumps({"epochs": epochs}) + "\n")
        self.process.stdin.flush()
        images = int(self._receive("images")["images"])
        return images, tree_cpu_seconds(self.process.pid) - before, None

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()


class RingfeedRow:
    """Ringfeed's loader in this process; its CPU is this process's, the node's beside it."""

    def __init__(self, source: Any, node_pid: int, batch: int, threads: int, size: int, gpu: bool, codec: str):
        from ringfeed.loader import Decode, Loader, RandomResizedCrop

        decode = Decode(size, size, random_crop=RandomResizedCrop(), device="gpu" if gpu else "cpu")
        self.loader = Loader.from_source(source, batch_size=batch, decode=decode, decode_threads=threads)
        self.node_pid = node_pid
        self.batch = batch
        self.gpu = gpu
        self.codec = codec

    @property
    def buffered(self) -> int:
        return self.loader.stats.max_batches_in_flight * self.batch

    def _epoch(self) -> int:
        if not self.gpu:
            return count_batches(self.loader)
        import torch

        from ringfeed_client.torch import tensors

        images = count_batches(tensors(self.loader, codec=self.codec))
        torch.cuda.synchronize()
        return images

    def prepare(self) -> None:
        self.loader.open()  # connected and its threads started, untimed

    def finish(self) -> None:
        # What it read ahead into the next epoch while other rows run is dropped: each round starts empty, and pays
        # for the read-ahead it began at its end.
        self.loader.close()

    def run(self, epochs: int) -> tuple[int, float, float | None]:
        before, node_before = own_cpu_seconds(), tree_cpu_seconds(self.node_pid)
        images = sum(self._epoch() for _ in range(epochs))
        return images, own_cpu_seconds() - before, tree_cpu_seconds(self.node_pid) - node_before

    def close(self) -> None:
        self.loader.close()


Row = PeerRow | RingfeedRow


def warm_node(source: Any, node_pid: int, batch: int, seconds: float) -> None:
    """Untimed epochs of stored bytes (the node's side of every Ringfeed read, no decoding) for `seconds`: a fresh
    node's JIT-compiled read path costs it several times the CPU per row at first (bench-loader's (d): 0.79 ms per
    image on the first pass, ~0.16 after ~7), and a ring in use is warm."""
    from ringfeed.loader import Loader

    if seconds <= 0:
        return
    per_image = []
    deadline = time.monotonic() + seconds
    with Loader.from_source(source, batch_size=batch) as loader:
        while time.monotonic() < deadline:
            before = tree_cpu_seconds(node_pid)
            images = sum(len(y) for _, y in loader)
            per_image.append(1000 * (tree_cpu_seconds(node_pid) - before) / images)
    print(f"node warm-up: {len(per_image)} epoch(s) of stored bytes in {seconds:.0f} s, the node's CPU per image "
          f"{per_image[0]:.2f} ms in the first, {per_image[-1]:.2f} ms in the last", flush=True)


def measure(rows: dict[str, Row], images: int, rounds: int, multiple: int,
            failed: dict[str, str]) -> tuple[dict[str, list[Sample]], int]:
    """One untimed epoch per row, then `rounds` rounds of as many epochs as `multiple` × the largest buffer needs;
    → each row's rounds, and the epochs of a round. A row that fails is dropped (its reason in `failed`)."""

    def run(name: str, epochs: int) -> Sample | None:
        try:
            rows[name].prepare()
            started = time.perf_counter()
            count, cpu, node = rows[name].run(epochs)
            seconds = time.perf_counter() - started
            rows[name].finish()
        except Exception as exc:
            failed[name] = f"failed while running: {type(exc).__name__}: {exc}"
            rows.pop(name).close()
            return None
        return Sample(count, seconds, cpu, node)

    for name in list(rows):
        print(f"warm-up: {ROWS[name].label} …", flush=True)
        run(name, 1)
    if not rows:
        return {}, 0
    buffered = {name: row.buffered for name, row in rows.items()}
    epochs = epochs_per_round(images, max(buffered.values()), multiple)
    print("\nimages held ahead at most: " + ", ".join(f"{name} {count:,}" for name, count in buffered.items()))
    print(f"a round: {epochs} epoch(s) of {images:,} images = {epochs * images / max(buffered.values()):.1f}× the "
          f"largest ({max(buffered.values()):,})" + ("" if multiple >= ROUND_BUFFERS else
                                                     f"; below the rule ({ROUND_BUFFERS}×): a smoke run, not a "
                                                     "measurement"), flush=True)
    samples: dict[str, list[Sample]] = {name: [] for name in rows}
    for round_ in range(rounds):
        for name in round_order(list(rows), round_):
            sample = run(name, epochs)
            if sample is None:
                samples.pop(name, None)
                continue
            samples[name].append(sample)
            node = f", {sample.total_cpu_ms:.2f} with the node" if sample.node_cpu_s is not None else ""
            print(f"round {round_ + 1} {ROWS[name].label:<38} {sample.rate:>8,.0f} images/s  "
                  f"{sample.cpu_ms:.2f} CPU-ms/image{node}", flush=True)
    return {name: values for name, values in samples.items() if values}, epochs


# -- set-up, report --------------------------------------------------------------------------------------------------

def pin(cores: int) -> list[int]:
    """Pins this process (and so everything it starts) to its first `cores` allowed CPUs; → them."""
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= cores <= len(allowed):
        raise SystemExit(f"--cores must be 1 to {len(allowed)} here, got {cores}")
    os.sched_setaffinity(0, allowed[:cores])
    return allowed[:cores]


def cpus_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return "?"


def machine(cores: int) -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown CPU")
    gpu = ""
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            gpu = f", {torch.cuda.get_device_name(0)}"
    return f"{cores} of {os.cpu_count()} cores, {model}{gpu}"


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def report(results: dict[str, Result], failed: dict[str, str]) -> None:
    print(f"\n{'row':<38} {'images/s':>9} {'CPU-ms/image':>13} {'with the node':>14} {'images/CPU-s':>13}")
    for name, result in results.items():
        node = f"{result.total_cpu_ms:>14.2f}" if result.with_node else f"{'—':>14}"
        print(f"{ROWS[name].label:<38} {result.images_per_s:>9,.0f} {result.cpu_ms:>13.2f} {node} "
              f"{result.images_per_cpu_s:>13,.0f}")
    for name, reason in failed.items():
        print(f"{ROWS[name].label:<38} not run: {reason}")


def plot(results: dict[str, Result], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [ROWS[name].label for name in results]
    figure, (rate, cpu) = plt.subplots(1, 2, figsize=(12, 0.55 * len(labels) + 1.8), sharey=True)
    positions = range(len(labels))
    rate.barh(positions, [r.images_per_s for r in results.values()], color="tab:blue")
    rate.set_yticks(list(positions), labels)
    rate.invert_yaxis()
    rate.set_xlabel("images/s (higher is better)")
    loader_ms = [r.cpu_ms for r in results.values()]
    cpu.barh(positions, loader_ms, color="tab:orange", label="the loader's processes")
    cpu.barh(positions, [r.total_cpu_ms - r.cpu_ms for r in results.values()], left=loader_ms, color="tab:gray",
             label="the Cassandra node")
    cpu.set_xlabel("CPU-ms per image (lower is better)")
    cpu.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    figure.suptitle(f"224×224 RandomResizedCrop + flip from ~100 kB JPEGs on {title}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def start_rows(names: list[str], args: argparse.Namespace, data: Path, source: Any, node_pid: int,
               cuda: bool, failed: dict[str, str]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    peers_python = Path(args.peers_python)
    for name in names:
        kind = ROWS[name]
        if kind.gpu and not cuda:
            failed[name] = "no CUDA device here"
            continue
        if kind.venv and not peers_python.exists():
            failed[name] = f"no peers' venv at {peers_python} (scripts/bench-peers-venv.sh makes it)"
            continue
        print(f"starting {kind.label} …", flush=True)
        try:
            if name.startswith("ringfeed"):
                rows[name] = RingfeedRow(source, node_pid, args.batch_size, args.cores, args.size, kind.gpu,
                                         args.codec)
            else:
                python = str(peers_python) if kind.venv else sys.executable
                row = PeerRow(name, python, data, args.batch_size, args.cores, args.size, data / f"{name}.log")
                print(f"  {PEER_PACKAGES[name]} {row.version}", flush=True)
                rows[name] = row
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, RowError) else str(exc)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--images", type=int, default=5_000, help="Photographs (~100 kB each).")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                        help="CPUs for everything (the node too): decoder threads, workers.")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--size", type=int, default=224, help="Output height and width.")
    parser.add_argument("--round-buffers", type=int, default=ROUND_BUFFERS,
                        help=f"A round reads this many times the largest buffer (below {ROUND_BUFFERS}: a smoke run).")
    parser.add_argument("--node-warm-up-s", type=float, default=120,
                        help="Untimed reads of stored bytes through the node first (its JIT), seconds.")
    parser.add_argument("--rows", default=",".join(ROWS), help="Comma-separated rows to run.")
    parser.add_argument("--codec", choices=("torchvision", "nvimgcodec"), default="torchvision",
                        help="The trainer's codec of Ringfeed's GPU row (ringfeed_client.codecs).")
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON),
                        help="The Python of the peers' venv (scripts/bench-peers-venv.sh).")
    parser.add_argument("--plot", type=Path, help="Write a figure of the results there (PNG).")
    parser.add_argument("--worker", choices=sorted(PEERS), help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.data, args.batch_size, args.cores, args.size)
    names = [name for name in args.rows.split(",") if name]
    unknown = sorted(set(names) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows: {', '.join(unknown)} (of {', '.join(ROWS)})")

    cpus = pin(args.cores)  # before anything starts: the node, the peers and their workers inherit it
    from ringfeed.connection import ClusterAddress
    from ringfeed.ingest import IngestOptions, ingest
    from ringfeed.loader import LoaderSource
    from ringfeed.schema import Column, DatasetSchema, Encoding
    from ringfeed.splits import SplitSpec, create_split
    from ringfeed.store import Store

    from bench_node import dedicated_node

    # The other benchmarks' helpers, by name: mypy checks this file, not those untyped ones.
    settle = importlib.import_module("bench_loader").settle  # flush + compact what was ingested
    write_photographs = importlib.import_module("bench_sidecar").write_photographs  # bench_decode's, as files

    cuda = has_cuda()
    title = machine(args.cores)
    print(f"{title}; everything pinned to CPUs {','.join(map(str, cpus))}")
    failed: dict[str, str] = {}
    with dedicated_node("bench-peers", jmx_base=7600, address_prefix="127.0.35.") as ring, \
            tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        data = Path(tmp)
        print(f"writing {args.images:,} ImageNet-sized photographs …", flush=True)
        written = write_photographs(data / "folder", args.images)
        print(f"{written / args.images / 1000:.0f} kB per JPEG on average; into the ring …", flush=True)
        with Store(ClusterAddress(tuple(ring.hosts))) as store:
            store.create_dataset(DatasetSchema(DATASET, (Column("path", "text"),), Encoding("jpeg")))
            ingest(store, DATASET, str(data / "folder"), IngestOptions(concurrency=64))
            create_split(store, DATASET, "all", SplitSpec(ratios=(1,), names=("train",)))
            source = LoaderSource.from_split(DATASET, "all", "train", store=store)
            settle(ring, source.keyspace)
        node_pid = ring.pid(1)
        assert node_pid is not None, "the node has no PID"
        if any(name.startswith("ringfeed") for name in names):
            warm_node(source, node_pid, args.batch_size, args.node_warm_up_s)
        rows = start_rows(names, args, data, source, node_pid, cuda, failed)
        print(f"CPUs allowed: node {cpus_of(node_pid)}, "
              + ", ".join(f"{name} {cpus_of(row.process.pid)}" for name, row in rows.items()
                          if isinstance(row, PeerRow)), flush=True)
        print(f"\n{args.images:,} images, batches of {args.batch_size}, {args.cores} decoder threads / workers, "
              f"{args.rounds} rounds", flush=True)
        try:
            samples, epochs = measure(rows, args.images, args.rounds, args.round_buffers, failed)
        finally:
            for row in rows.values():
                row.close()
    results = {name: Result.of(samples[name]) for name in ROWS if name in samples}
    report(results, failed)
    if args.plot and results:
        smoke = "; SMOKE RUN (rounds under 20× the largest buffer)" if args.round_buffers < ROUND_BUFFERS else ""
        plot(results, args.plot, f"{title}\n{args.images:,} images, {epochs} epoch(s) per round, median of "
                                 f"{args.rounds} rounds, batches of {args.batch_size}{smoke}")
        print(f"wrote {args.plot}")
    verdicts = []
    for name, value in bars(results):
        verdicts.append(value >= BAR)
        print(f"BAR {name} {value:.2f} {BAR} {'PASS' if value >= BAR else 'FAIL'}")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
