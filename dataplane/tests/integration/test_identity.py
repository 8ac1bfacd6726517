"""Identity against a real node: a sample is its natural key (a relabel updates it in place, through the Python API
and the CLI, which the operator's ingest Job runs); a split belongs to the dataset it was made from (load, import and
drop keep to that); datasets of the earlier layout are refused until `ringfeed dataset migrate`, which is tested."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ringfeed import Loader
from ringfeed.demo import make_demo_set
from ringfeed.ids import sample_uuid
from ringfeed.ingest import ingest
from ringfeed.migration import migrate_dataset
from ringfeed.schema import CATALOG_KEYSPACE, MIGRATION_TABLE, Column, DatasetSchema, Encoding
from ringfeed.splits import (
    SplitDatasetMismatch,
    SplitResult,
    SplitSpec,
    content_hash,
    create_split,
    delete_split,
    export_split,
    import_split,
    list_splits,
    load_split,
    save_split,
)
from ringfeed.store import DatasetHasSplits, DatasetNeedsMigration

RINGFEED = str(Path(sys.executable).with_name("ringfeed"))
SPECS = {
    "by-patient": SplitSpec(ratios=(7, 2, 1), group_by=("patient_id",), seed=42),
    "cv3": SplitSpec(folds=3, group_by=("patient_id",), balance="equal", seed=1),
    "rows": SplitSpec(ratios=(8, 1, 1), seed=5),
}


def demo_schema(name: str) -> DatasetSchema:
    return DatasetSchema(name, (Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"),
                                Column("y", "int")), Encoding("jpeg"), metadata=(Column("scanner", "text"),),
                         label_names=("normal", "tumor"))


def good_rows(manifest: Path) -> list[dict]:
    with open(manifest) as f:
        return [row for row in csv.DictReader(f) if row["patient_id"] != "P900"]


def relabelled_manifest(manifest: Path, every: int = 3) -> tuple[Path, list[dict], int]:
    """A manifest beside ``manifest`` with every ``every``-th sample's label flipped (and its scanner changed);
    returns it, its rows and how many changed."""
    rows = good_rows(manifest)
    for index, row in enumerate(rows):
        if index % every == 0:
            row["label"] = str(1 - int(row["label"]))
            row["scanner"] = "relabelled"
    path = manifest.with_name("relabelled.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path, rows, -(-len(rows) // every)


def labels_by_uuid(name: str, rows: list[dict]) -> dict[bytes, int]:
    return {sample_uuid(name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"]))).bytes: int(r["label"])
            for r in rows}


def epoch(store, name: str, split: str, part: str) -> dict[bytes, int]:
    """One epoch of the loader over a part: label served per UUID (asserting each UUID comes once)."""
    served = {}
    for _, y, uuids in Loader(name, split, part, batch_size=32, store=store, with_uuids=True):
        for u, label in zip(uuids, y.tolist(), strict=True):
            assert u.tobytes() not in served
            served[u.tobytes()] = label
    return served


def assert_split_is_whole_and_leak_free(store, name: str, split: str, samples: set[bytes], groups: dict[bytes, str]):
    loaded = load_split(store, name, split)
    every = [u.tobytes() for part in loaded.parts.values() for u in part]
    assert len(every) == len(set(every)), "a sample is in two parts"
    if SPECS[split].balance == "natural":  # keeps every sample, once
        assert set(every) == samples
    assert set(every) <= samples
    if SPECS[split].group_by:
        owner = {}
        for part, uuids in loaded.parts.items():
            for u in uuids:
                assert owner.setdefault(groups[u.tobytes()], part) == part, "a patient is in two parts"


def test_relabel_updates_samples_in_place_through_api_and_cli(cassandra_node, store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=6)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    before = store.refresh_stats(dataset_name)
    original = labels_by_uuid(dataset_name, good_rows(demo.manifest))
    groups = {sample_uuid(dataset_name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"]))).bytes:
              r["patient_id"] for r in good_rows(demo.manifest)}
    for name, spec in SPECS.items():
        create_split(store, dataset_name, name, spec)

    relabelled, rows, changed = relabelled_manifest(demo.manifest)
    expected = labels_by_uuid(dataset_name, rows)
    assert sum(expected[u] != original[u] for u in expected) == changed > 0
    ingest(store, dataset_name, str(relabelled))  # the Python API
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(cassandra_node.hosts)}
    subprocess.run([RINGFEED, "ingest", dataset_name, str(relabelled)], check=True, capture_output=True, env=env)

    info = store.refresh_stats(dataset_name)
    assert info.samples == before.samples == demo.images
    assert info.label_counts == dict(Counter(expected.values()))
    assert info.label_counts != before.label_counts  # per-label counts moved
    for table in ("metadata_by_nat", "data_by_uuid", "metadata_by_uuid"):
        assert store.count_rows(dataset_name, table) == demo.images
    scanned = store.scan(dataset_name, "metadata_by_nat", ["uuid", "label", "scanner"])
    assert {u.tobytes(): label for u, label in zip(scanned["uuid"], scanned["label"].tolist(), strict=True)} == expected
    assert Counter(scanned["scanner"].to_list())["relabelled"] == changed

    samples = set(expected)
    for name in SPECS:
        stored, _ = create_split(store, dataset_name, name, SPECS[name])
        assert stored.stats["scanned"] == demo.images
        assert_split_is_whole_and_leak_free(store, dataset_name, name, samples, groups)
    by_patient = load_split(store, dataset_name, "by-patient")
    assert by_patient.samples == demo.images
    served = {}
    for part in by_patient.parts:
        served.update(epoch(store, dataset_name, "by-patient", part))
    assert served == expected  # every sample once per epoch, with its new label


def test_split_files_import_only_into_their_own_dataset(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    other = dataset_name + "_other"
    for name in (dataset_name, other):
        store.create_dataset(demo_schema(name))
        ingest(store, name, str(demo.manifest))
    stored, _ = create_split(store, dataset_name, "by-patient", SPECS["by-patient"])
    path = export_split(load_split(store, dataset_name, "by-patient"), tmp_path / "split.parquet")

    with pytest.raises(SplitDatasetMismatch, match=f"was made from dataset '{dataset_name}' .* not from dataset "
                                                   f"'{other}' .*import it into the dataset it was made from"):
        import_split(store, other, path)
    assert list_splits(store, other) == []
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(store.address.hosts)}
    cli = subprocess.run([RINGFEED, "split", "import", other, str(path)], capture_output=True, text=True, env=env)
    assert cli.returncode == 1 and cli.stdout.count("\n") + cli.stderr.count("\n") == 1
    assert "import it into the dataset it was made from" in cli.stdout + cli.stderr

    restored, created = import_split(store, dataset_name, path, "restored")
    assert created and restored.content_hash == stored.content_hash and restored.dataset_id == stored.dataset_id

    # The same name dropped and created again is another dataset: its old split files do not fit it.
    store.drop_dataset(dataset_name, force=True)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    with pytest.raises(SplitDatasetMismatch, match="import it into the dataset it was made from"):
        import_split(store, dataset_name, path)
    store.drop_dataset(dataset_name)
    store.drop_dataset(other)


def test_a_file_without_identity_is_checked_by_content(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    loaded = load_split(store, dataset_name, create_split(store, dataset_name, "s", SPECS["by-patient"])[0].name)
    import pyarrow.parquet as pq

    path = export_split(loaded, tmp_path / "split.parquet")
    older = tmp_path / "older.parquet"  # as exported before identities existed
    table = pq.read_table(path)
    meta = table.schema.metadata[b"ringfeed.split"].replace(f'"dataset_id": "{loaded.dataset_id}", '.encode(), b"")
    pq.write_table(table.replace_schema_metadata({b"ringfeed.split": meta}), older)
    assert import_split(store, dataset_name, older, "older")[0].content_hash == loaded.content_hash

    store.create_dataset(demo_schema(dataset_name + "_b"))
    ingest(store, dataset_name + "_b", str(demo.manifest))  # same files, other dataset name: other UUIDs
    with pytest.raises(SplitDatasetMismatch, match="records no dataset identity .* no sample of the dataset"):
        import_split(store, dataset_name + "_b", older)
    store.drop_dataset(dataset_name, force=True)
    store.drop_dataset(dataset_name + "_b")


def test_drop_refuses_a_dataset_with_splits_unless_forced(cassandra_node, store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    stored, _ = create_split(store, dataset_name, "by-patient", SPECS["by-patient"])
    with pytest.raises(DatasetHasSplits, match=r"has splits \(by-patient\): delete them first .* --force"):
        store.drop_dataset(dataset_name)
    assert store.count_rows(dataset_name, "data_by_uuid") == demo.images

    env = {**os.environ, "RINGFEED_HOSTS": ",".join(cassandra_node.hosts)}
    refused = subprocess.run([RINGFEED, "dataset", "drop", dataset_name, "--yes"], capture_output=True, text=True,
                             env=env)
    assert refused.returncode == 1 and "drop with --force" in refused.stdout + refused.stderr
    subprocess.run([RINGFEED, "dataset", "drop", dataset_name, "--force", "--yes"], check=True, capture_output=True,
                   env=env)
    assert list_splits(store, dataset_name) == []
    chunks = store.session.execute(f"SELECT uuids FROM {CATALOG_KEYSPACE}.split_chunks WHERE split_id = %s "
                                   "AND part = 'train' AND chunk = 0", (stored.split_id,)).one()
    assert chunks is None
    # Created again, it starts without splits: nothing of the earlier one is left to load.
    store.create_dataset(demo_schema(dataset_name))
    assert list_splits(store, dataset_name) == []
    store.drop_dataset(dataset_name)


def test_a_split_left_by_an_earlier_dataset_of_the_same_name_is_refused(store, dataset_name, tmp_path):
    demo = make_demo_set(tmp_path, patients=3)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    create_split(store, dataset_name, "left", SPECS["by-patient"])
    # As an earlier Ringfeed did: the dataset forgotten, its splits left behind; then created again.
    store.session.execute(f"DELETE FROM {CATALOG_KEYSPACE}.datasets WHERE name = %s", (dataset_name,))
    store.session.execute(f"DROP KEYSPACE {dataset_name}")
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    with pytest.raises(SplitDatasetMismatch, match=f"made from an earlier dataset named '{dataset_name}'.*delete it"):
        load_split(store, dataset_name, "left")
    with pytest.raises(SplitDatasetMismatch):
        Loader(dataset_name, "left", "train", batch_size=8, store=store)
    store.drop_dataset(dataset_name, force=True)


# -- migration from the earlier layout ------------------------------------------------------------------------------

def downgrade(store, name: str, relabel: list[dict]) -> None:
    """Turn a current dataset into what an earlier Ringfeed left: metadata_by_nat keyed by (natural keys, label),
    ``relabel``'s samples re-ingested with their label flipped (a second row each), no identities."""
    ks = name
    table = store.scan(name, "metadata_by_nat", ["patient_id", "slide_num", "x", "y", "scanner", "label", "uuid",
                                                 "sample_bytes"])
    store.session.execute(f"DROP TABLE {ks}.metadata_by_nat")
    store.session.execute(f"CREATE TABLE {ks}.metadata_by_nat (patient_id text, slide_num int, x int, y int, "
                          "scanner text, label int, uuid uuid, sample_bytes int, "
                          "PRIMARY KEY ((patient_id, slide_num, x, y, label), uuid))")
    insert = store.session.prepare(f"INSERT INTO {ks}.metadata_by_nat (patient_id, slide_num, x, y, scanner, label, "
                                   "uuid, sample_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    rows = list(zip(table["patient_id"].to_list(), table["slide_num"].tolist(), table["x"].tolist(),
                    table["y"].tolist(), table["scanner"].to_list(), table["label"].tolist(),
                    [uuid.UUID(bytes=u.tobytes()) for u in table["uuid"]], table["sample_bytes"].tolist(),
                    strict=True))
    for row in rows:
        store.session.execute(insert, row)
    for r in relabel:
        uid = sample_uuid(name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"])))
        flipped = 1 - int(r["label"])
        size = store.session.execute(f"SELECT sample_bytes FROM {ks}.metadata_by_uuid WHERE uuid = %s", (uid,)).one()[0]
        store.session.execute(insert, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"]), "relabelled",
                                       flipped, uid, size))
        store.session.execute(f"UPDATE {ks}.data_by_uuid SET label = %s WHERE uuid = %s", (flipped, uid))
        store.session.execute(f"UPDATE {ks}.metadata_by_uuid SET label = %s, scanner = 'relabelled' WHERE uuid = %s",
                              (flipped, uid))
    store.session.execute(f"DELETE dataset_id FROM {CATALOG_KEYSPACE}.datasets WHERE name = %s", (name,))
    for split in list_splits(store, name):
        store.session.execute(f"UPDATE {CATALOG_KEYSPACE}.splits SET dataset_id = null WHERE dataset = %s "
                              "AND name = %s AND version = %s", (name, split.name, split.version))


