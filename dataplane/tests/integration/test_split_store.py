"""Splits against a real Cassandra node: scan, compute, store, load, export/import, versions, delete, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ringfeed.demo import make_demo_set
from ringfeed.errors import RingfeedError
from ringfeed.ids import sample_uuid
from ringfeed.ingest import ingest
from ringfeed.schema import CATALOG_KEYSPACE, Column, DatasetSchema, Encoding
from ringfeed.splits import (
    Filter,
    SplitError,
    SplitNotFound,
    SplitSpec,
    compute_split,
    create_split,
    delete_split,
    export_split,
    list_splits,
    load_split,
    read_split_file,
    save_split,
)
from ringfeed.splits.storage import CHUNK_ROWS
from ringfeed.store import Store

RINGFEED = str(Path(sys.executable).with_name("ringfeed"))
BY_PATIENT = SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=42)


@pytest.fixture
def demo_dataset(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=10)
    store.create_dataset(DatasetSchema(
        dataset_name,
        (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
        Encoding("jpeg"), metadata=(Column("scanner", "text"),), label_names=("normal", "tumor")))
    ingest(store, dataset_name, str(demo.manifest))
    store.refresh_stats(dataset_name)
    return dataset_name, demo


def manifest_rows(demo) -> list[dict]:
    import csv

    with open(demo.manifest) as f:
        return [r for r in csv.DictReader(f) if r["patient_id"] != "P900"]


def test_scan_reads_every_row_as_columns(store, demo_dataset):
    name, demo = demo_dataset
    progress = []
    table = store.scan(name, "metadata_by_nat", ["uuid", "label", "patient_id", "slide_num", "scanner"],
                       progress.append)
    rows = manifest_rows(demo)
    assert len(table) == len(rows) == demo.images
    assert progress and progress[-1] == len(rows)
    expected = {sample_uuid(name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"]))).bytes:
                (int(r["label"]), r["patient_id"], int(r["slide_num"]), r["scanner"]) for r in rows}
    got = dict(zip((u.tobytes() for u in table["uuid"]),
                   zip(table["label"].tolist(), table["patient_id"].to_list(), table["slide_num"].tolist(),
                       table["scanner"].to_list(), strict=True), strict=True))
    assert got == expected


def test_create_load_and_versions(store, demo_dataset):
    name, demo = demo_dataset
    split, created = create_split(store, name, "by-patient", BY_PATIENT)
    assert created and split.version == 1
    # The stored split is what the engine computes from the same metadata.
    table = store.scan(name, "metadata_by_nat", ["uuid", "label", "sample_bytes", "patient_id"])
    expected = compute_split(table, BY_PATIENT, ("normal", "tumor"))
    assert split.content_hash == expected.content_hash and split.stats == expected.stats

    loaded = load_split(store, name, "by-patient")
    assert {p: len(u) for p, u in loaded.parts.items()} == split.part_sizes
    assert all(np.array_equal(loaded.parts[p], expected.parts[p]) for p in expected.parts)
    patients = {u.bytes: r["patient_id"] for r in manifest_rows(demo)
                for u in [sample_uuid(name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"])))]}
    owners: dict[str, set[str]] = {}
    for part, uuids in loaded.parts.items():
        for u in uuids:
            owners.setdefault(patients[u.tobytes()], set()).add(part)
    assert len(owners) == 10 and all(len(parts) == 1 for parts in owners.values())

    # Same parameters and content: nothing new. Other parameters: version 2, version 1 untouched.
    again, created = create_split(store, name, "by-patient", BY_PATIENT)
    assert not created and again.version == 1
    other, created = create_split(store, name, "by-patient", SplitSpec(ratios=(1, 1), group_by=("patient_id",)))
    assert created and other.version == 2
    assert [s.version for s in list_splits(store, name, "by-patient")] == [2, 1]
    assert load_split(store, name, "by-patient", version=1).content_hash == split.content_hash
    assert list(load_split(store, name, "by-patient").parts) == ["train", "val"]

    assert delete_split(store, name, "by-patient", version=2) == [2]
    assert delete_split(store, name, "by-patient") == [1]
    with pytest.raises(SplitNotFound, match="has no split 'by-patient' \\(no splits yet\\)"):
        load_split(store, name, "by-patient")
    assert store.session.execute("SELECT count(*) FROM ringfeed.split_chunks WHERE split_id = %s AND part = 'train' "
                                 "AND chunk = 0", (split.split_id,)).one()[0] == 0


def _forget_keyspace(metadata) -> None:
    metadata.keyspaces.pop(CATALOG_KEYSPACE)


def _forget_tables(metadata) -> None:
    metadata.keyspaces[CATALOG_KEYSPACE].tables.clear()


def _forget_identity_columns(metadata) -> None:
    for table in ("datasets", "splits"):
        metadata.keyspaces[CATALOG_KEYSPACE].tables[table].columns.pop("dataset_id")


@pytest.mark.parametrize("lag", [_forget_keyspace, _forget_tables, _forget_identity_columns],
                         ids=["keyspace", "tables", "columns"])
def test_a_session_whose_driver_has_not_seen_the_catalog_yet_finds_what_another_client_made(
        cassandra_node, store, demo_dataset, lag):
    """The operator and an ingest make datasets and splits while a trainer's or a test's session is open, and the
    driver's schema events lag under load: the session reads the ring's schema on a miss instead of answering that
    nothing exists. The lag is made by removing what the driver knows of the catalog, at three depths."""
    name, _ = demo_dataset
    made = create_split(store, name, "by-patient", BY_PATIENT)[0]
    with Store(cassandra_node.address) as late:
        lag(late._cluster.metadata)
        assert late.dataset_id(name) == store.dataset_id(name)
        assert load_split(late, name, "by-patient").content_hash == made.content_hash
        assert [i.schema.name for i in late.datasets()] == [i.schema.name for i in store.datasets()]


def test_million_row_split_loads_in_milliseconds(store, dataset_name):
    """A split of a million UUIDs spans chunks; loading it (and verifying its hash) is fast."""
    store.create_dataset(DatasetSchema(dataset_name, (Column("k", "int"),), Encoding("jpeg")))
    rng = np.random.default_rng(0)
    parts = {"train": np.sort(rng.integers(0, 256, (900_000, 16), dtype=np.uint8).view("V16"), axis=0)
             .view(np.uint8).reshape(-1, 16), "val": rng.integers(0, 256, (100_000, 16), dtype=np.uint8)}
    from ringfeed.splits import SplitResult, content_hash

    result = SplitResult(parts, {"synthetic": True}, content_hash(parts))
    saved, _ = save_split(store, dataset_name, "big", SplitSpec(ratios=(9, 1)), result)
    assert saved.part_sizes == {"train": 900_000, "val": 100_000} and 900_000 > CHUNK_ROWS
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        loaded = load_split(store, dataset_name, "big")
        best = min(best, time.perf_counter() - start)
    assert all(np.array_equal(loaded.parts[p], parts[p]) for p in parts)
    print(f"load_split of 1,000,000 UUIDs: {best * 1000:.0f} ms")


@pytest.mark.parametrize("suffix", [".parquet", ".npz"])
def test_export_import_round_trip(store, demo_dataset, tmp_path, suffix):
    name, _ = demo_dataset
    create_split(store, name, "by-patient", BY_PATIENT)
    original = load_split(store, name, "by-patient")
    path = export_split(original, tmp_path / f"split{suffix}")
    meta, result = read_split_file(path)
    assert meta["dataset"] == name and meta["content_hash"] == original.content_hash
    imported, created = save_split(store, name, "copy", BY_PATIENT, result)
    assert created and imported.content_hash == original.content_hash
    copy = load_split(store, name, "copy")
    assert all(np.array_equal(copy.parts[p], original.parts[p]) for p in original.parts)


def test_edited_file_is_refused(store, demo_dataset, tmp_path):
    name, _ = demo_dataset
    create_split(store, name, "by-patient", BY_PATIENT)
    path = export_split(load_split(store, name, "by-patient"), tmp_path / "split.npz")
    with np.load(path) as archive:
        arrays = dict(archive)
    arrays["part/val"] = arrays["part/val"][1:]
    np.savez(path, **arrays)
    with pytest.raises(RingfeedError, match="do not match the hash recorded in the file"):
        read_split_file(path)


@pytest.mark.parametrize("spec, message", [
    (SplitSpec(ratios=(7, 2, 1), group_by=("hospital",)), "unknown column 'hospital'"),
    (SplitSpec(ratios=(1,), filters=(Filter.parse("slide_num < 0"),)), "select none of the"),
    (SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), filters=(Filter.parse("patient_id == P001"),)),
     "3 parts need at least 3 groups of patient_id; the selected data has 1"),
])
def test_infeasible_requests_store_nothing(store, demo_dataset, spec, message):
    name, _ = demo_dataset
    with pytest.raises(SplitError, match=message):
        create_split(store, name, "bad", spec)
    assert list_splits(store, name) == []


def run_cli(node, *args):
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(node.hosts), "COLUMNS": "200"}
    return subprocess.run([RINGFEED, *args], capture_output=True, text=True, env=env)


def test_cli_split_commands(cassandra_node, demo_dataset, tmp_path):
    name, demo = demo_dataset
    create = run_cli(cassandra_node, "split", "create", name, "by-patient", "--ratios", "7,2,1",
                     "--group-by", "patient_id", "--seed", "42")
    assert create.returncode == 0, create.stderr
    out = create.stdout
    assert "stored as version 1" in out and "grouped by patient_id" in out
    assert "normal" in out and "tumor" in out and f"{demo.images:,} samples scanned" in out

    assert "identical to version 1" in run_cli(cassandra_node, "split", "create", name, "by-patient", "--ratios",
                                               "7,2,1", "--group-by", "patient_id", "--seed", "42").stdout
    listing = run_cli(cassandra_node, "split", "list", name).stdout
    assert "by-patient" in listing and "train" in listing
    assert "got/target" in run_cli(cassandra_node, "split", "show", name, "by-patient").stdout

    exported = run_cli(cassandra_node, "split", "export", name, "by-patient", str(tmp_path / "s.parquet"))
    assert exported.returncode == 0 and f"{demo.images:,} UUIDs" in exported.stdout
    imported = run_cli(cassandra_node, "split", "import", name, str(tmp_path / "s.parquet"), "--name", "again")
    assert imported.returncode == 0 and "imported as version 1" in imported.stdout

    balanced = run_cli(cassandra_node, "split", "create", name, "balanced", "--folds", "3", "--group-by", "patient_id",
                       "--balance", "normal=1,tumor=1", "--where", "slide_num < 2")
    assert balanced.returncode == 0, balanced.stderr
    assert "fold0" in balanced.stdout and "balance 1:1 (normal, tumor)" in balanced.stdout

    bad = run_cli(cassandra_node, "split", "create", name, "bad", "--ratios", "7,0,1")
    assert bad.returncode == 2 and "give comma-separated positive integers" in bad.stderr  # a usage error
    bad = run_cli(cassandra_node, "split", "create", name, "bad", "--where", "slide_num ~ 1")
    assert bad.returncode == 1 and "cannot read filter" in bad.stderr
    assert "no split 'bad'" in run_cli(cassandra_node, "split", "show", name, "bad").stderr

    deleted = run_cli(cassandra_node, "split", "delete", name, "by-patient", "--yes")
    assert deleted.returncode == 0 and "deleted" in deleted.stdout
    assert "by-patient" not in run_cli(cassandra_node, "split", "list", name).stdout
