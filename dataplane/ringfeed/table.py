"""Columnar tables: whole columns of a Cassandra table as numpy arrays, a few bytes per row.

``scan_table`` reads them with the native token-range scan (``ringfeed._native.Session.scan``); the splits engine
and the dataset statistics work on the result without a Python object per row.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

import numpy as np


@dataclasses.dataclass(frozen=True)
class TextColumn:
    """Dictionary-encoded text: ``codes`` (int32, -1 for null) index into ``values``."""

    codes: np.ndarray
    values: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, index: np.ndarray) -> TextColumn:
        return TextColumn(self.codes[index], self.values)

    def to_list(self) -> list[str | None]:
        lookup = np.array(self.values + (None,), dtype=object)
        return lookup[self.codes].tolist()

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> TextColumn:
        values, codes = np.unique(np.asarray(list(strings), dtype=object).astype(str), return_inverse=True)
        return cls(codes.astype(np.int32), tuple(values.tolist()))


Column = np.ndarray | TextColumn
# The native scan's little-endian buffers by kind (uuid and text are decoded apart).
SCALAR_DTYPES = {"int64": np.dtype("<i8"), "float64": np.dtype("<f8"), "bool": np.dtype(np.bool_)}


@dataclasses.dataclass(frozen=True)
class ColumnarTable:
    """Equal-length columns by name. ``uuid`` columns are (n, 16) uint8 (big-endian, as stored); integers are int64,
    floats float64, booleans bool. ``nulls`` holds a mask for each column that has any null."""

    columns: dict[str, Column]
    nulls: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        lengths = {name: len(column) for name, column in self.columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns differ in length: {lengths}")

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def array(self, name: str) -> np.ndarray:
        """A column that is not text (uuid, numbers, booleans): its numpy array."""
        column = self.columns[name]
        if isinstance(column, TextColumn):
            raise TypeError(f"column {name!r} is text (a TextColumn), not an array")
        return column

    def __contains__(self, name: str) -> bool:
        return name in self.columns


def scan_table(session, keyspace: str, table: str, partition_key: list[str], columns: list[str],
               progress: Callable[[int], None] | None = None, slices: int = 256,
               concurrency: int = 16) -> ColumnarTable:
    """Every row of ``keyspace.table`` (the given columns), in token order; ``progress(rows_so_far)`` is called
    about ten times a second."""
    raw = session.scan(keyspace, table, partition_key, columns, slices=slices, concurrency=concurrency,
                       progress=progress)
    decoded: dict[str, Column] = {}
    nulls: dict[str, np.ndarray] = {}
    for name, (kind, data, null_bytes, dictionary) in raw.items():
        decoded[name] = _decode(kind, data, dictionary)
        if null_bytes is not None:
            nulls[name] = np.frombuffer(null_bytes, dtype=np.bool_)
    return ColumnarTable(decoded, nulls)


def _decode(kind: str, data: bytes, dictionary: list[str] | None) -> Column:
    if kind == "uuid":
        return np.frombuffer(data, dtype=np.uint8).reshape(-1, 16)
    if kind == "text":
        return TextColumn(np.frombuffer(data, dtype="<i4"), tuple(dictionary or ()))
    return np.frombuffer(data, dtype=SCALAR_DTYPES[kind])
