"""Where samples come from: an ImageFolder tree, a CSV/Parquet manifest, or WebDataset tar shards.

A source yields ``SourceSample`` (field values, a label, and the bytes or a way to read them) and ``Rejection``
for inputs that cannot even be described; the ingest maps fields onto the dataset schema, so sources stay
schema-agnostic. Each source checks up front that it can provide every column the schema needs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ringfeed.errors import RingfeedError, SchemaMismatch
from ringfeed.schema import DatasetSchema

FORMATS = ("auto", "imagefolder", "manifest", "webdataset")
# File extensions per encoding (ImageFolder files, WebDataset member suffixes).
EXTENSIONS = {
    "jpeg": (".jpg", ".jpeg"),
    "png": (".png",),
    "tiff": (".tif", ".tiff"),
    "raw": (".npy", ".bin", ".raw"),
}


@dataclasses.dataclass
class SourceSample:
    origin: str  # where it came from, for messages
    fields: dict[str, Any]
    label: Any
    data: bytes | Callable[[], bytes]

    def read(self) -> bytes:
        return self.data() if callable(self.data) else self.data


@dataclasses.dataclass
class Rejection:
    origin: str
    kind: str
    detail: str


class Source:
    """Common interface: ``label_names`` (classes discovered by the source), ``total`` (None if unknown), ``items``."""

    label_names: tuple[str, ...] = ()
    total: int | None = None

    def items(self) -> Iterator[SourceSample | Rejection]:
        raise NotImplementedError


def open_source(path: str | Path, schema: DatasetSchema, fmt: str = "auto", path_column: str = "path",
                label_column: str = "label") -> Source:
    path = Path(path)
    if not path.exists():
        raise RingfeedError(f"source {str(path)!r} does not exist")
    if fmt == "auto":
        fmt = _detect_format(path)
    if fmt == "imagefolder":
        return ImageFolderSource(path, schema)
    if fmt == "manifest":
        return ManifestSource(path, schema, path_column, label_column)
    if fmt == "webdataset":
        return WebDatasetSource(path, schema, label_column)
    raise RingfeedError(f"unknown source format {fmt!r} (one of {', '.join(FORMATS)})")


def _detect_format(path: Path) -> str:
    if path.is_file():
        if path.suffix in (".csv", ".parquet"):
            return "manifest"
        if path.suffix == ".tar":
            return "webdataset"
        raise RingfeedError(f"cannot tell the format of {str(path)!r}: expected .csv, .parquet, .tar or a directory")
    if any(path.glob("*.tar")):
        return "webdataset"
    return "imagefolder"


def _require_fields(schema: DatasetSchema, available: set[str], what: str) -> None:
    missing = [c.name for c in schema.columns if c.name not in available]
    if missing:
        raise SchemaMismatch(f"{what} does not match dataset {schema.name!r}: missing column(s) "
                            f"{', '.join(missing)} (it has: {', '.join(sorted(available)) or 'none'})")


def _file_reader(path: Path) -> Callable[[], bytes]:
    return lambda: path.read_bytes()


class ImageFolderSource(Source):
    """``root/<class>/**/<file>``: one folder per class; fields ``path`` (relative) and ``class``."""

    def __init__(self, root: Path, schema: DatasetSchema):
        _require_fields(schema, {"path", "class"}, f"ImageFolder {str(root)!r}")
        self.root = root
        classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        if not classes:
            raise RingfeedError(f"ImageFolder {str(root)!r} has no class folders")
        # Keep the dataset's existing class numbering; new classes are appended.
        known = list(schema.label_names)
        self.label_names = tuple(known + [c for c in classes if c not in known])
        self._files = [(cls, f) for cls in classes for f in sorted((root / cls).rglob("*")) if f.is_file()]
        self.total = len(self._files)
        self._extensions = EXTENSIONS[schema.encoding.kind]

    def items(self) -> Iterator[SourceSample | Rejection]:
        label_of = {name: i for i, name in enumerate(self.label_names)}
        for cls, file in self._files:
            relative = file.relative_to(self.root).as_posix()
            if file.suffix.lower() not in self._extensions:
                yield Rejection(relative, "unexpected file", f"extension {file.suffix or '(none)'} is not one of "
                                f"{', '.join(self._extensions)}")
                continue
            yield SourceSample(relative, {"path": relative, "class": cls}, label_of[cls], _file_reader(file))


class ManifestSource(Source):
    """A CSV or Parquet table: a file-path column (relative to the manifest's folder), a label and metadata."""

    def __init__(self, manifest: Path, schema: DatasetSchema, path_column: str, label_column: str):
        self.manifest = manifest
        self.path_column = path_column
        self.label_column = label_column
        if manifest.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(manifest)
            columns = table.column_names
            self._rows = table.to_pylist()
        else:
            try:
                with open(manifest, newline="", encoding="utf-8") as f:
                    reader = csv.DictReader(f)
                    columns = reader.fieldnames or []
                    self._rows = list(reader)
            except (UnicodeDecodeError, csv.Error) as exc:
                raise RingfeedError(f"manifest {str(manifest)!r} is not a readable CSV: {exc}") from None
        available = set(columns)
        for required in (path_column, label_column):
            if required not in available:
                raise RingfeedError(f"manifest {str(manifest)!r} has no {required!r} column "
                                    f"(it has: {', '.join(columns)})")
        _require_fields(schema, available, f"manifest {str(manifest)!r}")
        self.total = len(self._rows)

    def items(self) -> Iterator[SourceSample | Rejection]:
        base = self.manifest.parent
        for number, row in enumerate(self._rows, start=2 if self.manifest.suffix == ".csv" else 1):
            origin = f"{self.manifest.name}:{number}"
            file = row.get(self.path_column)
            if not file:
                yield Rejection(origin, "bad metadata", f"empty {self.path_column!r}")
                continue
            path = Path(file) if os.path.isabs(file) else base / file
            yield SourceSample(f"{origin} ({file})", row, row.get(self.label_column), _file_reader(path))


class WebDatasetSource(Source):
    """Tar shards where members ``<key>.<ext>`` form one sample: the data member, ``.cls`` and/or ``.json``.

    Fields: ``key`` (the member key) and everything in the ``.json`` member; the label comes from ``.cls`` or
    the JSON's label column.
    """

    def __init__(self, path: Path, schema: DatasetSchema, label_column: str):
        self.shards = [path] if path.is_file() else sorted(path.glob("*.tar"))
        if not self.shards:
            raise RingfeedError(f"no .tar shards in {str(path)!r}")
        self.label_column = label_column
        self._extensions = EXTENSIONS[schema.encoding.kind]
        self._schema = schema
        self._checked = False

    def items(self) -> Iterator[SourceSample | Rejection]:
        for shard in self.shards:
            try:
                with tarfile.open(shard, mode="r|*") as tar:
                    yield from self._samples(shard.name, tar)
            except (tarfile.TarError, OSError, EOFError) as exc:
                yield Rejection(shard.name, "unreadable", f"tar shard is damaged: {str(exc)[:120]}")

    def _samples(self, shard: str, tar: tarfile.TarFile) -> Iterator[SourceSample | Rejection]:
        key, members = None, {}
        for info in tar:
            member = tar.extractfile(info) if info.isfile() else None
            if member is None:
                continue
            directory, _, base = info.name.rpartition("/")
            stem, dot, extension = base.partition(".")
            member_key = f"{directory}/{stem}" if directory else stem
            if member_key != key and key is not None:
                yield self._sample(shard, key, members)
                members = {}
            key = member_key
            members["." + extension.lower() if dot else ""] = member.read()
        if key is not None:
            yield self._sample(shard, key, members)

    def _sample(self, shard: str, key: str, members: dict[str, bytes]) -> SourceSample | Rejection:
        origin = f"{shard}:{key}"
        fields: dict[str, Any] = {"key": key}
        if ".json" in members:
            try:
                fields.update(json.loads(members[".json"]))
            except (ValueError, UnicodeDecodeError) as exc:
                return Rejection(origin, "bad metadata", f"unreadable .json: {str(exc)[:120]}")
        if not self._checked:
            _require_fields(self._schema, set(fields), f"WebDataset sample {origin!r}")
            self._checked = True
        label = members[".cls"].decode().strip() if ".cls" in members else fields.get(self.label_column)
        data = next((members[e] for e in self._extensions if e in members), None)
        if data is None:
            return Rejection(origin, "no sample data", f"no member with extension {', '.join(self._extensions)}")
        return SourceSample(origin, fields, label, data)
