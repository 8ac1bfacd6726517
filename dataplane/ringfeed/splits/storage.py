"""Splits in Cassandra: immutable versions, UUIDs packed 16 bytes each in 256 KiB chunks, the header row last.

``ringfeed.splits`` holds one header per (dataset, name, version): parameters, statistics, content hash, part
sizes, the ``split_id`` its chunks are filed under in ``ringfeed.split_chunks`` and the ``dataset_id`` of the dataset
it was made from: a split is loaded, and a split file imported, only into that same dataset. Chunks are written
first and the header last with a lightweight transaction, so a reader never sees a partial split, and two writers
racing for the same version cannot both win. A writer that dies before its header leaves only unreachable chunks.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
import uuid
from pathlib import Path

import numpy as np

from ringfeed.errors import PartNotFound, RingfeedError, SplitNotFound
from ringfeed.schema import CATALOG_KEYSPACE, METADATA_BY_NAT
from ringfeed.splits.engine import SplitResult, content_hash
from ringfeed.splits.spec import SplitSpec

CHUNK_ROWS = 16_384
FILE_FORMATS = (".parquet", ".npz")
_FILE_METADATA_KEY = b"ringfeed.split"
_SPLIT_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class SplitDatasetMismatch(RingfeedError):
    """A split (stored or in a file) that was not made from the dataset it is used with."""


@dataclasses.dataclass(frozen=True)
class StoredSplit:
    """One version of a split; ``parts`` is filled by ``load_split`` (UUIDs as (n, 16) uint8, sorted)."""

    dataset: str
    name: str
    version: int
    split_id: uuid.UUID
    created_at: dt.datetime | None
    spec: SplitSpec
    stats: dict
    content_hash: str
    part_sizes: dict[str, int]
    chunk_rows: int = CHUNK_ROWS
    dataset_id: uuid.UUID | None = None
    """The identity of the dataset it was made from (None: made before datasets had one)."""
    parts: dict[str, np.ndarray] | None = None

    @property
    def samples(self) -> int:
        return sum(self.part_sizes.values())

    @property
    def loaded_parts(self) -> dict[str, np.ndarray]:
        """``parts``, or RingfeedError for a split that was listed, not loaded."""
        if self.parts is None:
            raise RingfeedError(f"split {self.name!r} was listed, not loaded")
        return self.parts

    def uuids(self, part: str) -> np.ndarray:
        parts = self.loaded_parts
        if part not in parts:
            raise PartNotFound(f"split {self.name!r} has no part {part!r} (parts: {', '.join(parts)})")
        return parts[part]


def save_split(store, dataset: str, name: str, spec: SplitSpec, result: SplitResult) -> tuple[StoredSplit, bool]:
    """Store ``result`` as the next version of ``dataset/name``; returns (split, created). When the latest version
    has the same parameters and content, it is returned instead (created False), so re-running is harmless."""
    dataset_id = store.dataset_id(dataset)
    _check_name(name)
    if not store.catalog_has("splits", "dataset_id"):  # a catalog made before splits, or identities, existed
        store.ensure_catalog()
    existing = list_splits(store, dataset, name)
    latest = existing[0] if existing else None
    if (latest and latest.content_hash == result.content_hash and latest.spec == spec
            and latest.dataset_id == dataset_id):
        return latest, False
    version = latest.version + 1 if latest else 1
    split_id = uuid.uuid4()
    _write_chunks(store, split_id, result.parts)
    header = store.session.execute(
        f"INSERT INTO {CATALOG_KEYSPACE}.splits (dataset, name, version, split_id, created_at, spec_json, stats_json, "
        "content_hash, parts, part_sizes, chunk_rows, dataset_id) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) IF NOT EXISTS",
        (dataset, name, version, split_id, dt.datetime.now(dt.UTC), spec.to_json(),
         json.dumps(result.stats, sort_keys=True), result.content_hash, list(result.parts),
         [len(u) for u in result.parts.values()], CHUNK_ROWS, dataset_id),
    ).one()
    if not header[0]:
        _delete_chunks(store, split_id, {part: len(u) for part, u in result.parts.items()}, CHUNK_ROWS)
        raise RingfeedError(f"split {dataset}/{name} version {version} was created meanwhile by another client; "
                            "run again")
    return get_split(store, dataset, name, version), True


def list_splits(store, dataset: str | None = None, name: str | None = None) -> list[StoredSplit]:
    """Headers (no UUIDs), newest version first per name."""
    if not store.catalog_has("splits"):
        return []
    # A catalog made before dataset identities reads as splits that recorded none.
    columns = _HEADER_COLUMNS + (", dataset_id" if store.catalog_has("splits", "dataset_id") else "")
    query = f"SELECT {columns} FROM {CATALOG_KEYSPACE}.splits"
    if dataset is None:
        rows = store.session.execute(query)
    elif name is None:
        rows = store.session.execute(query + " WHERE dataset = %s", (dataset,))
    else:
        rows = store.session.execute(query + " WHERE dataset = %s AND name = %s", (dataset, name))
    return sorted((_header(row) for row in rows), key=lambda s: (s.dataset, s.name, -s.version))


def get_split(store, dataset: str, name: str, version: int | None = None) -> StoredSplit:
    """The header of one version (default: the latest)."""
    versions = list_splits(store, dataset, name)
    if not versions:
        known = sorted({s.name for s in list_splits(store, dataset)})
        raise SplitNotFound(f"dataset {dataset!r} has no split {name!r}"
                            + (f" (splits: {', '.join(known)})" if known else " (no splits yet)"))
    if version is None:
        return versions[0]
    for split in versions:
        if split.version == version:
            return split
    raise SplitNotFound(f"split {dataset}/{name} has no version {version} "
                        f"(versions: {', '.join(str(s.version) for s in versions)})")


def load_split(store, dataset: str, name: str, version: int | None = None, verify: bool = True) -> StoredSplit:
    """A split with its UUIDs; ``verify`` recomputes the content hash. SplitDatasetMismatch when it was made from
    another dataset of that name (dropped since)."""
    header = get_split(store, dataset, name, version)
    dataset_id = store.dataset_id(dataset)
    if header.dataset_id != dataset_id:
        raise SplitDatasetMismatch(
            f"split {dataset}/{name} v{header.version} was made from an earlier dataset named {dataset!r} (identity "
            f"{header.dataset_id or 'not recorded'}, this one is {dataset_id}): delete it (`ringfeed split delete "
            f"{dataset} {name}`) and create it again")
    return _with_parts(store, header, verify)


def _with_parts(store, header: StoredSplit, verify: bool) -> StoredSplit:
    dataset, name = header.dataset, header.name
    keys = _chunk_keys(header.split_id, header.part_sizes, header.chunk_rows)
    blobs = _execute_all(store, f"SELECT uuids FROM {CATALOG_KEYSPACE}.split_chunks "
                                "WHERE split_id = ? AND part = ? AND chunk = ?", keys)
    pieces: dict[str, list[bytes]] = {part: [] for part in header.part_sizes}
    for (_, part, chunk), rows in zip(keys, blobs, strict=True):
        row = rows.one()
        if row is None:
            raise RingfeedError(f"split {dataset}/{name} v{header.version}: chunk {chunk} of part {part} is missing")
        pieces[part].append(row[0])
    parts = {}
    for part, size in header.part_sizes.items():
        data = np.frombuffer(b"".join(pieces[part]), dtype=np.uint8).reshape(-1, 16)
        if len(data) != size:
            raise RingfeedError(f"split {dataset}/{name} v{header.version}: part {part} has {len(data):,} UUIDs, "
                                f"its header says {size:,}")
        parts[part] = data
    if verify and content_hash(parts) != header.content_hash:
        raise RingfeedError(f"split {dataset}/{name} v{header.version}: content does not match its hash")
    return dataclasses.replace(header, parts=parts)


def delete_split(store, dataset: str, name: str, version: int | None = None) -> list[int]:
    """Delete one version, or every version when ``version`` is None; returns the versions deleted."""
    doomed = [get_split(store, dataset, name, version)] if version is not None else list_splits(store, dataset, name)
    if not doomed:
        get_split(store, dataset, name)  # raises SplitNotFound with the known names
    for split in doomed:
        # The header goes first: from then on no reader can reach the chunks.
        store.session.execute(f"DELETE FROM {CATALOG_KEYSPACE}.splits WHERE dataset = %s AND name = %s "
                              "AND version = %s", (dataset, name, split.version))
        _delete_chunks(store, split.split_id, split.part_sizes, split.chunk_rows)
    return [s.version for s in doomed]


def adopt_splits(store, dataset: str, dataset_id: uuid.UUID, samples: np.ndarray
                 ) -> tuple[list[StoredSplit], list[tuple[StoredSplit, str]]]:
    """Record ``dataset_id`` in each split of ``dataset`` that recorded no identity and whose UUIDs are all among
    ``samples``, each once (`ringfeed dataset migrate`); returns (adopted, [(refused, why)])."""
    adopted, refused = [], []
    for header in list_splits(store, dataset):
        if header.dataset_id is not None:
            continue
        try:
            problem = membership_problem(_with_parts(store, header, verify=True).loaded_parts, samples)
        except RingfeedError as exc:
            problem = str(exc)
        if problem:
            refused.append((header, problem))
            continue
        store.session.execute(f"UPDATE {CATALOG_KEYSPACE}.splits SET dataset_id = %s WHERE dataset = %s AND name = %s "
                              "AND version = %s", (dataset_id, dataset, header.name, header.version))
        adopted.append(header)
    return adopted, refused


# -- files ----------------------------------------------------------------------------------------------------------

def export_split(split: StoredSplit, path: Path) -> Path:
    """Write a loaded split to ``.parquet`` (columns part, uuid) or ``.npz`` (one array per part), with its
    parameters, statistics and hash as metadata."""
    path = Path(path)
    meta = json.dumps({"dataset": split.dataset, "dataset_id": str(split.dataset_id), "name": split.name,
                       "version": split.version,
                       "spec": split.spec.to_dict(), "stats": split.stats, "content_hash": split.content_hash,
                       "parts": list(split.loaded_parts)}, sort_keys=True).encode()
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = list(split.loaded_parts)
        part_index = np.concatenate([np.full(len(u), i, dtype=np.int32)
                                     for i, u in enumerate(split.loaded_parts.values())])
        flat = np.concatenate(list(split.loaded_parts.values())).ravel()
        table = pa.table({
            "part": pa.DictionaryArray.from_arrays(pa.array(part_index), pa.array(names)),
            "uuid": pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), len(part_index),
                                                         [None, pa.py_buffer(flat.tobytes())]),
        }).replace_schema_metadata({_FILE_METADATA_KEY: meta})
        pq.write_table(table, path)
    elif path.suffix == ".npz":
        arrays = {f"part/{name}": uuids for name, uuids in split.loaded_parts.items()}
        # numpy's stub types every **array against savez's own allow_pickle: bool keyword.
        np.savez(path, meta=np.frombuffer(meta, dtype=np.uint8), **arrays)  # type: ignore[arg-type]
    else:
        raise RingfeedError(f"export to {path.name}: use a {' or '.join(FILE_FORMATS)} file")
    return path


def read_split_file(path: Path) -> tuple[dict, SplitResult]:
    """(metadata, result) from an exported file; the content must match the hash recorded in it."""
    path = Path(path)
    if not path.is_file():
        raise RingfeedError(f"no such file: {path}")
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            meta = json.loads(table.schema.metadata[_FILE_METADATA_KEY])
            part_index = table.column("part").combine_chunks().indices.to_numpy()
            names = table.column("part").combine_chunks().dictionary.to_pylist()
            flat = np.frombuffer(table.column("uuid").combine_chunks().buffers()[1], dtype=np.uint8)
            flat = flat[: 16 * table.num_rows].reshape(-1, 16)
            parts = {name: flat[part_index == names.index(name)] for name in meta["parts"]}
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                meta = json.loads(archive["meta"].tobytes())
                parts = {name: archive[f"part/{name}"] for name in meta["parts"]}
        else:
            raise RingfeedError(f"import from {path.name}: use a {' or '.join(FILE_FORMATS)} file")
    except (KeyError, ValueError, OSError) as exc:
        raise RingfeedError(f"{path} is not a Ringfeed split file: {exc}") from None
    result = SplitResult(parts, meta["stats"], content_hash(parts))
    if result.content_hash != meta["content_hash"]:
        raise RingfeedError(f"{path}: the UUIDs do not match the hash recorded in the file (edited or damaged)")
    return meta, result


def import_split(store, dataset: str, path: Path, name: str | None = None) -> tuple[StoredSplit, bool]:
    """Store the split in an exported file as the next version of ``name`` (default: its recorded name) of
    ``dataset``, which must be the dataset it was made from (SplitDatasetMismatch otherwise); returns (split, created).

    A file exported before datasets had an identity is checked by content instead: each of its UUIDs must be a
    sample of ``dataset``, in one part only."""
    meta, result = read_split_file(path)
    dataset_id = store.dataset_id(dataset)
    recorded = meta.get("dataset_id")
    if recorded is None:
        problem = membership_problem(result.parts, store.scan(dataset, METADATA_BY_NAT, ["uuid"])["uuid"])
        if problem:
            raise SplitDatasetMismatch(f"{path} records no dataset identity (an older export) and {problem}: "
                                       f"it was not made from dataset {dataset!r}; create the split again there")
    elif recorded != str(dataset_id):
        raise SplitDatasetMismatch(f"{path} was made from dataset {meta['dataset']!r} (identity {recorded}), not from "
                                   f"dataset {dataset!r} (identity {dataset_id}): import it into the dataset it was "
                                   f"made from, or create the split again on {dataset!r}")
    return save_split(store, dataset, name or meta["name"], SplitSpec.from_dict(meta["spec"]), result)


def membership_problem(parts: dict[str, np.ndarray], samples: np.ndarray) -> str | None:
    """Why ``parts`` cannot be a split of a dataset whose sample UUIDs are ``samples`` (both (n, 16) uint8), or None:
    UUIDs that are no sample of it, or that appear more than once."""
    listed = _as_keys(np.concatenate([np.asarray(u, dtype=np.uint8).reshape(-1, 16) for u in parts.values()]))
    distinct = np.unique(listed)
    foreign = np.count_nonzero(~np.isin(distinct, _as_keys(samples)))
    repeated = len(listed) - len(distinct)
    problems = ([f"{foreign:,} of its UUIDs are no sample of the dataset"] if foreign else []) + \
               ([f"{repeated:,} of its UUIDs appear twice"] if repeated else [])
    return " and ".join(problems) or None


def _as_keys(uuids: np.ndarray) -> np.ndarray:
    """(n, 16) uint8 as n comparable, sortable scalars."""
    return np.ascontiguousarray(uuids).view(np.dtype((np.void, 16))).ravel()


# -- internals ------------------------------------------------------------------------------------------------------

_HEADER_COLUMNS = ("dataset, name, version, split_id, created_at, spec_json, stats_json, content_hash, parts, "
                   "part_sizes, chunk_rows")


def _header(row) -> StoredSplit:
    return StoredSplit(dataset=row[0], name=row[1], version=row[2], split_id=row[3], created_at=row[4],
                       spec=SplitSpec.from_json(row[5]), stats=json.loads(row[6]), content_hash=row[7],
                       part_sizes=dict(zip(row[8] or [], row[9] or [], strict=True)), chunk_rows=row[10],
                       dataset_id=row[11] if len(row) > 11 else None)


def _check_name(name: str) -> None:
    if not _SPLIT_NAME.match(name):
        raise RingfeedError(f"invalid split name {name!r}: lower-case letters, digits, '-', '_' and '.', starting "
                            "and ending with a letter or digit, at most 63 characters (a Kubernetes name fits)")


def _write_chunks(store, split_id: uuid.UUID, parts: dict[str, np.ndarray]) -> None:
    rows = [(split_id, part, index, uuids[start: start + CHUNK_ROWS].tobytes())
            for part, uuids in parts.items()
            for index, start in enumerate(range(0, len(uuids), CHUNK_ROWS))]
    _execute_all(store, f"INSERT INTO {CATALOG_KEYSPACE}.split_chunks (split_id, part, chunk, uuids) "
                        "VALUES (?, ?, ?, ?)", rows)


def _delete_chunks(store, split_id: uuid.UUID, part_sizes: dict[str, int], chunk_rows: int) -> None:
    _execute_all(store, f"DELETE FROM {CATALOG_KEYSPACE}.split_chunks WHERE split_id = ? AND part = ? AND chunk = ?",
                 _chunk_keys(split_id, part_sizes, chunk_rows))


def _chunk_keys(split_id: uuid.UUID, part_sizes: dict[str, int], chunk_rows: int) -> list[tuple]:
    """(split_id, part, chunk) of every chunk of a split, parts in order."""
    return [(split_id, part, chunk) for part, size in part_sizes.items()
            for chunk in range(math.ceil(size / chunk_rows))]


def _execute_all(store, cql: str, parameters: list[tuple]) -> list:
    """Run a prepared statement for every parameter tuple, 8 at a time; raise on the first failure."""
    from cassandra.concurrent import execute_concurrent_with_args

    statement = store.session.prepare(cql)
    results = execute_concurrent_with_args(store.session, statement, parameters, concurrency=8,
                                           raise_on_first_error=True)
    return [result for _, result in results]
