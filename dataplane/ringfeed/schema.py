"""Dataset schemas and the CQL they become.

A dataset is three tables in its own keyspace, as in Versaci & Busonera (2021):
``metadata_by_nat`` (one row per natural key, so splits can be computed from metadata alone; unlike the paper the
label is not part of the key: a sample's identity is its natural key, and a relabel updates it in place),
``data_by_uuid`` (the sample bytes and label by UUID, the loader's only table) and the optional
``metadata_by_uuid`` (to trace a result back to its sample).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ringfeed.errors import RingfeedError

# CQL types a metadata column may have, and the Python type its values take.
COLUMN_TYPES: dict[str, type] = {"text": str, "int": int, "bigint": int, "double": float, "boolean": bool}
KEY_TYPES = ("text", "int", "bigint")
ENCODINGS = ("jpeg", "png", "tiff", "raw")
RAW_DTYPES = ("uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32", "float64")
# Column names the tables use themselves.
RESERVED_COLUMNS = frozenset({"uuid", "label", "data", "sample_bytes"})
CATALOG_KEYSPACE = "ringfeed"
CATALOG_TABLES = ("datasets", "splits", "split_chunks")  # catalog_ddl's
METADATA_BY_NAT = "metadata_by_nat"
# Where `ringfeed dataset migrate` copies metadata_by_nat while it rebuilds the table in the current layout.
MIGRATION_TABLE = "metadata_by_nat_migration"
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
# CQL's reserved keywords cannot name a keyspace or column unquoted; refusing them keeps every statement plain.
CQL_RESERVED = frozenset("""
add allow alter and apply asc authorize batch begin between by columnfamily create delete desc describe drop entries
execute from full grant if in index infinity insert into is keyspace limit materialized mbean mbeans modify nan
norecursive not null of on or order primary rename replace revoke schema select set table to token truncate
unlogged unset update use using view where with
""".split())
_INT_RANGES = {"int": 2**31, "bigint": 2**63}


def check_identifier(kind: str, name: str) -> str:
    if not _IDENTIFIER.match(name):
        raise RingfeedError(f"invalid {kind} name {name!r}: use lower-case letters, digits and '_', "
                            "starting with a letter, at most 48 characters")
    if name in CQL_RESERVED:
        raise RingfeedError(f"invalid {kind} name {name!r}: it is a reserved CQL keyword")
    return name


def convert_value(name: str, cql_type: str, value: Any) -> Any:
    """Coerce a value read from a manifest (often a string) to a CQL type, or raise ValueError naming the column."""
    if value is None or (isinstance(value, float) and value != value):
        raise ValueError(f"{name} is empty")
    if cql_type == "text":
        return str(value)
    if cql_type in _INT_RANGES:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"{name}={value!r} is not an integer")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not an integer") from None
        bound = _INT_RANGES[cql_type]
        if not -bound <= number < bound:
            raise ValueError(f"{name}={value!r} is out of range for {cql_type}")
        return number
    if cql_type == "double":
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{name}={value!r} is not a number") from None
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(f"{name}={value!r} is not a boolean")
    return bool(value)


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str

    def __post_init__(self):
        check_identifier("column", self.name)
        if self.name in RESERVED_COLUMNS:
            raise RingfeedError(f"column name {self.name!r} is reserved ({', '.join(sorted(RESERVED_COLUMNS))})")
        if self.type not in COLUMN_TYPES:
            raise RingfeedError(f"column {self.name!r}: unknown type {self.type!r} (one of {', '.join(COLUMN_TYPES)})")

    @classmethod
    def parse(cls, spec: str) -> Column:
        """``name:type`` as typed on the command line; the type defaults to text."""
        name, _, type_ = spec.partition(":")
        return cls(name.strip(), (type_ or "text").strip())

    def convert(self, value: Any) -> Any:
        return convert_value(self.name, self.type, value)


@dataclasses.dataclass(frozen=True)
class Encoding:
    """How sample bytes are encoded; raw tensors carry their dtype and shape (C order)."""

    kind: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.kind not in ENCODINGS:
            raise RingfeedError(f"unknown encoding {self.kind!r} (one of {', '.join(ENCODINGS)})")
        if self.kind == "raw":
            if self.dtype not in RAW_DTYPES:
                raise RingfeedError(f"raw encoding needs a dtype, one of {', '.join(RAW_DTYPES)}")
            if not self.shape or any(d <= 0 for d in self.shape):
                raise RingfeedError("raw encoding needs a shape of positive dimensions, e.g. 3,224,224")
        elif self.dtype or self.shape:
            raise RingfeedError(f"dtype and shape apply only to the raw encoding, not {self.kind}")

    @property
    def tensor(self) -> tuple[str, tuple[int, ...]]:
        """dtype and shape of a raw sample (validated); RingfeedError for the other encodings."""
        if self.dtype is None or self.shape is None:
            raise RingfeedError(f"the {self.kind} encoding has no tensor dtype and shape")
        return self.dtype, self.shape

    @property
    def raw_nbytes(self) -> int:
        import numpy as np

        dtype, shape = self.tensor
        return int(np.dtype(dtype).itemsize * np.prod(shape))

    @property
    def compressible(self) -> bool:
        # JPEG/PNG/TIFF payloads are already compressed: LZ4 on them costs server CPU for nothing.
        return self.kind == "raw"


@dataclasses.dataclass(frozen=True)
class DatasetSchema:
    name: str
    natural_keys: tuple[Column, ...]
    encoding: Encoding
    metadata: tuple[Column, ...] = ()
    label_names: tuple[str, ...] = ()
    with_metadata_by_uuid: bool = True
    replication_factor: int = 1
    keyspace: str = ""

    def __post_init__(self):
        check_identifier("dataset", self.name)
        if not self.keyspace:
            object.__setattr__(self, "keyspace", self.name)
        check_identifier("keyspace", self.keyspace)
        if self.keyspace == CATALOG_KEYSPACE:
            raise RingfeedError(f"keyspace {CATALOG_KEYSPACE!r} holds Ringfeed's catalog; choose another name")
        if not self.natural_keys:
            raise RingfeedError("a dataset needs at least one natural-key column (e.g. --key path:text)")
        for column in self.natural_keys:
            if column.type not in KEY_TYPES:
                raise RingfeedError(f"natural key {column.name!r} must be one of {', '.join(KEY_TYPES)}, "
                                    f"not {column.type}")
        names = [c.name for c in self.columns]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise RingfeedError(f"column declared twice: {', '.join(duplicates)}")
        if self.replication_factor < 1:
            raise RingfeedError("replication factor must be at least 1")

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.natural_keys + self.metadata

    def partition_key(self, table: str) -> list[str]:
        """Partition-key columns of one of the dataset's tables (what a token-range scan hashes)."""
        if table in (METADATA_BY_NAT, MIGRATION_TABLE):
            return [c.name for c in self.natural_keys]
        return ["uuid"]

    def label_name(self, label: int) -> str:
        return self.label_names[label] if 0 <= label < len(self.label_names) else str(label)

    # -- CQL -----------------------------------------------------------------------------------------------------

    def ddl(self) -> list[str]:
        """CREATE statements for the keyspace and the dataset's tables (idempotent)."""
        ks = self.keyspace
        columns = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        data_options = "" if self.encoding.compressible else " WITH compression = {'enabled': 'false'}"
        statements = [
            f"CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {self.replication_factor}}}",
            self.metadata_by_nat_ddl(METADATA_BY_NAT),
            f"CREATE TABLE IF NOT EXISTS {ks}.data_by_uuid (uuid uuid PRIMARY KEY, label int, data blob){data_options}",
        ]
        if self.with_metadata_by_uuid:
            statements.append(f"CREATE TABLE IF NOT EXISTS {ks}.metadata_by_uuid (uuid uuid PRIMARY KEY, {columns}, "
                              "label int, sample_bytes int)")
        return statements

    def metadata_by_nat_ddl(self, table: str) -> str:
        """CREATE for ``metadata_by_nat`` (or the migration's copy of it): one row per natural key."""
        columns = ", ".join(f"{c.name} {c.type}" for c in self.columns)
        return (f"CREATE TABLE IF NOT EXISTS {self.keyspace}.{table} ({columns}, label int, uuid uuid, "
                f"sample_bytes int, PRIMARY KEY (({', '.join(self.partition_key(table))})))")

    @property
    def metadata_row_columns(self) -> list[str]:
        """Columns of a metadata row, in bind order: columns..., label, uuid, sample_bytes."""
        return [*(c.name for c in self.columns), "label", "uuid", "sample_bytes"]

    def metadata_insert(self, table: str) -> str:
        """INSERT of a metadata row (``metadata_row_columns``) into ``metadata_by_nat``, ``metadata_by_uuid`` or the
        migration's copy."""
        names = self.metadata_row_columns
        return (f"INSERT INTO {self.keyspace}.{table} ({', '.join(names)}) "
                f"VALUES ({', '.join('?' * len(names))})")

    def insert_statements(self) -> dict[str, str]:
        """INSERTs per table; bind order: columns..., label, uuid, sample_bytes (data: uuid, label, data)."""
        statements = {
            METADATA_BY_NAT: self.metadata_insert(METADATA_BY_NAT),
            "data_by_uuid": f"INSERT INTO {self.keyspace}.data_by_uuid (uuid, label, data) VALUES (?, ?, ?)",
        }
        if self.with_metadata_by_uuid:
            statements["metadata_by_uuid"] = self.metadata_insert("metadata_by_uuid")
        return statements

    # -- persistence (catalog) -------------------------------------------------------------------------------------

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DatasetSchema:
        raw = json.loads(text)
        encoding = raw.pop("encoding")
        return cls(
            natural_keys=tuple(Column(**c) for c in raw.pop("natural_keys")),
            metadata=tuple(Column(**c) for c in raw.pop("metadata")),
            encoding=Encoding(encoding["kind"], encoding["dtype"],
                              tuple(encoding["shape"]) if encoding["shape"] else None),
            label_names=tuple(raw.pop("label_names")),
            **raw,
        )


