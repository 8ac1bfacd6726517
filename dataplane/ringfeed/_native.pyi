"""Ringfeed's native data path (Rust: the scylla driver on a tokio runtime).

Network waits release the GIL and wake every 100 ms so that Ctrl-C (KeyboardInterrupt) ends them.
"""

import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypedDict

class RingError(RuntimeError):
    """A request to the ring failed (after its retries, where it had some); the subclasses below say why.
    ``ringfeed.errors.ring_error`` turns each into the user-facing RingfeedError of its kind."""

class Timeout(RingError):
    """The ring did not answer in time (client or server timeout, overloaded node)."""

class Rejected(RingError):
    """The ring rejected a statement, or answered with other columns than asked (a table or column unknown or
    changed): retrying cannot help."""

class Unreachable(ConnectionError):
    """No node could be reached, connections broke, or too few replicas are alive."""

class AuthenticationFailed(ConnectionError):
    """The ring refused the credentials (or asked for some and none were given)."""

class WriterStats(TypedDict):
    rows: int
    """Rows written."""
    bytes: int
    """Payload bytes of the rows written (the CQL encoding of their values)."""
    retries: int
    """Retries of transient failures."""
    failed: int
    """Rows that failed after all retries."""

class WindowStats(TypedDict):
    window_bytes: int
    """Bytes the window lets be in flight now."""
    in_flight_bytes: int
    """Bytes of the requests in flight now (estimated from the mean sample size)."""
    peak_in_flight_bytes: int
    """The most bytes in flight at once so far."""
    pending_bytes: int
    """Estimated bytes of the batches submitted and not yet taken."""
    min_rtt_ms: float | None
    """The least round trip of a request so far (None before the first)."""
    srtt_ms: float | None
    """The smoothed round trip of requests."""

class MetricsSnapshot(TypedDict):
    fetch_latency_seconds: tuple[list[float], list[int], float]
    decode_seconds: tuple[list[float], list[int], float]
    decode_input: tuple[int, int]
    batch_handoff: tuple[int, int]
    batches_ready: int

class PreparedStatement:
    """A statement prepared by ``Session.prepare``; marked idempotent, so writes of it are retried."""

    @property
    def columns(self) -> list[tuple[str, str]]:
        """``(name, cql_type_name)`` of each bind marker in order, e.g. ``[("uuid", "uuid"), ("data", "blob")]``."""

