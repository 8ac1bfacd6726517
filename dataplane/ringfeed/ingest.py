"""Ingest: read a source in parallel, validate every sample, and write it through the native bulk writer.

Pipeline: the source is cut into chunks; a thread pool reads and checks each chunk (file I/O releases the GIL);
the main thread hands finished chunks to ``ringfeed._native.BulkWriter``, which keeps ``concurrency`` prepared
INSERTs in flight without the GIL. At most ``lookahead`` chunks are in memory, whatever the source size.
Sample UUIDs derive from (dataset, natural key), so a re-run rewrites the same rows: ingest is idempotent.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter, deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ringfeed.errors import ring_error, ring_failures
from ringfeed.ids import sample_uuid
from ringfeed.schema import DatasetSchema, convert_value
from ringfeed.sources import Rejection, SourceSample, open_source
from ringfeed.store import Store
from ringfeed.validate import SampleRejected, check_sample

MAX_EXAMPLES = 20


@dataclasses.dataclass(frozen=True)
class IngestOptions:
    format: str = "auto"
    path_column: str = "path"
    label_column: str = "label"
    workers: int = 8
    concurrency: int = 64
    chunk_size: int = 64
    max_sample_bytes: int = 64 * 2**20
    full_decode: bool = False
    consistency: str = "ONE"


class IngestProgress(Protocol):
    def start(self, total: int | None) -> None: ...

    def advance(self, inputs: int) -> None: ...


@dataclasses.dataclass
class IngestSummary:
    dataset: str
    source: str
    inputs: int = 0
    written: int = 0
    bytes: int = 0
    retries: int = 0
    """Writes retried after a transient failure (timeouts, unavailable replicas, broken connections)."""
    label_counts: Counter = dataclasses.field(default_factory=Counter)
    rejected: Counter = dataclasses.field(default_factory=Counter)
    examples: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    """How long the ingest took, once it is over."""
    started_at: float = dataclasses.field(default_factory=time.monotonic)

    def elapsed_s(self) -> float:
        """Seconds the ingest has taken so far (all of them once it is over)."""
        return self.seconds or time.monotonic() - self.started_at

    @property
    def rows_per_s(self) -> float:
        return self.written / self.seconds if self.seconds else 0.0

    def reject(self, origin: str, kind: str, detail: str) -> None:
        self.rejected[kind] += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append((origin, f"{kind}: {detail}"))

    def to_dict(self) -> dict:
        return {
            "dataset": self.dataset, "source": self.source, "inputs": self.inputs, "written": self.written,
            "bytes": self.bytes, "retries": self.retries,
            "label_counts": {str(k): v for k, v in sorted(self.label_counts.items())},
            "rejected": dict(self.rejected), "examples": self.examples, "seconds": round(self.seconds, 3),
        }


@dataclasses.dataclass
class _PreparedChunk:
    rows: dict[str, list[tuple]]
    accepted: list[tuple[int, int]]  # (label, bytes)
    rejections: list[Rejection]
    inputs: int


class _ChunkBuilder:
    """Turns source samples into table rows; runs in worker threads, touches no shared state."""

    def __init__(self, schema: DatasetSchema, options: IngestOptions):
        self.schema = schema
        self.options = options
        self.tables = list(schema.insert_statements())

    def build(self, chunk: list[SourceSample | Rejection]) -> _PreparedChunk:
        out = _PreparedChunk({t: [] for t in self.tables}, [], [], len(chunk))
        keys = len(self.schema.natural_keys)
        for item in chunk:
            if isinstance(item, Rejection):
                out.rejections.append(item)
                continue
            try:
                values = tuple(c.convert(item.fields.get(c.name)) for c in self.schema.columns)
                label = convert_value("label", "int", item.label)
            except ValueError as exc:
                out.rejections.append(Rejection(item.origin, "bad metadata", str(exc)))
                continue
            try:
                raw = item.read()
            except OSError as exc:
                out.rejections.append(Rejection(item.origin, "unreadable", exc.strerror or str(exc)))
                continue
            try:
                payload = check_sample(raw, self.schema.encoding, self.options.max_sample_bytes,
                                       self.options.full_decode)
            except SampleRejected as exc:
                out.rejections.append(Rejection(item.origin, exc.kind, exc.detail))
                continue
            uid = sample_uuid(self.schema.name, values[:keys])
            meta_row = (*values, label, uid, len(payload))
            out.rows["metadata_by_nat"].append(meta_row)
            out.rows["data_by_uuid"].append((uid, label, payload))
            if self.schema.with_metadata_by_uuid:
                out.rows["metadata_by_uuid"].append(meta_row)
            out.accepted.append((label, len(payload)))
        return out


def ingest(store: Store, dataset: str, source_path: str, options: IngestOptions = IngestOptions(),
           progress: IngestProgress | None = None, summary: IngestSummary | None = None) -> IngestSummary:
    """Ingest every sample of ``source_path`` into ``dataset``; returns what was written and what was rejected
    (`summary`, filled as the ingest goes when given: a metrics endpoint reads it live).
    A failure of the ring stops it with the RingfeedError of its kind (RingUnavailable, RingTimeout, …)."""
    schema = store.schema(dataset)
    source = open_source(source_path, schema, options.format, options.path_column, options.label_column)
    if source.label_names and source.label_names != schema.label_names:
        schema = store.set_label_names(dataset, source.label_names)
    session = store.address.native_session(options.consistency)
    try:
        statements = {table: session.prepare(cql) for table, cql in schema.insert_statements().items()}
    except ring_failures() as exc:
        raise ring_error(exc, f"ingest into {dataset!r}", store.address.where) from None
    writer = session.writer(concurrency=options.concurrency)
    builder = _ChunkBuilder(schema, options)
    summary = summary or IngestSummary(dataset, str(source_path))
    if progress:
        progress.start(source.total)
    summary.started_at = time.monotonic()
    lookahead = 2 * options.workers
    with ThreadPoolExecutor(max_workers=options.workers, thread_name_prefix="ringfeed-ingest") as pool:
        pending: deque = deque()
        try:
            for chunk in _chunks(source.items(), options.chunk_size):
                pending.append(pool.submit(builder.build, chunk))
                if len(pending) >= lookahead:
                    _write(pending.popleft().result(), writer, statements, summary, progress)
            while pending:
                _write(pending.popleft().result(), writer, statements, summary, progress)
            writer.flush()
        except ring_failures() as exc:
            written = writer.stats()
            raise ring_error(exc, f"ingest of {dataset!r} interrupted after {written['rows']:,} rows written and "
                                  f"{written['retries']:,} retries (re-run the same command to finish it: "
                                  "re-ingesting rewrites the same rows, nothing is duplicated)",
                             store.address.where) from None
        finally:
            for future in pending:
                future.cancel()
            summary.retries = writer.stats()["retries"]
    summary.seconds = time.monotonic() - summary.started_at
    store.record_ingest(dataset, summary.to_dict())
    return summary


def _write(chunk: _PreparedChunk, writer, statements: dict, summary: IngestSummary,
           progress: IngestProgress | None) -> None:
    for table, rows in chunk.rows.items():
        if rows:
            writer.submit(statements[table], rows)
    summary.inputs += chunk.inputs
    summary.written += len(chunk.accepted)
    for label, size in chunk.accepted:
        summary.label_counts[label] += 1
        summary.bytes += size
    for rejection in chunk.rejections:
        summary.reject(rejection.origin, rejection.kind, rejection.detail)
    if progress:
        progress.advance(chunk.inputs)


def _chunks(items: Iterable, size: int):
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk
