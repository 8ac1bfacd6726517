"""The loader over a long link: exactly once, resume and elastic resume through a proxy that adds 100 ms of round trip
(benchmarks/wanproxy), where many requests complete out of order."""

from __future__ import annotations

import csv
import dataclasses
import subprocess

import numpy as np
import pytest

from ringfeed import Loader, LoaderOptions
from ringfeed.connection import ClusterAddress
from ringfeed.ingest import ingest
from ringfeed.loader import LoaderSource
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split
from ringfeed.store import Store

from conftest import REPO

RTT_MS = 100
SAMPLES = 400


@pytest.fixture(scope="module")
def wanproxy():
    """The proxy binary (`make test-integration` builds it; built here when run alone)."""
    manifest = REPO / "benchmarks" / "wanproxy" / "Cargo.toml"
    subprocess.run(["cargo", "build", "--quiet", "--release", "--manifest-path", str(manifest)], check=True)
    return REPO / "benchmarks" / "wanproxy" / "target" / "release" / "wanproxy"


@pytest.fixture(scope="module")
def far_address(cassandra_node, wanproxy):
    """The shared node, 100 ms away: a proxy on the node's address (the driver reaches a node at its own address on
    the contact point's port) and a free port."""
    host = cassandra_node.hosts[0]
    proxy = subprocess.Popen([str(wanproxy), "--listen", f"{host}:0", "--upstream", f"{host}:{cassandra_node.port}",
                              "--rtt-ms", str(RTT_MS)], stdout=subprocess.PIPE, text=True)
    try:
        line = proxy.stdout.readline() if proxy.stdout else ""
        assert line.startswith("listening on "), line
        yield ClusterAddress((host,), int(line.rsplit(":", 1)[1]))
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)


@pytest.fixture(scope="module")
def dataset(cassandra_node, tmp_path_factory):
    """400 raw uint8 tensors of 2 kB whose bytes encode their index; one split part."""
    name = "long_link"
    root = tmp_path_factory.mktemp("long_link")
    with Store(cassandra_node.address) as store:
        if name in {d.schema.name for d in store.datasets()}:  # left by an earlier run with RINGFEED_TEST_KEEP=1
            store.drop_dataset(name, force=True)
        rows = []
        for i in range(SAMPLES):
            (root / f"{i}.bin").write_bytes(np.full(2048, i % 251, dtype=np.uint8).tobytes())
            rows.append({"path": f"{i}.bin", "item": i, "label": i % 5})
        with open(root / "manifest.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, ["path", "item", "label"])
            writer.writeheader()
            writer.writerows(rows)
        store.create_dataset(DatasetSchema(name, (Column("item", "int"),), Encoding("raw", "uint8", (2048,))))
        ingest(store, name, str(root / "manifest.csv"))
        create_split(store, name, "all", SplitSpec(ratios=(1,), names=("train",)))
        return LoaderSource.from_split(name, "all", "train", store=store)


def far(source: LoaderSource, address: ClusterAddress) -> LoaderSource:
    """The same split read through `address`."""
    return dataclasses.replace(source, address=address)


def uuids_of(loader: Loader, batches: int | None = None) -> list[bytes]:
    """The UUIDs of the next `batches` batches (all of the epoch's rest when None), in delivery order."""
    delivered = []
    for index, (_, _, uuids) in enumerate(loader):
        delivered += [u.tobytes() for u in uuids]
        if batches is not None and index + 1 == batches:
            break
    return delivered


def test_the_link_is_long(dataset, far_address):
    loader = Loader.from_source(far(dataset, far_address), batch_size=16, with_uuids=True)
    assert len(uuids_of(loader)) == SAMPLES
    stats = loader.window_stats()
    assert stats is not None and stats["min_rtt_ms"] is not None and stats["min_rtt_ms"] >= RTT_MS


@pytest.mark.parametrize("world_size", [1, 3])
def test_every_sample_exactly_once_in_the_epoch_order(dataset, far_address, world_size):
    options = LoaderOptions(batch_size=16, seed=4, world_size=world_size, with_uuids=True, remainder="uneven")
    near = [uuids_of(Loader.from_source(dataset, options=options, rank=r)) for r in range(world_size)]
    distant = [uuids_of(Loader.from_source(far(dataset, far_address), options=options, rank=r))
               for r in range(world_size)]
    assert distant == near, "the same order as a short link's, rank by rank"
    assert sorted(sum(distant, [])) == sorted(u.tobytes() for u in dataset.uuids)


def test_resume_mid_epoch_yields_the_identical_remainder(dataset, far_address):
    options = LoaderOptions(batch_size=16, seed=7, with_uuids=True)
    full = uuids_of(Loader.from_source(dataset, options=options))
    loader = Loader.from_source(far(dataset, far_address), options=options)
    head = uuids_of(loader, batches=9)
    resumed = Loader.from_source(far(dataset, far_address), options=options)
    resumed.load_state_dict(loader.state_dict())
    assert head + uuids_of(resumed) == full


def test_elastic_resume_with_another_world_size(dataset, far_address):
    before = [Loader.from_source(far(dataset, far_address), batch_size=16, seed=3, rank=r, world_size=2,
                                 with_uuids=True, remainder="uneven") for r in range(2)]
    read = []
    for loader in before:
        read += uuids_of(loader, batches=4)
    state = before[0].state_dict()
    after = [Loader.from_source(far(dataset, far_address), batch_size=16, seed=3, rank=r, world_size=3,
                                with_uuids=True, remainder="uneven") for r in range(3)]
    for loader in after:
        loader.load_state_dict(state)
        read += uuids_of(loader)
    assert sorted(read) == sorted(u.tobytes() for u in dataset.uuids)


def test_the_next_epoch_read_ahead_is_that_epoch_or_dropped(dataset, far_address):
    options = LoaderOptions(batch_size=16, seed=6, with_uuids=True)

    def alone(epoch: int) -> list[bytes]:
        loader = Loader.from_source(dataset, options=options)
        loader.set_epoch(epoch)
        return uuids_of(loader)

    loader = Loader.from_source(far(dataset, far_address), options=options)
    assert uuids_of(loader) == alone(0)  # epoch 1's first batches are read meanwhile
    assert uuids_of(loader) == alone(1)
    loader.set_epoch(7)  # what was read ahead for epoch 2 is not wanted now
    assert uuids_of(loader) == alone(7)
    resumed = Loader.from_source(far(dataset, far_address), options=options)
    uuids_of(resumed)
    resumed.load_state_dict({**loader.state_dict(), "epoch": 3, "offset": 48})
    assert uuids_of(resumed) == alone(3)[48:]