@pytest.fixture
def old_layout(store, dataset_name, tmp_path):
    """A dataset as an earlier Ringfeed left it, with a valid split and one that serves a sample twice."""
    demo = make_demo_set(tmp_path, patients=4)
    store.create_dataset(demo_schema(dataset_name))
    ingest(store, dataset_name, str(demo.manifest))
    rows = good_rows(demo.manifest)
    create_split(store, dataset_name, "good", SPECS["by-patient"])
    first = np.frombuffer(sample_uuid(dataset_name, (rows[0]["patient_id"], int(rows[0]["slide_num"]),
                                                     int(rows[0]["x"]), int(rows[0]["y"]))).bytes,
                          dtype=np.uint8).reshape(1, 16)
    leaky = {"train": first, "val": first.copy()}  # what a split of the old layout could hold after a relabel
    save_split(store, dataset_name, "leaky", SplitSpec(ratios=(1, 1), names=("train", "val")),
               SplitResult(leaky, {"parts": []}, content_hash(leaky)))
    relabel = rows[::4]
    downgrade(store, dataset_name, relabel)
    expected = labels_by_uuid(dataset_name, rows)
    for r in relabel:
        expected[sample_uuid(dataset_name, (r["patient_id"], int(r["slide_num"]), int(r["x"]), int(r["y"]))).bytes] \
            = 1 - int(r["label"])
    yield dataset_name, demo, expected, len(relabel)
    store.drop_dataset(dataset_name, force=True)


