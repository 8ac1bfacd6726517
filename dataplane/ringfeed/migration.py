"""`ringfeed dataset migrate`: bring a dataset written by an earlier Ringfeed up to the current layout.

Earlier, ``metadata_by_nat`` was keyed by the natural keys *and the label*, so re-ingesting a relabelled sample added a
second row for the same UUID (counted twice, served twice, possibly split across parts), and datasets had no
identity for their splits to record. The migration, for one dataset:

1. copies ``metadata_by_nat`` into ``metadata_by_nat_migration`` (current layout), one row per sample: where a relabel
   left two rows, the one with the label ``data_by_uuid`` holds (what the loader served), then drops the old table;
2. creates ``metadata_by_nat`` keyed by the natural keys alone, copies the rows back and drops the copy;
3. records a new dataset identity in each split whose UUIDs are samples of the dataset, each in one part only; any
   other split keeps none, so loading it is refused (delete it and create it again);
4. gives the dataset its identity (from then on it is read and written as any other) and recounts its statistics.

The tables say where an interrupted run stopped (old layout, no ``metadata_by_nat``, or the copy still there), so
running the command again finishes the job. Ingests into the dataset are refused until it is done.
"""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np

from ringfeed.errors import RingfeedError, ring_error, ring_failures
from ringfeed.schema import CATALOG_KEYSPACE, METADATA_BY_NAT, MIGRATION_TABLE, DatasetSchema
from ringfeed.splits.storage import adopt_splits
from ringfeed.store import Store
from ringfeed.table import ColumnarTable, TextColumn, scan_table

WRITE_SLICE_ROWS = 20_000  # rows turned into Python tuples at a time, to keep memory flat on large datasets