class Session:
    """A connection to a Cassandra ring, with its own I/O runtime (2 threads; over TLS one per connection to a node,
    as the cores allow) and one pool of decoder threads for the fetchers that decode images (started by the first,
    with its ``decode_threads``).

    Requests use token-aware routing, the given consistency and a client-side timeout of
    ``request_timeout_ms``. The driver itself never retries; ``BulkWriter`` does.
    """

    def __init__(
        self,
        hosts: list[str],
        port: int = 9042,
        username: str | None = None,
        password: str | None = None,
        consistency: str = "ONE",
        request_timeout_ms: int = 12000,
        tls_ca_file: str | None = None,
        local_dc: str | None = None,
        connections_per_node: int = 1,
        tls_server_name: str | None = None,
    ) -> None:
        """Connects (GIL released), ``connections_per_node`` connections to each node (one connection carries at
        most its socket's receive buffer per round trip: a long link needs several).

        With ``local_dc`` requests go to that datacenter's nodes only (token-aware within it); connecting fails with
        the ring's datacenters when no node is there.

        ``consistency`` is one of ONE, TWO, LOCAL_ONE, QUORUM, LOCAL_QUORUM, ALL. With ``tls_ca_file`` (PEM) every
        connection uses TLS; a node's certificate must be signed by that CA and name the node's IP address, or
        ``tls_server_name`` where one is given (a Ring's nodes carry their Service's name).
        Raises Unreachable or AuthenticationFailed (one-line message) if it cannot connect, ConnectionError for a
        datacenter without nodes, ValueError for a bad argument.
        """

    def prepare(self, cql: str) -> PreparedStatement:
        """Prepares ``cql`` (GIL released). Raises Rejected if the ring rejects it (another RingError when it fails)."""

    def close(self) -> None:
        """Closes the connections, stops the I/O threads (waiting up to 2 s) and joins the decoder threads of its
        fetchers; every later request through this session, its fetchers or its writers fails."""

    def scan(
        self,
        keyspace: str,
        table: str,
        partition_key: list[str],
        columns: list[str],
        slices: int = 256,
        concurrency: int = 16,
        page_size: int = 5000,
        max_retries: int = 8,
        progress: Callable[[int], object] | None = None,
    ) -> dict[str, tuple[str, bytes, bytes | None, list[str] | None]]:
        """Reads ``columns`` of every row of ``keyspace.table`` (GIL released).

        The Murmur3 ring is cut into ``slices`` token ranges over ``token(partition_key...)``, read
        ``concurrency`` at a time, paged by ``page_size``, and appended in token order. A slice that fails
        transiently is read again from its start, up to ``max_retries`` times with backoff.
        ``progress(rows_so_far)`` is called with the GIL held about ten times a second and at the end.

        Returns ``{column: (kind, values, nulls, dictionary)}``, buffers little-endian:
        kind "uuid" (16 bytes per row, as stored), "int64" (tinyint..bigint, counter), "float64" (float,
        double), "bool" (1 byte), "text" (int32 codes into ``dictionary``, -1 for null; text, ascii).
        ``nulls`` is one byte per row (1 = null, value zeroed) when the column has any null, else None.
        Raises ValueError for names that are not plain identifiers or unsupported column types,
        a RingError by kind when a slice fails for good. ``ringfeed.table.scan_table`` wraps it in numpy.
        """

    def writer(self, concurrency: int = 64, max_retries: int = 8) -> BulkWriter:
        """A writer keeping at most ``concurrency`` requests in flight across all its ``submit`` calls; below that,
        the bytes in flight follow the same adaptive window as the fetcher's (4 MiB floor, 64 MiB ceiling)."""

    def fetcher(
        self,
        keyspace: str,
        table: str = "data_by_uuid",
        concurrency: int = 64,
        max_retries: int = 8,
        image_size: tuple[int, int] | None = None,
        channels: int = 3,
        crop: bool = True,
        raw_item_bytes: int | None = None,
        decode_threads: int = 2,
        request_bytes: int = 524_288,
        sample_bytes: int = 0,
        memory_bytes: int = 134_217_728,
        metrics: LoaderMetrics | None = None,
        random_crop: RandomCropRanges | None = None,
        seed: int = 0,
        defer_decode: bool = False,
    ) -> Fetcher:
        """A batch reader of ``keyspace.table`` (``uuid`` → ``label``, ``data``), prepared here (GIL released).

        A batch's samples are grouped by the node that owns them and read about ``request_bytes`` at a time
        (``uuid IN (...)`` sent to that node; at least one sample, at most ``concurrency``; 1: one read per
        sample). Samples are taken to be the mean size of the last batch read, before the first one
        ``sample_bytes`` (0: unknown, 64 kB assumed).
        ``image_size=(height, width)`` decodes JPEG/PNG to uint8 (height, width, channels) on the session's decoder
        threads (``decode_threads`` of them, started by its first image fetcher), resized bilinearly (with ``crop``,
        centre-cropped to the aspect ratio first); with ``random_crop`` a RandomResizedCrop and flip per sample,
        drawn from (``seed``, the epoch given to ``submit``, the sample's UUID), fused into the JPEG decode;
        ``raw_item_bytes`` expects fixed-size raw tensors; neither keeps the stored bytes. ``defer_decode`` (with
        ``image_size``) keeps them, each with the box its decode would crop (``FetchedBatch.boxes``, read from the
        image's header): the trainer decodes them on its GPU; no decoder thread starts.
        ``concurrency`` bounds the requests in flight across all of the fetcher's batches. Below it, the bytes in
        flight follow an adaptive window (from 16 MiB, never below it nor above ``memory_bytes / 2``): it grows
        while the delivery rate rises and shrinks when requests queue (the round trip climbs above the least seen).
        Requests go out in submission order and complete in any order. ``memory_bytes`` also bounds what
        ``wants_more`` lets the caller submit. Raises ValueError for memory_bytes below 32 MiB.
        ``metrics`` receives the fetcher's measurements (a loader keeps one across its fetchers).
        """

class LoaderMetrics:
    """What a loader's data path measures, counted natively on the hot path and read at scrape time."""

    def __init__(self) -> None: ...
    def snapshot(self) -> MetricsSnapshot:
        """``fetch_latency_seconds`` (one read request, sent to answered, retries included) and ``decode_seconds``
        (one image) as (upper bounds, cumulative counts with +Inf last, sum of seconds); ``decode_input`` (a decoder
        thread went for work) and ``batch_handoff`` (the loader's consumer asked for its next batch) as (asked,
        found ready); ``batches_ready``: complete batches not yet taken."""

class Buffer:
    """Bytes owned by Rust, seen by Python through the buffer protocol: ``numpy.frombuffer(buf, dtype)`` does not
    copy. Writable, so ``torch.from_numpy`` accepts the array. A batch's buffer returns to its fetcher's pool (for
    the next batch) once no array refers to it."""

    def __len__(self) -> int: ...

class FetchedBatch:
    """One batch, samples in submission order minus the missing and corrupt ones."""

    ticket: int
    data: Buffer
    """Decoded samples (fixed size each) or, without decoding, the stored bytes concatenated."""
    spans: Buffer | None
    """int64 (start, end) of each sample in ``data``; only without decoding (samples are appended as they arrive)."""
    boxes: Buffer | None
    """int32 (left, top, width, height, flip) per sample: the crop its decode takes, in the image's pixels; only with
    ``defer_decode``."""
    labels: Buffer
    """int32 label per delivered sample."""
    positions: Buffer
    """int64 position, in the submitted batch, of each delivered sample."""
    missing: list[int]
    """Positions whose UUID has no row."""
    corrupt: list[tuple[int, str]]
    """(position, reason) of samples that could not be decoded."""

