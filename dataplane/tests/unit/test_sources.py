"""Sources: manifest parsing (CSV and Parquet), ImageFolder and WebDataset enumeration, schema mismatches."""

import io
import json
import tarfile

import pytest

from ringfeed.errors import RingfeedError
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.sources import Rejection, SourceSample, open_source

SLIDES = DatasetSchema(name="slides", natural_keys=(Column("patient_id", "text"), Column("slide_num", "int")),
                       metadata=(Column("scanner", "text"),), encoding=Encoding("jpeg"))
BY_PATH = DatasetSchema(name="pets", natural_keys=(Column("path", "text"),), encoding=Encoding("png"))


def write_csv(path, text):
    path.write_text(text)
    return path


def test_csv_manifest_rows_become_samples_with_paths_relative_to_the_manifest(tmp_path):
    (tmp_path / "a.jpg").write_bytes(b"A")
    manifest = write_csv(tmp_path / "m.csv", "path,patient_id,slide_num,scanner,label\n"
                                              "a.jpg,P1,0,aperio,1\n,P2,0,aperio,0\n")
    source = open_source(manifest, SLIDES)
    items = list(source.items())
    assert source.total == 2
    first, second = items
    assert isinstance(first, SourceSample)
    assert first.fields["patient_id"] == "P1" and first.label == "1" and first.read() == b"A"
    assert first.origin == "m.csv:2 (a.jpg)"
    assert isinstance(second, Rejection) and second.kind == "bad metadata" and second.origin == "m.csv:3"


def test_manifest_missing_a_schema_column_is_a_one_line_error(tmp_path):
    manifest = write_csv(tmp_path / "m.csv", "path,patient_id,label\na.jpg,P1,0\n")
    with pytest.raises(RingfeedError, match=r"does not match dataset 'slides': missing column\(s\) slide_num, "
                                            r"scanner \(it has: label, path, patient_id\)"):
        open_source(manifest, SLIDES)


def test_manifest_without_label_or_path_column(tmp_path):
    with pytest.raises(RingfeedError, match="has no 'label' column"):
        open_source(write_csv(tmp_path / "m.csv", "path,patient_id,slide_num,scanner\n"), SLIDES)
    with pytest.raises(RingfeedError, match="has no 'file' column"):
        open_source(write_csv(tmp_path / "n.csv", "path,label\n"), SLIDES, path_column="file")


def test_parquet_manifest(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "img").mkdir()
    (tmp_path / "img" / "b.jpg").write_bytes(b"B")
    table = pa.table({"path": ["img/b.jpg"], "patient_id": ["P9"], "slide_num": [3], "scanner": ["x"], "label": [0]})
    pq.write_table(table, tmp_path / "m.parquet")
    source = open_source(tmp_path / "m.parquet", SLIDES)
    (item,) = list(source.items())
    assert item.fields["slide_num"] == 3 and item.label == 0 and item.read() == b"B"


def test_missing_source_is_a_one_line_error(tmp_path):
    with pytest.raises(RingfeedError, match="does not exist"):
        open_source(tmp_path / "nope.csv", SLIDES)


def test_imagefolder_numbers_classes_in_sorted_order_and_rejects_foreign_files(tmp_path):
    for cls, name in [("dog", "1.png"), ("cat", "2.png"), ("cat", "notes.txt")]:
        (tmp_path / cls).mkdir(exist_ok=True)
        (tmp_path / cls / name).write_bytes(b"x")
    source = open_source(tmp_path, BY_PATH)
    assert source.label_names == ("cat", "dog")
    items = list(source.items())
    samples = {i.fields["path"]: i.label for i in items if isinstance(i, SourceSample)}
    assert samples == {"cat/2.png": 0, "dog/1.png": 1}
    (rejection,) = [i for i in items if isinstance(i, Rejection)]
    assert rejection.kind == "unexpected file" and rejection.origin == "cat/notes.txt"


def test_imagefolder_keeps_existing_class_numbers(tmp_path):
    (tmp_path / "ant").mkdir()
    existing = DatasetSchema(name="pets", natural_keys=(Column("path", "text"),), encoding=Encoding("png"),
                             label_names=("cat", "dog"))
    assert open_source(tmp_path, existing).label_names == ("cat", "dog", "ant")


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_webdataset_groups_members_by_key(tmp_path):
    with tarfile.open(tmp_path / "shard-000.tar", "w") as tar:
        add_member(tar, "s1.jpg", b"J1")
        add_member(tar, "s1.cls", b"1")
        add_member(tar, "s1.json", json.dumps({"patient_id": "P1", "slide_num": 0, "scanner": "a"}).encode())
        s2 = {"patient_id": "P2", "slide_num": 1, "scanner": "b", "label": 0}
        add_member(tar, "s2.json", json.dumps(s2).encode())
        add_member(tar, "s2.jpeg", b"J2")
        add_member(tar, "s3.cls", b"0")
    source = open_source(tmp_path, SLIDES)
    s1, s2, s3 = list(source.items())
    assert (s1.fields["key"], s1.label, s1.read(), s1.fields["patient_id"]) == ("s1", "1", b"J1", "P1")
    assert (s2.label, s2.read()) == (0, b"J2")
    assert isinstance(s3, Rejection) and s3.kind == "no sample data"


def test_webdataset_damaged_shard_is_reported_not_raised(tmp_path):
    (tmp_path / "bad.tar").write_bytes(b"\x00garbage" * 100)
    items = list(open_source(tmp_path / "bad.tar", BY_PATH).items())
    assert all(isinstance(i, Rejection) for i in items)


def test_unknown_format(tmp_path):
    (tmp_path / "x.zip").write_bytes(b"")
    with pytest.raises(RingfeedError, match="cannot tell the format"):
        open_source(tmp_path / "x.zip", SLIDES)
