"""Ingest against a real Cassandra node: byte-exact round trips, idempotence, rejections, a node crash mid-ingest."""

from __future__ import annotations

import io
import json
import tarfile
import threading
import urllib.request

import numpy as np
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from ringfeed.demo import make_demo_set
from ringfeed.errors import DatasetNotFound, RingfeedError
from ringfeed.ids import sample_uuid
from ringfeed.ingest import IngestOptions, IngestSummary, ingest
from ringfeed.metrics import serve_ingest_metrics
from ringfeed.schema import Column, DatasetSchema, Encoding

from conftest import check_metrics


def image_bytes(fmt: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(buffer, fmt)
    return buffer.getvalue()


def assert_round_trip(store, schema, expected: dict[tuple, tuple[int, bytes]]):
    """Every natural key maps to its UUID, whose stored label and bytes equal the input exactly."""
    for key, (label, data) in expected.items():
        record = store.sample(schema.name, sample_uuid(schema.name, key))
        assert record.label == label
        assert record.data == data
    info = store.refresh_stats(schema.name)
    assert info.samples == len(expected)
    assert info.bytes == sum(len(d) for _, d in expected.values())


def test_jpeg_manifest_round_trip(store, dataset_name, tmp_path):
    schema = DatasetSchema(dataset_name, (Column("case", "text"), Column("frame", "int")), Encoding("jpeg"),
                           metadata=(Column("site", "text"), Column("score", "double")))
    store.create_dataset(schema)
    expected, lines = {}, ["path,case,frame,site,score,label"]
    for i in range(30):
        data = image_bytes("JPEG", i)
        (tmp_path / f"{i}.jpg").write_bytes(data)
        lines.append(f"{i}.jpg,C{i % 4},{i},site{i % 2},{i / 10},{i % 3}")
        expected[(f"C{i % 4}", i)] = (i % 3, data)
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    summary = ingest(store, dataset_name, str(tmp_path / "m.csv"))
    assert (summary.inputs, summary.written, sum(summary.rejected.values())) == (30, 30, 0)
    assert summary.label_counts == {0: 10, 1: 10, 2: 10}
    assert_round_trip(store, schema, expected)
    # Metadata lands in both metadata tables.
    uid = sample_uuid(dataset_name, ("C1", 5))
    row = store.session.execute(f"SELECT site, score, label, sample_bytes FROM {dataset_name}.metadata_by_uuid "
                                "WHERE uuid = %s", (uid,)).one()
    assert row == ("site1", 0.5, 2, len(expected[("C1", 5)][1]))
    assert store.count_rows(dataset_name, "metadata_by_nat") == 30


def test_png_imagefolder_round_trip(store, dataset_name, tmp_path):
    schema = DatasetSchema(dataset_name, (Column("path", "text"),), Encoding("png"),
                           metadata=(Column("class", "text"),))
    store.create_dataset(schema)
    expected = {}
    for i, cls in enumerate(["zebra", "ant", "moth"] * 5):
        (tmp_path / cls).mkdir(exist_ok=True)
        data = image_bytes("PNG", i)
        (tmp_path / cls / f"{i}.png").write_bytes(data)
        expected[(f"{cls}/{i}.png",)] = (["ant", "moth", "zebra"].index(cls), data)
    summary = ingest(store, dataset_name, str(tmp_path))
    assert summary.written == 15
    assert store.schema(dataset_name).label_names == ("ant", "moth", "zebra")
    assert_round_trip(store, schema, expected)


def test_tiff_webdataset_round_trip(store, dataset_name, tmp_path):
    schema = DatasetSchema(dataset_name, (Column("key", "text"),), Encoding("tiff"),
                           metadata=(Column("stain", "text"),))
    store.create_dataset(schema)
    expected = {}
    for shard in range(2):
        with tarfile.open(tmp_path / f"shard-{shard:03d}.tar", "w") as tar:
            for i in range(6):
                key, data = f"s{shard}_{i}", image_bytes("TIFF", shard * 10 + i)
                for suffix, payload in ((".tiff", data), (".cls", str(i % 2).encode()),
                                        (".json", json.dumps({"stain": "he"}).encode())):
                    info = tarfile.TarInfo(key + suffix)
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                expected[(key,)] = (i % 2, data)
    summary = ingest(store, dataset_name, str(tmp_path))
    assert summary.written == 12
    assert_round_trip(store, schema, expected)


def test_raw_tensor_parquet_round_trip(store, dataset_name, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = DatasetSchema(dataset_name, (Column("case_id", "bigint"),), Encoding("raw", "float32", (2, 4, 4)))
    store.create_dataset(schema)
    expected, paths = {}, []
    for i in range(10):
        array = np.random.default_rng(i).standard_normal((2, 4, 4)).astype(np.float32)
        if i % 2:
            np.save(tmp_path / f"{i}.npy", array)
            paths.append(f"{i}.npy")
        else:
            (tmp_path / f"{i}.bin").write_bytes(array.tobytes())
            paths.append(f"{i}.bin")
        expected[(i,)] = (i % 2, array.tobytes())
    pq.write_table(pa.table({"path": paths, "case_id": list(range(10)), "label": [i % 2 for i in range(10)]}),
                   tmp_path / "m.parquet")
    summary = ingest(store, dataset_name, str(tmp_path / "m.parquet"))
    assert summary.written == 10
    assert_round_trip(store, schema, expected)


def demo_schema(name):
    return DatasetSchema(name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"),
                                Column("y", "int")), Encoding("jpeg"), metadata=(Column("scanner", "text"),))


def test_reingest_is_idempotent_and_corrupt_inputs_are_counted(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=4)
    store.create_dataset(demo_schema(dataset_name))
    first = ingest(store, dataset_name, str(demo.manifest))
    assert first.inputs == demo.images + demo.broken
    assert first.written == demo.images
    assert first.rejected == {"corrupt": 3, "unreadable": 1, "bad metadata": 1}
    reasons = dict(first.examples)
    assert reasons[f"manifest.csv:{demo.images + 2} (patches/broken/truncated.jpg)"].startswith(
        "corrupt: truncated JPEG")
    assert any(r == "unreadable: No such file or directory" for r in reasons.values())
    assert any("label='tumour?' is not an integer" in r for r in reasons.values())

    second = ingest(store, dataset_name, str(demo.manifest))
    assert second.written == demo.images
    info = store.refresh_stats(dataset_name)
    assert info.samples == demo.images
    assert sum(info.label_counts.values()) == demo.images
    assert info.label_counts == dict(first.label_counts)
    for table in ("metadata_by_nat", "data_by_uuid", "metadata_by_uuid"):
        assert store.count_rows(dataset_name, table) == demo.images
    assert store.info(dataset_name).last_ingest["written"] == demo.images


def test_unknown_dataset_and_missing_source(store, dataset_name, tmp_path):
    with pytest.raises(DatasetNotFound, match=f"unknown dataset '{dataset_name}'"):
        ingest(store, dataset_name, str(tmp_path))
    store.create_dataset(demo_schema(dataset_name))
    with pytest.raises(RingfeedError, match="does not exist"):
        ingest(store, dataset_name, str(tmp_path / "nowhere.csv"))


def test_create_dataset_is_idempotent_but_refuses_a_different_schema(store, dataset_name):
    schema = demo_schema(dataset_name)
    assert store.create_dataset(schema) is True
    assert store.create_dataset(schema) is False
    other = DatasetSchema(dataset_name, (Column("path", "text"),), Encoding("png"))
    with pytest.raises(RingfeedError, match="already exists with a different schema"):
        store.create_dataset(other)
    store.drop_dataset(dataset_name)
    assert dataset_name not in [i.schema.name for i in store.datasets()]


def test_node_killed_mid_ingest_then_rerun_completes_without_duplicates(cassandra_node, store, dataset_name, tmp_path):
    rows = 3000
    schema = DatasetSchema(dataset_name, (Column("n", "bigint"),), Encoding("raw", "uint8", (20_000,)),
                           with_metadata_by_uuid=False)
    store.create_dataset(schema)
    rng = np.random.default_rng(0)
    for i in range(rows):
        (tmp_path / f"{i}.bin").write_bytes(rng.integers(0, 255, 20_000, dtype=np.uint8).tobytes())
    (tmp_path / "m.csv").write_text("path,n,label\n" + "".join(f"{i}.bin,{i},{i % 2}\n" for i in range(rows)))

    class KillHalfway:
        done = 0
        killed = threading.Event()

        def start(self, total):
            pass

        def advance(self, inputs):
            self.done += inputs
            if self.done >= rows // 2 and not self.killed.is_set():
                self.killed.set()
                cassandra_node.kill()

    progress = KillHalfway()
    options = IngestOptions(chunk_size=32)
    try:
        with pytest.raises(RingfeedError, match=r"interrupted after .* retries \(re-run the same command"):
            ingest(store, dataset_name, str(tmp_path / "m.csv"), options, progress)
        assert progress.killed.is_set()
    finally:
        cassandra_node.restart()
    cassandra_node.wait_reachable(store.session)
    summary = ingest(store, dataset_name, str(tmp_path / "m.csv"), options)
    assert summary.written == rows
    assert store.count_rows(dataset_name, "data_by_uuid") == rows
    assert store.count_rows(dataset_name, "metadata_by_nat") == rows
    assert store.refresh_stats(dataset_name).samples == rows


def test_an_ingest_serves_its_progress_and_rejects_by_reason(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=2)
    store.create_dataset(demo_schema(dataset_name))
    summary = IngestSummary(dataset_name, str(demo.manifest))
    port = serve_ingest_metrics(summary, 0, addr="127.0.0.1")
    ingest(store, dataset_name, str(demo.manifest), summary=summary)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        exposition = response.read().decode()
    check_metrics(exposition)
    got = {(s.name, s.labels.get("reason")): s.value for family in text_string_to_metric_families(exposition)
           for s in family.samples}
    assert got["ringfeed_ingest_samples_total", None] == summary.written == demo.images
    assert got["ringfeed_ingest_inputs_total", None] == demo.images + demo.broken
    assert got["ringfeed_ingest_bytes_total", None] == summary.bytes > 0
    assert {reason: value for (name, reason), value in got.items() if name == "ringfeed_ingest_rejected_samples_total"
            } == {"corrupt": 3, "unreadable": 1, "bad metadata": 1}
    assert 0 < got["ringfeed_ingest_elapsed_seconds", None] == summary.seconds