def catalog_ddl(replication_factor: int) -> list[str]:
    return [
        f"CREATE KEYSPACE IF NOT EXISTS {CATALOG_KEYSPACE} WITH replication = "
        f"{{'class': 'SimpleStrategy', 'replication_factor': {replication_factor}}}",
        # dataset_id: made with the dataset, recorded by its splits; a dataset dropped and created again is another.
        f"CREATE TABLE IF NOT EXISTS {CATALOG_KEYSPACE}.datasets (name text PRIMARY KEY, keyspace_name text, "
        "schema_json text, created_at timestamp, samples bigint, bytes bigint, label_counts map<int, bigint>, "
        "label_bytes map<int, bigint>, stats_updated_at timestamp, last_ingest text, dataset_id uuid)",
        # Splits (ringfeed.splits.storage): a header per version, written after its chunks of packed UUIDs.
        f"CREATE TABLE IF NOT EXISTS {CATALOG_KEYSPACE}.splits (dataset text, name text, version int, "
        "split_id uuid, created_at timestamp, spec_json text, stats_json text, content_hash text, "
        "parts list<text>, part_sizes list<bigint>, chunk_rows int, dataset_id uuid, "
        "PRIMARY KEY ((dataset), name, version)) WITH CLUSTERING ORDER BY (name ASC, version DESC)",
        f"CREATE TABLE IF NOT EXISTS {CATALOG_KEYSPACE}.split_chunks (split_id uuid, part text, chunk int, "
        "uuids blob, PRIMARY KEY ((split_id, part, chunk)))",
        # A catalog made before dataset identities existed.
        *(f"ALTER TABLE {CATALOG_KEYSPACE}.{table} ADD IF NOT EXISTS dataset_id uuid"
          for table in ("datasets", "splits")),
    ]
