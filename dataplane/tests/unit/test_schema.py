"""Schema → DDL, and rejection of bad schemas with messages that name the problem."""

import pytest

from ringfeed.errors import RingfeedError
from ringfeed.schema import Column, DatasetSchema, Encoding, catalog_ddl


def slides_schema(**overrides):
    fields = dict(
        name="slides",
        natural_keys=(Column("patient_id", "text"), Column("slide_num", "int"), Column("x", "int"), Column("y", "int")),
        metadata=(Column("scanner", "text"),),
        encoding=Encoding("jpeg"),
        replication_factor=2,
    )
    fields.update(overrides)
    return DatasetSchema(**fields)


def test_metadata_by_nat_is_keyed_by_the_natural_keys_alone():
    # The label is no part of a sample's identity: a relabelled sample is the same row, updated in place.
    ddl = slides_schema().ddl()
    assert ddl[0] == ("CREATE KEYSPACE IF NOT EXISTS slides WITH replication = "
                      "{'class': 'SimpleStrategy', 'replication_factor': 2}")
    assert ddl[1] == ("CREATE TABLE IF NOT EXISTS slides.metadata_by_nat "
                      "(patient_id text, slide_num int, x int, y int, "
                      "scanner text, label int, uuid uuid, sample_bytes int, "
                      "PRIMARY KEY ((patient_id, slide_num, x, y)))")


def test_data_by_uuid_skips_compression_for_images_only():
    assert slides_schema().ddl()[2] == ("CREATE TABLE IF NOT EXISTS slides.data_by_uuid (uuid uuid PRIMARY KEY, "
                                        "label int, data blob) WITH compression = {'enabled': 'false'}")
    raw = slides_schema(encoding=Encoding("raw", "float32", (3, 8, 8)))
    assert raw.ddl()[2] == ("CREATE TABLE IF NOT EXISTS slides.data_by_uuid "
                            "(uuid uuid PRIMARY KEY, label int, data blob)")


def test_metadata_by_uuid_is_optional():
    assert len(slides_schema().ddl()) == 4
    assert "metadata_by_uuid" in slides_schema().ddl()[3]
    without = slides_schema(with_metadata_by_uuid=False)
    assert len(without.ddl()) == 3
    assert set(without.insert_statements()) == {"metadata_by_nat", "data_by_uuid"}


def test_insert_statement_bind_order():
    statements = slides_schema().insert_statements()
    assert statements["metadata_by_nat"] == (
        "INSERT INTO slides.metadata_by_nat (patient_id, slide_num, x, y, scanner, label, uuid, sample_bytes) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
    assert statements["data_by_uuid"] == "INSERT INTO slides.data_by_uuid (uuid, label, data) VALUES (?, ?, ?)"


def test_keyspace_defaults_to_name_and_can_differ():
    assert slides_schema().keyspace == "slides"
    assert slides_schema(keyspace="pathology").ddl()[1].startswith("CREATE TABLE IF NOT EXISTS pathology.")


def test_json_round_trip():
    for schema in (slides_schema(label_names=("normal", "tumor")),
                   slides_schema(encoding=Encoding("raw", "uint16", (1, 64, 64)), with_metadata_by_uuid=False)):
        assert DatasetSchema.from_json(schema.to_json()) == schema


def test_catalog_ddl():
    assert catalog_ddl(3)[0].endswith("{'class': 'SimpleStrategy', 'replication_factor': 3}")
    assert "ringfeed.datasets" in catalog_ddl(1)[1]


def test_catalog_records_dataset_identities_and_upgrades_an_older_catalog():
    ddl = catalog_ddl(1)
    assert "dataset_id uuid)" in ddl[1]
    assert "dataset_id uuid," in ddl[2]
    assert ddl[-2:] == ["ALTER TABLE ringfeed.datasets ADD IF NOT EXISTS dataset_id uuid",
                        "ALTER TABLE ringfeed.splits ADD IF NOT EXISTS dataset_id uuid"]


@pytest.mark.parametrize("build, message", [
    (lambda: slides_schema(name="Bad-Name"), "invalid dataset name 'Bad-Name'"),
    (lambda: slides_schema(natural_keys=()), "at least one natural-key column"),
    (lambda: slides_schema(natural_keys=(Column("score", "double"),)), "natural key 'score' must be one of"),
    (lambda: Column("label", "int"), "column name 'label' is reserved"),
    (lambda: Column("uuid", "text"), "column name 'uuid' is reserved"),
    (lambda: Column("x", "varchar"), "column 'x': unknown type 'varchar'"),
    (lambda: slides_schema(metadata=(Column("x", "int"),)), "column declared twice: x"),
    (lambda: Encoding("webp"), "unknown encoding 'webp'"),
    (lambda: Encoding("raw", "float32"), "raw encoding needs a shape"),
    (lambda: Encoding("raw", None, (3,)), "raw encoding needs a dtype"),
    (lambda: Encoding("jpeg", "uint8", (3,)), "dtype and shape apply only to the raw encoding"),
    (lambda: slides_schema(keyspace="ringfeed"), "holds Ringfeed's catalog"),
    (lambda: slides_schema(replication_factor=0), "replication factor must be at least 1"),
])
def test_bad_schemas_are_rejected_with_a_clear_message(build, message):
    with pytest.raises(RingfeedError, match=message.replace("(", r"\(")):
        build()


@pytest.mark.parametrize("column, raw, expected", [
    (Column("a", "int"), "42", 42),
    (Column("a", "bigint"), 2**40, 2**40),
    (Column("a", "int"), 7.0, 7),
    (Column("a", "double"), "0.5", 0.5),
    (Column("a", "text"), 12, "12"),
    (Column("a", "boolean"), "yes", True),
    (Column("a", "boolean"), "false", False),
])
def test_values_are_coerced_to_column_types(column, raw, expected):
    assert column.convert(raw) == expected


@pytest.mark.parametrize("column, raw, message", [
    (Column("a", "int"), "x1", "a='x1' is not an integer"),
    (Column("a", "int"), 2**31, "out of range for int"),
    (Column("a", "int"), 1.5, "is not an integer"),
    (Column("a", "int"), None, "a is empty"),
    (Column("a", "double"), "abc", "is not a number"),
    (Column("a", "boolean"), "maybe", "is not a boolean"),
])
def test_bad_values_raise_value_error(column, raw, message):
    with pytest.raises(ValueError, match=message):
        column.convert(raw)


def test_column_parse_defaults_to_text():
    assert Column.parse("patient") == Column("patient", "text")
    assert Column.parse("slide:int") == Column("slide", "int")


def test_reserved_cql_keywords_are_refused():
    with pytest.raises(RingfeedError, match="invalid column name 'order': it is a reserved CQL keyword"):
        Column("order", "int")
    with pytest.raises(RingfeedError, match="invalid dataset name 'select'"):
        slides_schema(name="select")


def test_partition_keys_per_table():
    schema = slides_schema()
    assert schema.partition_key("metadata_by_nat") == ["patient_id", "slide_num", "x", "y"]
    assert schema.partition_key("metadata_by_nat_migration") == ["patient_id", "slide_num", "x", "y"]
    assert schema.partition_key("data_by_uuid") == ["uuid"]
    assert schema.partition_key("metadata_by_uuid") == ["uuid"]
