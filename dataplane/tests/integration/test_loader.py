"""The loader against real Cassandra: exactly once per epoch across ranks, resume, decoding, faults, node loss."""

from __future__ import annotations

import csv
import io
import random
import urllib.request
import uuid

import numpy as np
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from ringfeed import Decode, Loader, LoaderOptions, RandomResizedCrop
from ringfeed.demo import make_demo_set
from ringfeed.errors import RingfeedError
from ringfeed.ingest import ingest
from ringfeed.loader import Blobs, LoaderSource
from ringfeed.metrics import serve_loader_metrics
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import SplitSpec, create_split, load_split
from ringfeed.store import Store

from conftest import check_metrics


def all_uuids(batches) -> list[bytes]:
    return [u.tobytes() for batch in batches for u in batch[2]]


@pytest.fixture(scope="module")
def module_store(cassandra_node):
    with Store(cassandra_node.address) as store:
        yield store


@pytest.fixture(scope="module")
def slides(module_store, tmp_path_factory):
    """The demo slide set (JPEG patches), ingested, with a 7:2:1 split by patient; name and stored bytes by UUID."""
    name = "loader_slides"
    store = module_store
    if name in {d.schema.name for d in store.datasets()}:  # left by an earlier run with RINGFEED_TEST_KEEP=1
        store.drop_dataset(name, force=True)
    demo = make_demo_set(tmp_path_factory.mktemp("slides"), patients=8)
    store.create_dataset(DatasetSchema(
        name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
        Encoding("jpeg"), metadata=(Column("scanner", "text"),), label_names=("normal", "tumor")))
    ingest(store, name, str(demo.manifest))
    create_split(store, name, "by-patient", SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=1))
    rows = store.session.execute(f"SELECT uuid, label, data FROM {name}.data_by_uuid")
    stored = {u: (label, data) for u, label, data in rows}
    return name, stored