class Fetcher:
    """Reads batches of samples by UUID with many requests in flight; decodes without the GIL."""

    def submit(self, ticket: int, uuids: bytes, epoch: int = 0) -> None:
        """Starts reading the samples whose UUIDs are ``uuids`` (16 bytes each) of ``epoch`` (which draws random
        crops with the seed and each UUID); returns at once."""

    def close(self) -> None:
        """Stops reading through this fetcher: batches in flight are abandoned, later calls raise RuntimeError. The
        session stays open (its connections and decoder threads may serve other fetchers)."""

    def take(self, ticket: int | None = None) -> FetchedBatch:
        """Waits (GIL released) for batch ``ticket``, or for the first batch to complete when None.

        A transient failure of a read is retried with backoff up to ``max_retries`` times; after that, or for any
        other error, raises the RingError of its kind (Unreachable, Timeout, …) naming the sample.
        """

    @property
    def wants_more(self) -> bool:
        """True while the caller should submit more batches: those submitted and not yet taken are expected to
        hold less than twice the window and less than ``memory_bytes``."""

    def window(self) -> WindowStats:
        """The adaptive window now."""

    @property
    def retries(self) -> int:
        """Requests retried after a transient failure (timeouts, broken connections, unavailable replicas) since
        this fetcher was made, counted as they happen: those of a batch that then failed count too."""

    @property
    def buffers_allocated(self) -> int:
        """Batch buffers allocated (or grown) since this fetcher was made, because no released one was free and
        large enough; the others were reused."""

# ((scale min, max), (ratio min, max), flip probability): a RandomResizedCrop and flip as the native decoder takes it.
RandomCropRanges = tuple[tuple[float, float], tuple[float, float], float]

def decode_image(encoded: bytes, height: int, width: int, channels: int = 3, crop: bool = True,
                 random_crop: RandomCropRanges | None = None, seed: int = 0, epoch: int = 0,
                 sample: uuid.UUID | None = None, fused: bool = True) -> Buffer:
    """The loader's decoder on one JPEG/PNG: uint8 (height, width, channels). Raises ValueError if it cannot.

    With ``random_crop``, the crop the loader draws for ``sample`` in ``epoch`` of a run with ``seed``;
    ``fused=False`` decodes the whole image then crops, whatever the format (the reference of the fused decode)."""

def random_crop_box(width: int, height: int, random_crop: RandomCropRanges, seed: int, epoch: int,
                    sample: uuid.UUID) -> tuple[int, int, int, int, bool]:
    """The crop ``decode_image`` draws from a width × height image: (left, top, crop width, crop height, flipped)."""

def image_box(encoded: bytes, height: int, width: int, crop: bool = True,
              random_crop: RandomCropRanges | None = None, seed: int = 0, epoch: int = 0,
              sample: uuid.UUID | None = None) -> tuple[int, int, int, int, bool]:
    """The part of the image ``decode_image`` with the same arguments takes, from its header alone: (left, top, width,
    height, flipped), as a fetcher with ``defer_decode`` hands it. Raises ValueError if the header cannot be read."""

class BulkWriter:
    """Writes rows of prepared (idempotent) INSERTs concurrently.

    Transient failures (timeouts, unavailable or overloaded replicas, broken or missing connections)
    are retried up to ``max_retries`` times with exponential backoff (50 ms doubling, capped at 2 s,
    jittered). Once a row has failed for good, the writer sends nothing more until the next ``flush``:
    the rows left fail at once (flush raises anyway), so an outage is reported within seconds rather
    than after every row has waited out its retries. Dropping a writer without ``flush`` is safe: its
    rows still being written continue while the session lives.
    """

    def submit(self, stmt: PreparedStatement, rows: Iterable[tuple[Any, ...] | list[Any]]) -> None:
        """Converts every row (a tuple or list, one value per bind marker), then starts writing them.

        Conversion, per bind-marker type, with the GIL held:
        uuid, timeuuid <- uuid.UUID or 16 bytes (timeuuid: version 1); int, bigint, smallint, tinyint,
        counter <- int (range-checked); text, ascii, varchar <- str; blob <- bytes, bytearray or
        memoryview; double, float <- float or int; boolean <- bool; timestamp <- int (ms since the
        epoch); None -> NULL for any type. Other CQL types accept only None.

        If any value fails, nothing of this call is sent and the error names the column and the row
        index: TypeError for a value of the wrong type (or a row of the wrong length), OverflowError
        for an int out of the column's range, ValueError for a right-typed but invalid value (UUID
        bytes not 16 long, a non-version-1 timeuuid, non-ASCII text for ascii).

        Then writes start with the GIL released; the call blocks only while ``concurrency`` requests
        are in flight. A KeyboardInterrupt during that wait leaves the rows already started running
        and drops the others.
        """

    def flush(self) -> int:
        """Waits (GIL released) until everything submitted is written or has failed.

        Returns the rows written since the last flush; if any row failed, raises the RingError of the first
        failure's kind (Unreachable, Timeout, …), e.g. "1981 of 3000 rows failed (1980 not sent after the first
        failure); first error, after up to 8 retries: ...". Either way the counts start again from zero and the
        writer sends again.
        """

    def stats(self) -> WriterStats:
        """Cumulative counters of this writer."""
