"""ringfeed.torch with the real torch DataLoader (0 and 2 worker processes) against a real node."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ringfeed import Decode
from ringfeed.errors import RingfeedError
from ringfeed.splits import load_split
from ringfeed.store import Store
from ringfeed.torch import RingfeedDataLoader, RingfeedDataset

from conftest import ingest_demo_slides

NAME = "torch_slides"


@pytest.fixture(scope="module")
def torch_store(cassandra_node, tmp_path_factory):
    with Store(cassandra_node.address) as store:
        ingest_demo_slides(store, NAME, tmp_path_factory.mktemp("torch"))
        yield store


def split_uuids(store) -> list[bytes]:
    return sorted(u.tobytes() for u in load_split(store, NAME, "s").uuids("train"))


def uuids_of(batches) -> list[bytes]:
    return [bytes(u.numpy().tobytes()) for batch in batches for u in batch[2]]


@pytest.mark.parametrize("workers", [0, 2])
def test_dataloader_delivers_each_sample_once_as_tensors(torch_store, workers):
    data = RingfeedDataset(NAME, "s", "train", batch_size=16, store=torch_store, decode=Decode(64, 64), with_uuids=True,
                           seed=4)
    loader = RingfeedDataLoader(data, num_workers=workers)
    expected_batches = len(loader)
    batches = list(loader)
    assert len(batches) == expected_batches == -(-len(split_uuids(torch_store)) // 16)
    x, y, uuids = batches[0]
    assert isinstance(x, torch.Tensor) and x.dtype == torch.uint8 and x.shape == (16, 64, 64, 3)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.int64
    assert sorted(uuids_of(batches)) == split_uuids(torch_store)
    assert data.epoch == 1  # the DataLoader moved the dataset to the next epoch


def test_workers_keep_the_single_process_order(torch_store):
    orders = []
    for workers in (0, 2, 3):
        data = RingfeedDataset(NAME, "s", "train", batch_size=8, store=torch_store, with_uuids=True, seed=6)
        orders.append(uuids_of(RingfeedDataLoader(data, num_workers=workers)))
    assert orders[0] == orders[1] == orders[2]


def test_ranks_times_workers_cover_the_split_once(torch_store):
    delivered = []
    for rank in range(2):
        data = RingfeedDataset(NAME, "s", "train", batch_size=8, store=torch_store, rank=rank, world_size=2,
                               with_uuids=True)
        delivered += uuids_of(RingfeedDataLoader(data, num_workers=2))
    assert sorted(delivered) == split_uuids(torch_store)


def test_mid_epoch_state_dict_resumes_with_the_remainder(torch_store):
    data = RingfeedDataset(NAME, "s", "train", batch_size=8, store=torch_store, with_uuids=True, seed=3)
    full = uuids_of(RingfeedDataLoader(data, num_workers=2))
    data.set_epoch(0)
    loader = RingfeedDataLoader(data, num_workers=2)
    head = []
    for batch in loader:
        head += uuids_of([batch])
        if len(head) == 40:
            break
    state = loader.state_dict()
    assert state["offset"] == 40 and state["epoch"] == 0

    resumed_data = RingfeedDataset(NAME, "s", "train", options=data.options, store=torch_store)
    resumed = RingfeedDataLoader(resumed_data, num_workers=2)
    resumed.load_state_dict(state)
    assert len(resumed) == -(-len(full) // 8)  # one epoch's batches, as torch, torchdata and Lightning count
    assert head + uuids_of(resumed) == full


def test_batches_are_views_of_the_native_buffer_and_writable(torch_store):
    from ringfeed import _native

    data = RingfeedDataset(NAME, "s", "val", batch_size=4, store=torch_store, decode=Decode(32, 32))
    x, _ = next(iter(data))
    owner = x
    while isinstance(owner, np.ndarray):
        owner = owner.base
    assert isinstance(owner, _native.Buffer) and x.flags.writeable  # no copy between Rust and numpy
    tensor = torch.from_numpy(x)  # no copy to torch either
    tensor[0, 0, 0, 0] = 7
    assert x[0, 0, 0, 0] == 7


def test_persistent_workers_and_shard_are_refused(torch_store):
    data = RingfeedDataset(NAME, "s", "train", batch_size=8, store=torch_store)
    with pytest.raises(RingfeedError, match="persistent_workers"):
        RingfeedDataLoader(data, num_workers=1, persistent_workers=True)
    with pytest.raises(RingfeedError, match="shard is set per DataLoader worker"):
        RingfeedDataset(NAME, "s", "train", batch_size=8, store=torch_store, shard=(0, 2))


def _ddp_rank(rank: int, world_size: int, port: int, hosts: list[str], out: str) -> None:
    """One DDP process: rank and world size come from torch.distributed, not from arguments."""
    import torch.distributed as dist

    from ringfeed.connection import ClusterAddress

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        data = RingfeedDataset(NAME, "s", "train", batch_size=8, address=ClusterAddress(tuple(hosts)), with_uuids=True,
                               remainder="pad")
        batches = list(RingfeedDataLoader(data, num_workers=1))
        counts = [torch.zeros(1)]
        counts[0][0] = len(batches)
        gathered = [torch.zeros(1) for _ in range(world_size)]
        dist.all_gather(gathered, counts[0])  # pad gives every rank the same number of steps
        with open(f"{out}.{rank}", "wb") as f:
            f.write(b"".join(uuids_of(batches)))
            assert len({int(c.item()) for c in gathered}) == 1
    finally:
        dist.destroy_process_group()


def test_ddp_ranks_from_torch_distributed(torch_store, cassandra_node, tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "uuids")
    mp.spawn(_ddp_rank, args=(2, port, list(cassandra_node.hosts), out), nprocs=2, join=True)
    delivered = [(tmp_path / f"uuids.{r}").read_bytes() for r in range(2)]
    assert len(delivered[0]) == len(delivered[1])  # padded to equal counts
    ids = [blob[i:i + 16] for blob in delivered for i in range(0, len(blob), 16)]
    expected = split_uuids(torch_store)
    assert set(ids) == set(expected) and len(ids) == len(expected) + len(expected) % 2
