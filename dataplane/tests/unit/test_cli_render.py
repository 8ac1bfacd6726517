"""How the CLI formats things, without a server: tables for people, JSON for scripts, filter and key checks."""

from __future__ import annotations

import datetime as dt
import io
import uuid

import pytest
from rich.console import Console
from rich.table import Table

from ringfeed.cli.datasets import parse_key_values
from ringfeed.cli.demo import describe_tables
from ringfeed.cli.render import dataset_json, print_table, split_json
from ringfeed.cli.splits import check_text_filters, class_table
from ringfeed.errors import RingfeedError
from ringfeed.schema import Column, DatasetSchema, Encoding
from ringfeed.splits import Filter, SplitError, SplitSpec
from ringfeed.splits.storage import StoredSplit
from ringfeed.store import DatasetInfo

SCHEMA = DatasetSchema("slides", (Column("patient_id", "text"), Column("slide_num", "int")), Encoding("jpeg"),
                       metadata=(Column("scanner", "text"), Column("score", "double")),
                       label_names=("normal", "tumor"))


def test_a_table_that_is_not_shown_on_a_terminal_keeps_its_natural_width():
    table = Table("dataset", "keyspace")
    table.add_row("a_dataset_name_longer_than_the_console", "its_keyspace_also_long")
    out = io.StringIO()
    print_table(table, Console(file=out, width=30))
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│")]
    assert len(rows) == 1 and "…" not in rows[0]
    assert "a_dataset_name_longer_than_the_console" in rows[0] and "its_keyspace_also_long" in rows[0]


def test_dataset_json_keys_are_stable():
    info = DatasetInfo(SCHEMA, dt.datetime(2026, 1, 2, tzinfo=dt.UTC), 3, 300, {0: 2, 1: 1}, {0: 200, 1: 100},
                       None, None, uuid.UUID(int=7))
    document = dataset_json(info)
    assert list(document) == ["name", "keyspace", "dataset_id", "encoding", "replication_factor", "natural_keys",
                              "metadata", "samples", "bytes", "labels", "created_at", "stats_updated_at",
                              "last_ingest"]
    assert document["labels"] == [{"label": 0, "name": "normal", "samples": 2, "bytes": 200},
                                  {"label": 1, "name": "tumor", "samples": 1, "bytes": 100}]
    assert document["created_at"] == "2026-01-02T00:00:00+00:00" and document["stats_updated_at"] is None
    assert document["dataset_id"] == str(uuid.UUID(int=7))


STATS = {"parts": [
    {"name": "train", "labels": {"0": {"samples": 7, "target": 7, "available": 9},
                                 "1": {"samples": 3, "target": 4, "available": 3}}},
    {"name": "val", "labels": {"0": {"samples": 2, "target": 2, "available": 2},
                               "1": {"samples": 1, "target": 1, "available": 5}}}],
    "label_names": {"0": "normal", "1": "tumor"}}


def test_split_json_adds_spec_and_stats_only_in_detail():
    stored = StoredSplit("slides", "s", 2, uuid.UUID(int=1), None, SplitSpec(ratios=(1, 1)), STATS, "sha256:ab",
                         {"train": 10, "val": 3}, dataset_id=uuid.UUID(int=2))
    listed = split_json(stored, detail=False)
    assert list(listed) == ["dataset", "name", "version", "split_id", "dataset_id", "content_hash", "parts",
                            "samples", "created_at"]
    assert listed["samples"] == 13 and listed["created_at"] is None
    assert split_json(stored, detail=True) == listed | {"spec": stored.spec.to_dict(), "stats": STATS}


def test_class_table_has_a_row_per_class_and_a_cell_per_part():
    out = io.StringIO()
    Console(file=out, width=200).print(class_table(STATS))
    rows = [line for line in out.getvalue().splitlines() if line.startswith("│")]
    assert "0 normal" in rows[0] and "7/7 (9)" in rows[0] and "2/2 (2)" in rows[0]
    assert "1 tumor" in rows[1] and "3/4 (3)" in rows[1] and "1/1 (5)" in rows[1]


@pytest.mark.parametrize("where, message", [
    ("patient_id == 7", "filter patient_id == 7: patient_id is text, 7 is not (quote it: patient_id == '7')"),
    ("scanner != true", "filter scanner != True: scanner is text, True is not (quote it: scanner != 'true')"),
    ("patient_id in ('a', 2.5)", "filter patient_id in ('a', 2.5): patient_id is text, 2.5 is not"),
])
def test_a_number_or_boolean_against_a_text_column_is_refused_like_other_types(where, message):
    with pytest.raises(SplitError) as error:
        check_text_filters((Filter.parse(where),), SCHEMA)
    assert str(error.value).startswith(message)


def test_text_values_and_other_columns_pass_the_text_check():
    check_text_filters((Filter.parse("patient_id == '007'"), Filter.parse("scanner in (aperio, leica)"),
                        Filter.parse("slide_num < 3"), Filter.parse("score > 0.5")), SCHEMA)


def test_key_values_are_column_equals_value():
    assert parse_key_values(("patient_id=P001", "slide_num=3", "note=a=b")) == {"patient_id": "P001",
                                                                              "slide_num": "3", "note": "a=b"}
    with pytest.raises(RingfeedError, match="write COLUMN=VALUE"):
        parse_key_values(("patient_id",))
    with pytest.raises(RingfeedError, match="given twice"):
        parse_key_values(("x=1", "x=2"))


def test_the_demo_names_the_natural_keys_alone_as_partition_key():
    assert describe_tables(SCHEMA) == ("tables: metadata_by_nat (partition: patient_id, slide_num), data_by_uuid, "
                                       "metadata_by_uuid")