@pytest.fixture(scope="module")
def tensors(module_store, tmp_path_factory):
    """A raw-tensor dataset: 300 float32 (2, 3) arrays whose values encode their index; a 2:1 split."""
    name = "loader_tensors"
    store = module_store
    root = tmp_path_factory.mktemp("tensors")
    rows = []
    for i in range(300):
        (root / f"{i}.bin").write_bytes((np.arange(6, dtype=np.float32) + i * 10).tobytes())
        rows.append({"path": f"{i}.bin", "item": i, "label": i % 4})
    with open(root / "manifest.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["path", "item", "label"])
        writer.writeheader()
        writer.writerows(rows)
    if name in {d.schema.name for d in store.datasets()}:
        store.drop_dataset(name, force=True)
    store.create_dataset(DatasetSchema(name, (Column("item", "int"),), Encoding("raw", "float32", (2, 3))))
    ingest(store, name, str(root / "manifest.csv"))
    create_split(store, name, "halves", SplitSpec(ratios=(2, 1), names=("train", "test"), seed=3))
    return name


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_every_sample_exactly_once_per_epoch_across_ranks(module_store, slides, world_size):
    name, stored = slides
    split = load_split(module_store, name, "by-patient")
    expected = sorted(u.tobytes() for u in split.uuids("train"))
    ranks = [Loader(name, "by-patient", "train", batch_size=16, store=module_store, rank=r, world_size=world_size,
                    seed=5, with_uuids=True, remainder="uneven") for r in range(world_size)]
    for epoch in range(2):
        delivered = []
        for loader in ranks:
            batches = list(loader)
            delivered += all_uuids(batches)
            for x, y, uuids in batches:
                assert isinstance(x, Blobs) and len(x) == len(y) == len(uuids)
                for blob, label, u in zip(x, y, uuids, strict=True):
                    assert (int(label), bytes(blob)) == stored[uuid.UUID(bytes=u.tobytes())]
            assert loader.epoch == epoch + 1 and loader.offset == 0
        assert sorted(delivered) == expected, f"epoch {epoch}"


def test_global_order_is_the_same_for_any_world_size_and_differs_per_epoch(module_store, slides):
    name, _ = slides
    orders = {}
    for world_size in (1, 2, 3):
        streams = [all_uuids(Loader(name, "by-patient", "train", batch_size=8, store=module_store, rank=r,
                                    world_size=world_size, seed=9, with_uuids=True, remainder="uneven"))
                   for r in range(world_size)]
        merged = [None] * sum(len(s) for s in streams)
        for rank, stream in enumerate(streams):
            merged[rank::world_size] = stream
        orders[world_size] = merged
    assert orders[1] == orders[2] == orders[3]
    loader = Loader(name, "by-patient", "train", batch_size=8, store=module_store, seed=9, with_uuids=True)
    first, second = all_uuids(loader), all_uuids(loader)
    assert first == orders[1] and first != second and sorted(first) == sorted(second)


@pytest.mark.parametrize("out_of_order", [False, True])
def test_resume_at_random_offsets_yields_the_identical_remainder(module_store, slides, out_of_order):
    name, _ = slides
    rng = random.Random(11)
    options = LoaderOptions(batch_size=8, seed=2, with_uuids=True, world_size=2, rank=1, out_of_order=out_of_order,
                            prefetch=4)
    full = all_uuids(Loader(name, "by-patient", "train", options=options, store=module_store))
    for _ in range(4):
        stop = rng.randrange(1, len(full) // 8)
        loader = Loader(name, "by-patient", "train", options=options, store=module_store)
        head = []
        for batch in loader:
            head += all_uuids([batch])
            if len(head) >= stop * 8:
                break
        state = loader.state_dict()
        resumed = Loader(name, "by-patient", "train", options=options, store=module_store)
        resumed.load_state_dict(state)
        tail = all_uuids(resumed)
        assert sorted(head + tail) == sorted(full) and not set(head) & set(tail)
        if not out_of_order:
            assert head + tail == full


def test_elastic_resume_with_another_world_size(module_store, slides):
    name, _ = slides
    split_uuids = sorted(u.tobytes() for u in load_split(module_store, name, "by-patient").uuids("train"))
    before = [Loader(name, "by-patient", "train", batch_size=8, store=module_store, rank=r, world_size=2,
                     with_uuids=True, remainder="uneven") for r in range(2)]
    read = []
    for loader in before:  # three batches on each rank, in lockstep
        iterator = iter(loader)
        read += all_uuids([next(iterator) for _ in range(3)])
    state = before[0].state_dict()
    assert state["offset"] == 3 * 8 * 2 == before[1].state_dict()["offset"]
    after = [Loader(name, "by-patient", "train", batch_size=8, store=module_store, rank=r, world_size=3,
                    with_uuids=True, remainder="uneven") for r in range(3)]
    for loader in after:
        loader.load_state_dict(state)
        read += all_uuids(loader)
    assert sorted(read) == split_uuids


def test_decoded_images_match_an_independent_decoder(module_store, slides):
    name, stored = slides
    loader = Loader(name, "by-patient", "val", batch_size=32, store=module_store, decode=Decode(96, 96),
                    with_uuids=True)
    x, y, uuids = next(iter(loader))
    assert x.shape == (32, 96, 96, 3) and x.dtype == np.uint8 and x.flags.c_contiguous
    for image, label, u in zip(x[:8], y, uuids, strict=False):  # the first 8 samples
        stored_label, data = stored[uuid.UUID(bytes=u.tobytes())]
        # The demo patches are 96×96: no resize, so only the JPEG decoders' rounding may differ.
        reference = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        assert label == stored_label
        assert np.abs(image.astype(int) - reference).mean() < 1.5
    gray = Loader(name, "by-patient", "val", batch_size=4, store=module_store, decode=Decode(48, 64, channels=1),
                  shuffle=False)
    x, _ = next(iter(gray))
    assert x.shape == (4, 48, 64, 1)


def test_decoded_images_are_resized_with_a_centre_crop():
    from ringfeed import _native

    # 200×100 PNG: left half black, right half white → a centre crop to a square keeps the middle 100×100.
    pixels = np.zeros((100, 200, 3), dtype=np.uint8)
    pixels[:, 100:] = 255
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="PNG")
    cropped = np.frombuffer(_native.decode_image(encoded.getvalue(), 50, 50), np.uint8).reshape(50, 50, 3)
    assert cropped[:, :20].max() == 0 and cropped[:, 30:].min() == 255
    stretched = np.frombuffer(_native.decode_image(encoded.getvalue(), 50, 50, crop=False), np.uint8).reshape(50, 50, 3)
    assert stretched[:, :20].max() == 0 and stretched[:, 30:].min() == 255
    same = np.frombuffer(_native.decode_image(encoded.getvalue(), 100, 200), np.uint8).reshape(100, 200, 3)
    assert np.array_equal(same, pixels)
    with pytest.raises(ValueError, match="cannot decode"):
        _native.decode_image(b"not an image", 10, 10)


@pytest.mark.parametrize("fit", [{"random_crop": RandomResizedCrop()}, {"crop": True}, {"crop": False}],
                         ids=["random", "centre", "stretch"])
def test_images_left_to_the_trainer_decode_to_the_loaders_own_batches(module_store, slides, fit):
    """decode device gpu: the loader hands the stored bytes with each image's box, and the trainer's decode
    (ringfeed_client; torch on the CPU here) gives the batches the loader's own decode gives, within decoder
    tolerance: the same samples in the same order, the same random crops epoch after epoch."""
    pytest.importorskip("torchvision")
    from ringfeed_client.torch import tensors as decoded

    name, _ = slides
    own, deferred = (Loader(name, "by-patient", "train", batch_size=16, store=module_store, seed=3, with_uuids=True,
                            decode=Decode(64, 48, device=device, **fit)) for device in ("cpu", "gpu"))
    for _ in range(2):
        expected, batches = len(own), 0
        for (x, y, uuids), (blobs_x, blobs_y, blobs_uuids) in zip(own, decoded(deferred, device="cpu"), strict=True):
            assert np.array_equal(uuids, blobs_uuids.numpy()) and np.array_equal(y, blobs_y.numpy())
            assert blobs_x.shape == x.shape
            assert np.abs(x.astype(int) - blobs_x.numpy().astype(int)).mean() < 3.0
            batches += 1
        assert batches == expected > 0


def test_an_image_whose_header_cannot_be_read_is_corrupt_before_the_trainer(module_store, slides):
    name, _ = slides
    source = LoaderSource.from_split(name, "by-patient", "test", store=module_store)
    victim = uuid.UUID(bytes=source.uuids[2].tobytes())
    original = module_store.session.execute(f"SELECT data FROM {name}.data_by_uuid WHERE uuid = %s",
                                            (victim,)).one()[0]
    module_store.session.execute(f"UPDATE {name}.data_by_uuid SET data = %s WHERE uuid = %s", (b"garbage", victim))
    try:
        loader = Loader.from_source(source, batch_size=16, decode=Decode(32, 32, device="gpu"), with_uuids=True)
        batches = list(loader)
        assert all(isinstance(x, Blobs) and len(x.boxes) == len(x) == len(y) for x, y, _ in batches)
        assert sum(len(y) for _, y, _ in batches) == len(source.uuids) - 1
        assert loader.stats.corrupt_samples[0][0] == str(victim) and loader.stats.corrupt == 1
        assert victim.bytes not in all_uuids(batches)
    finally:
        module_store.session.execute(f"UPDATE {name}.data_by_uuid SET data = %s WHERE uuid = %s", (original, victim))


def test_raw_tensors_come_back_exact(module_store, tensors):
    loader = Loader(tensors, "halves", "train", batch_size=64, store=module_store, decode="tensor", with_uuids=True)
    seen = 0
    for x, y, _ in loader:
        assert x.dtype == np.float32 and x.shape[1:] == (2, 3)
        index = (x[:, 0, 0] / 10).astype(int)
        assert np.array_equal(x, (np.arange(6, dtype=np.float32) + index[:, None] * 10).reshape(-1, 2, 3))
        assert np.array_equal(y, index % 4)
        seen += len(x)
    assert seen == 200


def test_corrupt_samples_are_counted_and_reported_never_fatal(module_store, tensors, slides):
    name, _ = slides
    source = LoaderSource.from_split(name, "by-patient", "test", store=module_store)
    victims = [uuid.UUID(bytes=source.uuids[i].tobytes()) for i in (0, 5)]
    original = {v: module_store.session.execute(f"SELECT label, data FROM {name}.data_by_uuid WHERE uuid = %s",
                                                (v,)).one() for v in victims}
    try:
        for v in victims:  # bit rot after ingest: truncated JPEG, then garbage
            module_store.session.execute(f"UPDATE {name}.data_by_uuid SET data = %s WHERE uuid = %s",
                                         (original[v][1][:100] if v == victims[0] else b"garbage", v))
        loader = Loader.from_source(source, batch_size=16, decode=Decode(32, 32), with_uuids=True)
        delivered = all_uuids(list(loader))
        assert len(delivered) == len(source.uuids) - 2
        assert loader.stats.corrupt == 2
        assert {u for u, _ in loader.stats.corrupt_samples} == {str(v) for v in victims}
        assert all("cannot decode" in reason for _, reason in loader.stats.corrupt_samples)
        assert not {v.bytes for v in victims} & set(delivered)
    finally:
        for v in victims:
            module_store.session.execute(f"UPDATE {name}.data_by_uuid SET data = %s WHERE uuid = %s",
                                         (original[v][1], v))

    # A raw tensor of the wrong size is corrupt too.
    source = LoaderSource.from_split(tensors, "halves", "test", store=module_store)
    victim = uuid.UUID(bytes=source.uuids[3].tobytes())
    data = module_store.session.execute(f"SELECT data FROM {tensors}.data_by_uuid WHERE uuid = %s", (victim,)).one()[0]
    module_store.session.execute(f"UPDATE {tensors}.data_by_uuid SET data = %s WHERE uuid = %s", (data[:8], victim))
    try:
        loader = Loader.from_source(source, batch_size=50, decode="tensor")
        assert sum(len(x) for x, _ in loader) == 99
        assert loader.stats.corrupt_samples == [(str(victim), "8 bytes, expected 24")]
    finally:
        module_store.session.execute(f"UPDATE {tensors}.data_by_uuid SET data = %s WHERE uuid = %s", (data, victim))


def test_missing_samples_raise_or_are_skipped_and_counted(module_store, slides):
    name, _ = slides
    source = LoaderSource.from_split(name, "by-patient", "test", store=module_store)
    ghost = uuid.uuid4()
    uuids = np.concatenate([source.uuids, np.frombuffer(ghost.bytes, np.uint8).reshape(1, 16)])
    with_ghost = LoaderSource(**{**source.__dict__, "uuids": uuids})
    with pytest.raises(RingfeedError) as error:
        list(Loader.from_source(with_ghost, batch_size=16))
    assert str(error.value).startswith(f"1 sample(s) of {source.split} part test have no row in "
                                       f"{name}.data_by_uuid (first: {ghost})")
    assert "missing='skip'" in str(error.value)
    loader = Loader.from_source(with_ghost, batch_size=16, missing="skip")
    assert sum(len(y) for _, y in loader) == len(source.uuids)
    assert loader.stats.missing == 1 and loader.stats.missing_uuids == [str(ghost)]


def test_out_of_order_and_small_windows_deliver_the_same_samples(module_store, slides):
    name, _ = slides
    reference = sorted(all_uuids(Loader(name, "by-patient", "train", batch_size=8, store=module_store,
                                        with_uuids=True)))
    for options in (dict(out_of_order=True, prefetch=6), dict(memory_bytes=32 * 2**20, prefetch=1),
                    dict(out_of_order=True, prefetch=4, concurrency=3)):
        loader = Loader(name, "by-patient", "train", batch_size=8, store=module_store, with_uuids=True, **options)
        assert sorted(all_uuids(loader)) == reference, options


def test_pad_and_drop_policies(module_store, slides):
    name, _ = slides
    n = len(load_split(module_store, name, "by-patient").uuids("val"))
    w = 3 if n % 3 else 4
    assert n % w
    padded = [sum(len(y) for _, y in Loader(name, "by-patient", "val", batch_size=7, store=module_store, rank=r,
                                            world_size=w, remainder="pad")) for r in range(w)]
    dropped = [sum(len(y) for _, y in Loader(name, "by-patient", "val", batch_size=7, store=module_store, rank=r,
                                             world_size=w, remainder="drop")) for r in range(w)]
    assert set(padded) == {-(-n // w)} and set(dropped) == {n // w}


@pytest.mark.parametrize("kwargs, message", [
    # Every value alone is checked by LoaderOptions (tests/unit/test_loader_options.py); here, against the split.
    (dict(decode="tensor"), "decode='tensor' needs a dataset with the raw encoding"),
    (dict(rank=3, world_size=2), "rank must be in [0, 2), got 3"),
])
def test_bad_options_are_refused_with_a_clear_message(module_store, slides, kwargs, message):
    name, _ = slides
    with pytest.raises(RingfeedError) as error:
        Loader(name, "by-patient", "train", batch_size=8, store=module_store, **kwargs)
    assert message in str(error.value)


@pytest.mark.parametrize("remainder", ["uneven", "pad"])
def test_request_size_changes_nothing_but_the_requests(module_store, slides, remainder):
    """One read per sample and multi-row reads (with the duplicates padding puts in a batch) give identical batches."""
    name, stored = slides
    mean = sum(len(data) for _, data in stored.values()) // len(stored)
    module_store.refresh_stats(name)  # the catalog's mean sizes the first requests
    assert LoaderSource.from_split(name, "by-patient", "train", store=module_store).sample_bytes == mean
    runs = {}
    for rows in (1, 3, 8):  # samples per request
        loader = Loader(name, "by-patient", "train", batch_size=20, store=module_store, seed=5, with_uuids=True,
                        world_size=3, rank=2, remainder=remainder, request_bytes=rows * mean)
        # Bytes are appended in arrival order: compare each sample's bytes, in batch order.
        runs[rows] = [[(u[i].tobytes(), int(y[i]), bytes(b.data[slice(*b.spans[i])])) for i in range(len(y))]
                      for b, y, u in loader]
        for blobs, y, uuids in Loader(name, "by-patient", "train", batch_size=20, store=module_store, seed=5,
                                      with_uuids=True, request_bytes=rows * mean):
            for i, uid in enumerate(uuids):
                start, end = blobs.spans[i]
                label, data = stored[uuid.UUID(bytes=uid.tobytes())]
                assert (bytes(blobs.data[start:end]), int(y[i])) == (data, label)
    assert runs[1] == runs[3] == runs[8]


def test_a_sample_twice_in_one_request_is_delivered_twice(cassandra_node, slides):
    from ringfeed import _native

    name, stored = slides
    some = list(stored)[:3]
    uuids = [some[0], some[1], some[0], some[2], some[0]]
    fetcher = _native.Session(cassandra_node.hosts).fetcher(name, request_bytes=1 << 20)  # one request
    fetcher.submit(1, b"".join(u.bytes for u in uuids))
    batch = fetcher.take(1)
    spans = np.frombuffer(batch.spans, np.int64).reshape(-1, 2)
    data = bytes(batch.data)
    assert np.frombuffer(batch.positions, np.int64).tolist() == [0, 1, 2, 3, 4] and batch.missing == []
    assert [data[start:end] for start, end in spans] == [stored[u][1] for u in uuids]


def test_state_from_another_split_is_refused(module_store, slides, tensors):
    name, _ = slides
    state = Loader(tensors, "halves", "train", batch_size=8, store=module_store).state_dict()
    with pytest.raises(RingfeedError, match="loader state is for another run: split_id is"):
        Loader(name, "by-patient", "train", batch_size=8, store=module_store).load_state_dict(state)


def test_a_node_killed_mid_epoch_loses_and_duplicates_nothing(cassandra_ring, tmp_path):
    """3 nodes, RF 2, consistency ONE: a node dies after a few batches; every sample still comes exactly once."""
    name = "loader_ring"
    with Store(cassandra_ring.address) as store:
        if name in {d.schema.name for d in store.datasets()}:
            store.drop_dataset(name, force=True)
        demo = make_demo_set(tmp_path, patients=6)
        store.create_dataset(DatasetSchema(
            name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
            Encoding("jpeg"), metadata=(Column("scanner", "text"),), replication_factor=2))
        ingest(store, name, str(demo.manifest))
        create_split(store, name, "all", SplitSpec(ratios=(1,), names=("train",), seed=0))
        expected = sorted(u.tobytes() for u in load_split(store, name, "all").uuids("train"))
        source = LoaderSource.from_split(name, "all", "train", store=store)
    loader = Loader.from_source(source, batch_size=8, with_uuids=True, prefetch=4, concurrency=16)
    delivered = []
    killed = False
    try:
        for batch in loader:
            delivered += all_uuids([batch])
            if len(delivered) >= 40 and not killed:
                cassandra_ring.kill(2)
                killed = True
        assert killed
        assert sorted(delivered) == expected
        assert len(delivered) == len(set(delivered))
        # A second epoch with the node still down reads from the surviving replicas.
        assert sorted(all_uuids(loader)) == expected
    finally:
        cassandra_ring.restart(2)


def test_batch_buffers_are_recycled_once_released(module_store, slides):
    name, _ = slides
    # 8 × 640×640×3 bytes decoded per batch: the smallest memory bound (32 MiB) holds a few batches at once.
    loader = Loader(name, "by-patient", "train", batch_size=8, store=module_store, decode=Decode(640, 640),
                    prefetch=2, memory_bytes=32 * 2**20)
    batches = 0
    for _epoch in range(3):
        for x, _ in loader:
            batches += 1
            del x  # the training step is done with the batch
    # Without the pool every batch would allocate its buffer; with it, about the batches alive at once do (in
    # flight, being handed over, held by the consumer; the pool keeps `memory_bytes` of released ones). The window
    # breathes with the link, and a buffer released into a full pool is dropped, so a few more are allocated over
    # time: three epochs keep that noise well below the bound.
    assert batches > 100 and loader.stats.max_batches_in_flight < 10
    assert 0 < loader.stats.buffers_allocated <= batches // 4, loader.stats


def test_an_in_process_loader_serves_its_metrics_from_the_native_counters(module_store, slides):
    name, _ = slides
    loader = Loader(name, "by-patient", "train", batch_size=16, store=module_store, decode=Decode(64, 64))
    port = serve_loader_metrics(loader, 0, addr="127.0.0.1", trainingjob="notebook")
    batches = sum(1 for _ in loader)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposition = response.read().decode()
    loader.close()
    check_metrics(exposition)
    got = {(s.name, s.labels.get("stage")): (s.value, s.labels) for family in text_string_to_metric_families(exposition)
           for s in family.samples}
    value, labels = got["ringfeed_loader_samples_total", None]
    assert value == loader.stats.samples == len(load_split(module_store, name, "by-patient").uuids("train"))
    assert labels == {"dataset": name, "split": "by-patient", "part": "train", "rank": "0", "trainingjob": "notebook"}
    assert got["ringfeed_loader_batches_total", None][0] == batches
    assert got["ringfeed_loader_epoch", None][0] == 1
    assert got["ringfeed_loader_position_samples", None][0] == value
    # every image delivered was decoded and timed (and the next epoch's first batches, read ahead)
    assert got["ringfeed_loader_decode_seconds_count", None][0] >= value
    assert got["ringfeed_loader_fetch_latency_seconds_count", None][0] >= 1
    assert got["ringfeed_loader_stage_requests_total", "batch"][0] == batches
    assert got["ringfeed_loader_stage_requests_total", "decode"][0] >= 1