def test_the_old_layout_is_refused_with_the_command_that_fixes_it(store, old_layout):
    name, demo, _, relabelled = old_layout
    old_rows = store.session.execute(f"SELECT count(*) FROM {name}.metadata_by_nat").one()[0]
    assert old_rows == demo.images + relabelled  # the earlier layout's defect: a row per label
    for action in (lambda: ingest(store, name, str(demo.manifest)), lambda: load_split(store, name, "good"),
                   lambda: create_split(store, name, "new", SPECS["rows"]), lambda: store.refresh_stats(name)):
        with pytest.raises(DatasetNeedsMigration, match=f"run `ringfeed dataset migrate {name}` once"):
            action()


def test_migrate_makes_one_row_per_sample_and_keeps_valid_splits(cassandra_node, store, old_layout):
    name, demo, expected, relabelled = old_layout
    env = {**os.environ, "RINGFEED_HOSTS": ",".join(cassandra_node.hosts), "COLUMNS": "200"}
    out = subprocess.run([RINGFEED, "dataset", "migrate", name], check=True, capture_output=True, text=True,
                         env=env).stdout
    assert f"migrated {name}: {demo.images:,} samples ({demo.images + relabelled:,} rows before, {relabelled:,} " \
           "relabelled samples counted once" in out
    assert "splits kept: good v1" in out
    assert "split leaky v1 no longer loads: 1 of its UUIDs appear twice" in out

    assert store.partition_key(name, "metadata_by_nat") == ["patient_id", "slide_num", "x", "y"]
    assert store.partition_key(name, MIGRATION_TABLE) is None
    info = store.info(name)
    assert info.dataset_id is not None and info.samples == demo.images
    assert info.label_counts == dict(Counter(expected.values()))
    scanned = store.scan(name, "metadata_by_nat", ["uuid", "label", "scanner"])
    assert {u.tobytes(): label for u, label in zip(scanned["uuid"], scanned["label"].tolist(), strict=True)} == expected
    assert Counter(scanned["scanner"].to_list())["relabelled"] == relabelled

    good = load_split(store, name, "good")
    assert good.dataset_id == info.dataset_id
    with pytest.raises(SplitDatasetMismatch, match="delete it"):
        load_split(store, name, "leaky")
    assert ingest(store, name, str(demo.manifest)).written == demo.images  # writable again
    assert migrate_dataset(store, name).up_to_date
    delete_split(store, name, "leaky")


def test_an_interrupted_migration_is_finished_by_running_it_again(store, old_layout):
    name, demo, expected, _ = old_layout
    schema = store.info(name).schema
    # Interrupted right after the old table was copied and dropped, before the new one was made.
    from ringfeed.migration import _copy_old_table

    _copy_old_table(store, store.address.native_session("QUORUM"), schema,
                    store.partition_key(name, "metadata_by_nat"))
    store.session.execute(f"DROP TABLE {name}.metadata_by_nat")
    summary = migrate_dataset(store, name)
    assert summary.old_rows == 0 and summary.samples == demo.images
    assert store.partition_key(name, MIGRATION_TABLE) is None
    scanned = store.scan(name, "metadata_by_nat", ["uuid", "label"])
    assert {u.tobytes(): label for u, label in zip(scanned["uuid"], scanned["label"].tolist(), strict=True)} == expected
