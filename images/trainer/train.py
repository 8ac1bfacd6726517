"""Example trainer of a TrainingJob: a small CNN trained on the batches the loader sidecar hands over.

Each rank reads its share of the Split part through ``ringfeed_client.Feed`` (numpy views of shared memory, no
Cassandra client, no credentials). Every ``CHECKPOINT_EVERY`` steps the model, the optimizer and the feed position
go to ``$CHECKPOINT_DIR/rank-<RANK>.pt`` in one atomic write, with the UUIDs trained on so far, so a restarted
trainer continues exactly where its last checkpoint was taken. At the end each rank prints one JSON line: the UUIDs
it trained on per epoch (tests check that every epoch covered the part exactly once across ranks), its loss and
its throughput.

With ``access: posix`` (RINGFEED_DATA_DIR set: the part's folder on the Dataset's cache tier) it reads files
instead: torchvision's ``ImageFolder`` over the folder, a seeded shuffle per epoch dealt out to the ranks, a
DataLoader with workers. Each rank then prints the SHA-256 of every file it read per epoch (tests compare them with
the ring's bytes).

Environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (set by the TrainingJob), CHECKPOINT_DIR (default
/checkpoint), CHECKPOINT_EVERY (default 1), STEP_DELAY_S (default 0: a pause per step, to watch a job in slow
motion); with access posix RINGFEED_DATA_DIR and RINGFEED_EPOCHS (set by the TrainingJob).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ringfeed_client import Feed
from ringfeed_client.torch import tensors

CLASSES = 16  # more outputs than the datasets' labels need; unused ones just learn to stay low


def rendezvous(rank: int, world_size: int) -> None:
    """The ranks find each other through the TrainingJob's headless Service (MASTER_ADDR is rank 0's Pod)."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=dt.timedelta(minutes=5))
    ones = torch.ones(1)
    dist.all_reduce(ones)
    assert int(ones.item()) == world_size, f"all_reduce saw {ones.item()} ranks, expected {world_size}"
    print(f"rank {rank}: rendezvous with {world_size} rank(s) through {os.environ['MASTER_ADDR']}", flush=True)
    dist.destroy_process_group()


def small_cnn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, CLASSES))


def main() -> None:
    # The container's first process gets no default SIGTERM handling: without this a stopped Pod's trainer would run
    # on (and train) until killed at the end of its grace period.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if os.environ.get("RINGFEED_DATA_DIR"):
        train_on_files(Path(os.environ["RINGFEED_DATA_DIR"]))
        return
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    checkpoint = Path(os.environ.get("CHECKPOINT_DIR", "/checkpoint")) / f"rank-{rank}.pt"
    every, delay = int(os.environ.get("CHECKPOINT_EVERY", "1")), float(os.environ.get("STEP_DELAY_S", "0"))
    torch.manual_seed(rank)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    feed = Feed(with_uuids=True)
    trained: dict[str, list[str]] = {}
    resumed_world = None
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        feed.load_state_dict(state["feed"])
        trained, resumed_world = state["trained"], state["feed"]["world_size"]
        print(f"rank {rank}: resumed from {checkpoint} at epoch {feed.epoch}", flush=True)
    if world_size > 1 and resumed_world != world_size:  # a new job, or one resized: every rank meets anew
        rendezvous(rank, world_size)
    steps, samples, loss, started = 0, 0, float("nan"), time.perf_counter()
    while feed.epoch < feed.epochs:
        epoch = feed.epoch
        for x, y, uuids in tensors(feed):
            images = x.permute(0, 3, 1, 2).float().div_(255)  # uint8 NHWC (shared memory) → float NCHW (a copy)
            optimizer.zero_grad()
            batch_loss = torch.nn.functional.cross_entropy(model(images), y)
            batch_loss.backward()
            optimizer.step()
            loss = batch_loss.item()
            trained.setdefault(str(epoch), []).extend(u.numpy().tobytes().hex() for u in uuids)
            steps, samples = steps + 1, samples + len(y)
            if steps % every == 0:
                save(checkpoint, model, optimizer, feed, trained)
            if delay:
                time.sleep(delay)
        print(f"rank {rank}: epoch {epoch} done, loss {loss:.4f}", flush=True)
    seconds = time.perf_counter() - started
    print(json.dumps({"rank": rank, "world_size": world_size, "trained": trained, "loss": loss,
                      "samples_per_second": round(samples / seconds, 1) if seconds else 0.0}), flush=True)


def train_on_files(root: Path) -> None:
    """access: posix — torchvision's ImageFolder over the part's folder on the cache tier's mount."""
    from PIL import Image
    from torchvision import datasets, transforms

    class HashedImageFolder(datasets.ImageFolder):
        """ImageFolder's listing and classes; each item also names its file and the SHA-256 of the bytes read."""

        def __getitem__(self, index):
            path, label = self.samples[index]
            data = Path(path).read_bytes()
            image = self.transform(Image.open(io.BytesIO(data)).convert("RGB"))
            return image, label, os.path.relpath(path, self.root), hashlib.sha256(data).hexdigest()

    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    epochs = int(os.environ.get("RINGFEED_EPOCHS", "1"))
    if world_size > 1:
        rendezvous(rank, world_size)
    folder = HashedImageFolder(str(root), transform=transforms.Compose([transforms.Resize((32, 32)),
                                                                         transforms.ToTensor()]))
    print(f"rank {rank}: {len(folder)} files in {len(folder.classes)} classes {folder.classes} under {root}",
          flush=True)
    torch.manual_seed(rank)
    model = small_cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    read: dict[str, dict[str, str]] = {}
    samples, loss, started = 0, float("nan"), time.perf_counter()
    for epoch in range(epochs):
        # The same seeded order on every rank, dealt out: each file to exactly one rank per epoch.
        order = torch.randperm(len(folder), generator=torch.Generator().manual_seed(epoch)).tolist()
        shard = torch.utils.data.Subset(folder, order[rank::world_size])
        for images, labels, names, digests in torch.utils.data.DataLoader(shard, batch_size=8, num_workers=2):
            optimizer.zero_grad()
            batch_loss = torch.nn.functional.cross_entropy(model(images), labels)
            batch_loss.backward()
            optimizer.step()
            loss = batch_loss.item()
            read.setdefault(str(epoch), {}).update(zip(names, digests, strict=True))
            samples += len(labels)
        print(f"rank {rank}: epoch {epoch} done, loss {loss:.4f}", flush=True)
    seconds = time.perf_counter() - started
    print(json.dumps({"rank": rank, "world_size": world_size, "classes": folder.classes, "read": read,
                      "loss": loss, "samples_per_second": round(samples / seconds, 1) if seconds else 0.0}),
          flush=True)


def save(path: Path, model, optimizer, feed: Feed, trained: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "feed": feed.state_dict(),
                "trained": trained}, temporary)
    os.replace(temporary, path)  # a trainer killed mid-write keeps its previous checkpoint


if __name__ == "__main__":
    main()