@dataclasses.dataclass
class MigrationSummary:
    dataset: str
    up_to_date: bool = False
    """Nothing was needed: the dataset already had its identity."""
    old_rows: int = 0
    """Rows of the old-layout ``metadata_by_nat`` (0 when an interrupted run had already copied them)."""
    relabelled: int = 0
    """Samples that had a row per label they were ingested with, now one."""
    samples: int = 0
    splits_kept: list[str] = dataclasses.field(default_factory=list)
    splits_refused: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(split, why): their loading is refused from now on."""


def migrate_dataset(store: Store, name: str) -> MigrationSummary:
    """Migrate dataset ``name`` (see the module documentation); a dataset already current is left as it is."""
    store.ensure_catalog()  # the catalog columns holding identities
    info = store.info(name)
    summary = MigrationSummary(name)
    if info.dataset_id is not None:
        summary.up_to_date = True
        return summary
    schema = info.schema
    # QUORUM both ways: rows copied through one replica are read back through another.
    session = store.address.native_session("QUORUM")
    key = store.partition_key(schema.keyspace, METADATA_BY_NAT)
    if key is not None and key != schema.partition_key(METADATA_BY_NAT):
        summary.old_rows, summary.relabelled = _copy_old_table(store, session, schema, key)
        store.session.execute(f"DROP TABLE {schema.keyspace}.{METADATA_BY_NAT}")
        key = None
    staged = store.partition_key(schema.keyspace, MIGRATION_TABLE) is not None
    if key is None:
        if not staged:
            raise RingfeedError(f"dataset {name!r}: table {schema.keyspace}.{METADATA_BY_NAT} is missing and there is "
                                "no copy of it to restore; drop the dataset (`ringfeed dataset drop`) and create it "
                                "again")
        store.session.execute(schema.metadata_by_nat_ddl(METADATA_BY_NAT))
    if staged:
        staging = _scan(session, schema, MIGRATION_TABLE, schema.partition_key(MIGRATION_TABLE),
                        schema.metadata_row_columns)
        _write(session, schema, METADATA_BY_NAT, staging, np.arange(len(staging)))
        store.session.execute(f"DROP TABLE {schema.keyspace}.{MIGRATION_TABLE}")

    dataset_id = uuid.uuid4()
    samples = _scan(session, schema, METADATA_BY_NAT, schema.partition_key(METADATA_BY_NAT), ["uuid"]).array("uuid")
    kept, refused = adopt_splits(store, name, dataset_id, samples)
    summary.splits_kept = [f"{split.name} v{split.version}" for split in kept]
    summary.splits_refused = [(f"{split.name} v{split.version}", why) for split, why in refused]
    store.session.execute(f"UPDATE {CATALOG_KEYSPACE}.datasets SET dataset_id = %s WHERE name = %s "
                          "IF dataset_id = null", (dataset_id, name))
    summary.samples = store.refresh_stats(name).samples
    return summary


def one_row_per_sample(uuids: np.ndarray, labels: np.ndarray, served: dict[bytes, int]) -> np.ndarray:
    """Indices of the rows to keep: every row of a UUID seen once; of a UUID with several rows (one per label it was
    ingested with), the row whose label is ``served[uuid]``, else its first. Pure."""
    keys = np.ascontiguousarray(uuids).view(np.dtype((np.void, 16))).ravel()
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    repeated = np.flatnonzero(counts[inverse] > 1)
    chosen: dict[bytes, int] = {}
    for index in repeated.tolist():
        sample = uuids[index].tobytes()
        if labels[index] == served.get(sample):
            chosen[sample] = index
        else:
            chosen.setdefault(sample, index)
    return np.sort(np.concatenate([np.flatnonzero(counts[inverse] == 1),
                                   np.fromiter(chosen.values(), dtype=np.int64, count=len(chosen))]))


def _copy_old_table(store: Store, session, schema: DatasetSchema, old_key: list[str]) -> tuple[int, int]:
    """Old ``metadata_by_nat`` → the migration table, one row per sample; returns (old rows, relabelled samples)."""
    table = _scan(session, schema, METADATA_BY_NAT, old_key, schema.metadata_row_columns)
    uuids = table.array("uuid")
    repeated = {u.tobytes() for u, n in zip(*np.unique(uuids, axis=0, return_counts=True), strict=True) if n > 1}
    keep = one_row_per_sample(uuids, table.array("label"), _served_labels(store, schema, repeated))
    store.session.execute(schema.metadata_by_nat_ddl(MIGRATION_TABLE))
    _write(session, schema, MIGRATION_TABLE, table, keep)
    return len(table), len(repeated)


def _served_labels(store: Store, schema: DatasetSchema, samples: set[bytes]) -> dict[bytes, int]:
    """The label ``data_by_uuid`` holds for each of ``samples`` (the last one written, which the loader serves)."""
    from cassandra.concurrent import execute_concurrent_with_args

    statement = store.session.prepare(f"SELECT label FROM {schema.keyspace}.data_by_uuid WHERE uuid = ?")
    ordered = sorted(samples)
    results = execute_concurrent_with_args(store.session, statement, [(uuid.UUID(bytes=s),) for s in ordered],
                                           concurrency=32, raise_on_first_error=True)
    return {sample: row[0] for sample, (_, rows) in zip(ordered, results, strict=True)
            if (row := rows.one()) is not None}


def _scan(session, schema: DatasetSchema, table: str, key: list[str], columns: list[str]) -> ColumnarTable:
    try:
        return scan_table(session, schema.keyspace, table, key, columns)
    except ring_failures() as exc:
        raise ring_error(exc, f"migration of {schema.name!r}, reading {schema.keyspace}.{table} (run it again "
                              "once the ring is healthy)") from None


def _write(session, schema: DatasetSchema, table: str, rows: ColumnarTable, index: np.ndarray) -> None:
    statement = session.prepare(schema.metadata_insert(table))
    writer = session.writer()
    columns = schema.metadata_row_columns
    for start in range(0, len(index), WRITE_SLICE_ROWS):
        writer.submit(statement, _tuples(rows, columns, index[start: start + WRITE_SLICE_ROWS]))
    try:
        writer.flush()
    except ring_failures() as exc:
        raise ring_error(exc, f"migration of {schema.name!r} interrupted (run it again to finish it)") from None


def _tuples(table: ColumnarTable, columns: list[str], index: np.ndarray) -> list[tuple]:
    """Rows ``index`` of ``table`` as tuples of Python values (None for nulls), in ``columns`` order."""
    values = []
    for name in columns:
        column = table[name]
        if isinstance(column, TextColumn):
            items = column.take(index).to_list()
        elif name == "uuid":
            items = [row.tobytes() for row in column[index]]
        else:
            items = column[index].tolist()
        if name in table.nulls:
            items = [None if null else item for item, null in zip(items, table.nulls[name][index].tolist(),
                                                                  strict=True)]
        values.append(items)
    return list(zip(*values, strict=True))
