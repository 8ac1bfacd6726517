//! The loader's data path: batches of samples read by UUID with many requests in flight, decoded on a thread
//! pool (`decode`), assembled into one contiguous buffer per batch — all without the GIL.
//!
//! Python submits batches under tickets and takes them back in order (`take(ticket)`) or as they complete
//! (`take(None)`). The requests of every batch share one adaptive window of bytes in flight (`window`), sent in
//! submission order and completing in any order; batches that complete ahead of their turn wait in `finished` (the
//! reorder buffer) until taken. `wants_more` tells the caller when to submit: while the batches submitted and not
//! yet taken hold less than twice the window (so the window always has requests waiting) and less than the memory
//! bound.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use scylla::policies::load_balancing::{NodeIdentifier, SingleTargetLoadBalancingPolicy};
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use crate::buffer::{Buffer, BufferPool, le_bytes};
use crate::client::Client;
use crate::client::retry::{is_transient, with_backoff};
use crate::crop::sample_key;
use crate::decode::{Assembled, Assembly, Decode, DecoderPool, Fit};
use crate::metrics::PathMetrics;
use crate::errors::{Failure, Kind, execution_kind, one_line};
use crate::window::{FlowWindow, WindowControl};

/// Sample size assumed until the first batch has been read, when the caller knows none.
const ASSUMED_SAMPLE_BYTES: usize = 65_536;
/// The window never goes below this, nor starts lower: on a short link the node needs many requests at once to keep
/// its read threads busy (the fixed window this replaced held 64 samples: 9.6 MB of 150 kB ones, and a larger one
/// read faster on loopback), and a long link opens from here in a few round trips.
const WINDOW_FLOOR: usize = 16 << 20;

/// One batch as it comes back: samples in submission order, minus missing and corrupt ones.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct FetchedBatch {
    #[pyo3(get)]
    ticket: u64,
    /// Decoded pixels / raw tensors (fixed size per sample) or the stored bytes concatenated.
    #[pyo3(get)]
    data: Py<Buffer>,
    /// int64 (start, end) in `data` of each delivered sample (only when not decoding).
    #[pyo3(get)]
    spans: Option<Py<Buffer>>,
    /// int32 (left, top, width, height, flip) of each delivered image: the crop its decode takes (only when the
    /// decode is deferred).
    #[pyo3(get)]
    boxes: Option<Py<Buffer>>,
    /// int32 label of each delivered sample.
    #[pyo3(get)]
    labels: Py<Buffer>,
    /// int64 position in the submitted batch of each delivered sample.
    #[pyo3(get)]
    positions: Py<Buffer>,
    /// Positions whose UUID has no row.
    #[pyo3(get)]
    missing: Vec<usize>,
    /// (position, reason) of samples that could not be decoded.
    #[pyo3(get)]
    corrupt: Vec<(usize, String)>,
}

type Outcome = Result<Assembled, Failure>;

impl Shared {
    /// The mean stored bytes of the samples read so far, or the assumed size before the first batch.
    fn expected_sample_bytes(&self) -> usize {
        match self.sample_bytes.load(Ordering::Relaxed) {
            0 => ASSUMED_SAMPLE_BYTES,
            known => known,
        }
    }

    fn count_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// `statements.many` sent only to `node` (by host id).
    fn targeted_many(&self, node: Uuid) -> PreparedStatement {
        let mut targeted = self.targeted.lock().expect("no panics while locked");
        targeted
            .entry(node)
            .or_insert_with(|| {
                let mut statement = self.statements.many.clone();
                statement.set_load_balancing_policy(Some(SingleTargetLoadBalancingPolicy::new(
                    NodeIdentifier::HostId(node),
                    None,
                )));
                statement
            })
            .clone()
    }
}

/// The prepared reads of one table: one row by UUID, and several (`IN`) sent to a replica that owns them all.
pub(crate) struct Statements {
    pub(crate) one: PreparedStatement,
    pub(crate) many: PreparedStatement,
    pub(crate) keyspace: String,
    pub(crate) table: String,
    /// Bytes per request: one request (and one response, one wake-up) per several rows costs the node and the
    /// client far less CPU per row than one per row, and a byte budget rather than a row count keeps large samples
    /// from piling into one long response.
    pub(crate) request_bytes: usize,
}

struct Shared {
    client: Arc<Client>,
    statements: Statements,
    /// `statements.many` pinned to one node, by host id (made on first use).
    targeted: Mutex<HashMap<Uuid, PreparedStatement>>,
    /// Bytes in flight, adapted to the link.
    window: Arc<FlowWindow>,
    /// One permit per request in flight: `concurrency` at most.
    requests: Semaphore,
    concurrency: usize,
    max_retries: u32,
    decode: Decode,
    decoders: Option<Arc<DecoderPool>>,
    pool: Arc<BufferPool>,
    /// Mean stored bytes per sample of the last batch read (0: none yet): sizes requests, and without decoding the
    /// next batch's buffer.
    sample_bytes: AtomicUsize,
    /// Requests retried after a transient failure, counted as they happen (also those of batches that then failed).
    retries: AtomicU64,
    metrics: Arc<PathMetrics>,
}

/// Reads batches of `data_by_uuid` rows; see the module documentation.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Fetcher {
    shared: Arc<Shared>,
    done_tx: mpsc::UnboundedSender<(u64, Outcome)>,
    done_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<(u64, Outcome)>>,
    finished: Mutex<HashMap<u64, Outcome>>,
    /// Estimated bytes of each batch submitted and not yet taken (in flight, queued or in the reorder buffer).
    pending: Mutex<HashMap<u64, usize>>,
    memory_bytes: usize,
    closed: AtomicBool,
}

impl Fetcher {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Arc<Client>,
        statements: Statements,
        concurrency: u32,
        max_retries: u32,
        decode: Decode,
        decoders: Option<Arc<DecoderPool>>,
        sample_bytes: usize,
        memory_bytes: usize,
        metrics: Arc<PathMetrics>,
    ) -> PyResult<Self> {
        if concurrency == 0 {
            return Err(PyValueError::new_err("concurrency must be at least 1"));
        }
        if memory_bytes < 2 * WINDOW_FLOOR {
            return Err(PyValueError::new_err(format!(
                "memory_bytes must be at least {} (twice the window's floor)",
                2 * WINDOW_FLOOR
            )));
        }
        // Half the memory for the window: the other half holds the batches waiting for it or for their turn.
        let control = WindowControl::new(WINDOW_FLOOR, WINDOW_FLOOR, memory_bytes / 2, Instant::now());
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                statements,
                targeted: Mutex::new(HashMap::new()),
                window: FlowWindow::new(control),
                requests: Semaphore::new(concurrency as usize),
                concurrency: concurrency as usize,
                max_retries,
                decode,
                decoders,
                // As much as the batches in flight may hold: each new batch finds a released buffer.
                pool: Arc::new(BufferPool::new(memory_bytes)),
                sample_bytes: AtomicUsize::new(sample_bytes),
                retries: AtomicU64::new(0),
                metrics,
            }),
            done_tx,
            done_rx: tokio::sync::Mutex::new(done_rx),
            finished: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            memory_bytes,
            closed: AtomicBool::new(false),
        })
    }

    /// The memory a batch of `count` samples is expected to hold until taken.
    fn batch_bytes(&self, count: usize) -> usize {
        let stored = self.shared.expected_sample_bytes();
        let per_sample = match self.shared.decode {
            Decode::Bytes | Decode::Deferred(_) => stored,
            Decode::Raw { item_bytes } => item_bytes,
            Decode::Image(shape) => shape.item_bytes().max(stored),
        };
        count * per_sample
    }

    fn check_open(&self) -> PyResult<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err("this fetcher is closed"));
        }
        Ok(())
    }

    fn ready(&self, ticket: Option<u64>) -> Option<(u64, Outcome)> {
        let mut finished = self.finished.lock().expect("no panics while locked");
        let key = match ticket {
            Some(ticket) => ticket,
            None => *finished.keys().next()?,
        };
        finished.remove(&key).map(|outcome| (key, outcome))
    }
}

#[pymethods]
impl Fetcher {
    /// Stops reading through this fetcher: batches in flight are abandoned and later calls fail. The session (its
    /// connections, I/O and decoder threads, which other fetchers may share) stays open: `Session.close` stops it.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// True while more batches should be submitted: those submitted and not yet taken are expected to hold less
    /// than twice the window and less than `memory_bytes`.
    #[getter]
    fn wants_more(&self) -> bool {
        let pending: usize = self.pending.lock().expect("no panics while locked").values().sum();
        pending < self.memory_bytes.min(2 * self.shared.window.window_bytes())
    }

    /// The window now: `window_bytes`, `in_flight_bytes`, `peak_in_flight_bytes`, `pending_bytes` (batches
    /// submitted, not yet taken), `min_rtt_ms` and `srtt_ms` (None before the first completion).
    fn window<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.shared.window.stats();
        let pending: usize = self.pending.lock().expect("no panics while locked").values().sum();
        let millis = |rtt: Option<std::time::Duration>| rtt.map(|rtt| rtt.as_secs_f64() * 1e3);
        let dict = PyDict::new(py);
        dict.set_item("window_bytes", stats.window_bytes)?;
        dict.set_item("in_flight_bytes", stats.in_flight_bytes)?;
        dict.set_item("peak_in_flight_bytes", stats.peak_in_flight_bytes)?;
        dict.set_item("pending_bytes", pending)?;
        dict.set_item("min_rtt_ms", millis(stats.min_rtt))?;
        dict.set_item("srtt_ms", millis(stats.srtt))?;
        Ok(dict)
    }

    /// Requests retried after a transient failure since this fetcher was made, counted as they happen.
    #[getter]
    fn retries(&self) -> u64 {
        self.shared.retries.load(Ordering::Relaxed)
    }

    /// Batch buffers allocated (or grown) because no released one was free and large enough.
    #[getter]
    fn buffers_allocated(&self) -> u64 {
        self.shared.pool.allocated()
    }

    /// Starts reading the samples whose UUIDs are `uuids` (16 bytes each, concatenated) of `epoch` (which, with the
    /// seed and each UUID, draws random crops); returns at once.
    #[pyo3(signature = (ticket, uuids, epoch = 0))]
    fn submit(&self, ticket: u64, uuids: &Bound<'_, PyBytes>, epoch: u64) -> PyResult<()> {
        self.check_open()?;
        let raw = uuids.as_bytes();
        if raw.len() % 16 != 0 {
            return Err(PyValueError::new_err("uuids must be 16 bytes each"));
        }
        let uuids: Vec<Uuid> = raw
            .chunks_exact(16)
            .map(|bytes| Uuid::from_slice(bytes).expect("16 bytes"))
            .collect();
        let expected = self.batch_bytes(uuids.len());
        self.pending.lock().expect("no panics while locked").insert(ticket, expected);
        let shared = Arc::clone(&self.shared);
        let done = self.done_tx.clone();
        self.shared.client.spawn(async move {
            let outcome = AssertUnwindSafe(read_batch(Arc::clone(&shared), uuids, epoch))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(Failure::new(
                        Kind::Other,
                        "internal error while reading a batch (see stderr)",
                    ))
                });
            // The receiver lives as long as the Fetcher; a dropped Fetcher no longer wants the batch.
            if done.send((ticket, outcome)).is_ok() {
                shared.metrics.batches_ready.fetch_add(1, Ordering::Relaxed);
            }
        });
        Ok(())
    }

    /// Waits (without the GIL) for batch `ticket`, or for whichever batch completes first when `ticket` is None.
    #[pyo3(signature = (ticket = None))]
    fn take(&self, py: Python<'_>, ticket: Option<u64>) -> PyResult<FetchedBatch> {
        self.check_open()?;
        let mut waited = false;
        let (ticket, outcome) = loop {
            if let Some(found) = self.ready(ticket) {
                break found;
            }
            // With prefetch the batch is usually done already: no need to enter the runtime or release the GIL.
            let ready = self
                .done_rx
                .try_lock()
                .ok()
                .and_then(|mut rx| rx.try_recv().ok());
            let received = match ready {
                Some(received) => received,
                None => {
                    waited = true;
                    self.shared
                        .client
                        .block_on(py, async { self.done_rx.lock().await.recv().await })?
                        .expect("the sender lives in self")
                }
            };
            if ticket.is_none() || ticket == Some(received.0) {
                break received;
            }
            self.finished
                .lock()
                .expect("no panics while locked")
                .insert(received.0, received.1);
        };
        self.pending.lock().expect("no panics while locked").remove(&ticket);
        let metrics = &self.shared.metrics;
        metrics.batches_ready.fetch_sub(1, Ordering::Relaxed);
        metrics.batch_handoff.record(!waited);
        let batch = outcome.map_err(Failure::into_py)?;
        let buffer = |bytes: Vec<u8>| Py::new(py, Buffer::new(bytes));
        Ok(FetchedBatch {
            ticket,
            data: Py::new(py, Buffer::pooled(batch.data, &self.shared.pool))?,
            spans: batch
                .spans
                .map(|spans| buffer(le_bytes(&spans, i64::to_le_bytes)))
                .transpose()?,
            boxes: batch
                .boxes
                .map(|boxes| buffer(le_bytes(&boxes, i32::to_le_bytes)))
                .transpose()?,
            labels: buffer(le_bytes(&batch.labels, i32::to_le_bytes))?,
            positions: buffer(le_bytes(&batch.positions, i64::to_le_bytes))?,
            missing: batch.missing,
            corrupt: batch.corrupt,
        })
    }
}

#[derive(Clone)]
struct Row {
    label: i32,
    /// A view into the response frame: the sample's bytes are copied once, into the batch.
    data: Bytes,
}

impl Row {
    /// A row as read: a null label is -1 (unlabelled), null data is empty.
    fn from_columns(label: Option<i32>, data: Option<Bytes>) -> Self {
        Self {
            label: label.unwrap_or(-1),
            data: data.unwrap_or_default(),
        }
    }
}

/// Reads every sample of a batch of `epoch` (at most `concurrency` requests in flight across all batches) and
/// copies or decodes each one as it arrives.
async fn read_batch(shared: Arc<Shared>, uuids: Vec<Uuid>, epoch: u64) -> Outcome {
    let sample_keys = match shared.decode {
        Decode::Image(shape) | Decode::Deferred(shape) => match shape.fit {
            Fit::Random(random) => uuids.iter().map(|uuid| sample_key(random.seed, epoch, uuid)).collect(),
            Fit::Stretch | Fit::CentreCrop => Vec::new(),
        },
        Decode::Bytes | Decode::Raw { .. } => Vec::new(),
    };
    let mut assembly = Assembly::new(
        shared.decode,
        uuids.len(),
        shared.sample_bytes.load(Ordering::Relaxed),
        &shared.pool,
        shared.decoders.clone(),
        sample_keys,
    );
    let sample_bytes = shared.expected_sample_bytes();
    let mut reads = futures::stream::iter(requests(&shared, &uuids))
        .map(|request| {
            let shared = &shared;
            async move {
                // Sent in submission order: the window and the request slots are both first come, first served.
                let mut room = shared.window.acquire(request.rows.len() * sample_bytes).await;
                let _slot = shared.requests.acquire().await.expect("never closed");
                let sent = Instant::now();
                let rows = read_rows(shared, request).await?;
                shared.metrics.fetch_latency.observe(sent.elapsed());
                room.delivered(rows.iter().map(|(_, row)| row.data.len()).sum());
                Ok(rows)
            }
        })
        .buffer_unordered(shared.concurrency);
    while let Some(result) = reads.next().await {
        for (position, row) in result? {
            assembly.add(position, row.label, row.data);
        }
    }
    drop(reads);
    let batch = assembly.finish().await;
    if let Some(mean) = batch.mean_sample_bytes {
        shared.sample_bytes.store(mean, Ordering::Relaxed);
    }
    Ok(batch)
}

/// Samples read by one request, and the node that owns them all (when the ring's token map knows it).
struct Request {
    rows: Vec<(usize, Uuid)>,
    node: Option<Uuid>,
}

/// Splits a batch into requests of about `request_bytes` each (by the mean sample size seen so far; at least one
/// sample, at most `concurrency`), each owned by one node (its first connected replica, in the local datacenter
/// when one is set), so that a multi-row read is served where the rows are, without a coordinator hop.
fn requests(shared: &Shared, uuids: &[Uuid]) -> Vec<Request> {
    let per_request = rows_per_request(
        shared.statements.request_bytes,
        shared.sample_bytes.load(Ordering::Relaxed),
        shared.concurrency,
    );
    if per_request <= 1 {
        return group_by_owner(uuids, |_| None, 1);
    }
    let state = shared.client.session.get_cluster_state();
    let (keyspace, table) = (
        shared.statements.keyspace.as_str(),
        shared.statements.table.as_str(),
    );
    let local_dc = shared.client.local_dc.as_deref();
    let owner = |uuid: &Uuid| {
        let token = state.compute_token(keyspace, table, &(uuid,)).ok()?;
        state
            .get_token_endpoints(keyspace, table, token)
            .into_iter()
            .find(|(node, _)| {
                node.is_connected() && local_dc.is_none_or(|dc| node.datacenter.as_deref() == Some(dc))
            })
            .map(|(node, _)| node.host_id)
    };
    group_by_owner(uuids, owner, per_request)
}

/// Requests of at most `per_request` samples, each sample with the others of its `owner` (None: unknown, read
/// through the driver's routing); owners in order of first appearance, samples in batch order within each.
fn group_by_owner(uuids: &[Uuid], owner: impl Fn(&Uuid) -> Option<Uuid>, per_request: usize) -> Vec<Request> {
    // (owning node, its (position, uuid)s), in order of first appearance.
    type NodeRows = (Option<Uuid>, Vec<(usize, Uuid)>);
    let mut by_node: Vec<NodeRows> = Vec::new();
    for (position, uuid) in uuids.iter().enumerate() {
        let node = owner(uuid);
        match by_node.iter_mut().find(|(known, _)| *known == node) {
            Some((_, rows)) => rows.push((position, *uuid)),
            None => by_node.push((node, vec![(position, *uuid)])),
        }
    }
    by_node
        .into_iter()
        .flat_map(|(node, rows)| {
            rows.chunks(per_request.max(1))
                .map(|chunk| Request {
                    rows: chunk.to_vec(),
                    node,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Samples per request: `request_bytes` worth of samples of `sample_bytes` (0: unknown, taken as 64 kB), at least 1
/// and at most `concurrency`.
fn rows_per_request(request_bytes: usize, sample_bytes: usize, concurrency: usize) -> usize {
    let sample_bytes = if sample_bytes == 0 {
        ASSUMED_SAMPLE_BYTES
    } else {
        sample_bytes
    };
    (request_bytes / sample_bytes).clamp(1, concurrency.max(1))
}

/// The rows of one request, retrying transient failures with backoff; absent rows are simply not returned.
async fn read_rows(shared: &Shared, request: Request) -> Result<Vec<(usize, Row)>, Failure> {
    if let [(position, uuid)] = request.rows[..] {
        let row = read_row(shared, uuid).await?;
        return Ok(row.map(|row| vec![(position, row)]).unwrap_or_default());
    }
    // The same sample may stand twice in a batch (padding): asked once, delivered to each position.
    let mut keys: Vec<Uuid> = request.rows.iter().map(|(_, uuid)| *uuid).collect();
    keys.sort_unstable();
    keys.dedup();
    let keys = &keys;
    let (result, _) = with_backoff(shared.max_retries, is_transient, |retry| {
        // First to the owning node; a retry goes through the driver's routing (that node may be the one down).
        let targeted = if retry == 0 {
            request.node.map(|node| shared.targeted_many(node))
        } else {
            shared.count_retry();
            None
        };
        async move {
            let statement = targeted.as_ref().unwrap_or(&shared.statements.many);
            shared
                .client
                .session
                .execute_unpaged(statement, (keys,))
                .await
        }
    })
    .await
    .map_err(|(err, retries)| {
        Failure::new(
            execution_kind(&err),
            format!(
                "reading {} samples ({}, …) failed after {retries} retries: {}",
                keys.len(),
                keys[0],
                one_line(&err)
            ),
        )
    })?;
    let rows = result.into_rows_result().map_err(unreadable)?;
    let mut found: HashMap<Uuid, Row> = HashMap::with_capacity(keys.len());
    for row in rows
        .rows::<(Uuid, Option<i32>, Option<Bytes>)>()
        .map_err(unreadable)?
    {
        let (uuid, label, data) = row.map_err(unreadable)?;
        found.insert(uuid, Row::from_columns(label, data));
    }
    let arrived = request
        .rows
        .iter()
        .filter_map(|(position, uuid)| found.get(uuid).map(|row| (*position, row.clone())))
        .collect();
    Ok(arrived)
}

/// A response whose rows do not have the shape of the table's columns.
fn unreadable(err: impl std::fmt::Display) -> Failure {
    Failure::new(Kind::Rejected, one_line(err))
}

/// One row, retrying transient failures with backoff.
async fn read_row(shared: &Shared, uuid: Uuid) -> Result<Option<Row>, Failure> {
    let (result, _) = with_backoff(shared.max_retries, is_transient, |retry| {
        if retry > 0 {
            shared.count_retry();
        }
        shared
            .client
            .session
            .execute_unpaged(&shared.statements.one, (uuid,))
    })
    .await
    .map_err(|(err, retries)| {
        Failure::new(
            execution_kind(&err),
            format!(
                "reading sample {uuid} failed after {retries} retries: {}",
                one_line(&err)
            ),
        )
    })?;
    let row = result
        .into_rows_result()
        .map_err(unreadable)?
        .maybe_first_row::<(Option<i32>, Option<Bytes>)>()
        .map_err(unreadable)?
        .map(|(label, data)| Row::from_columns(label, data));
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(count: u128) -> Vec<Uuid> {
        (1..=count).map(Uuid::from_u128).collect()
    }

    #[test]
    fn requests_carry_a_byte_budget_of_samples_within_bounds() {
        assert_eq!(rows_per_request(524_288, 20_000, 64), 26);
        assert_eq!(rows_per_request(524_288, 0, 64), 8, "unknown size: 64 kB assumed");
        assert_eq!(rows_per_request(524_288, 1000, 64), 64, "at most concurrency");
        assert_eq!(rows_per_request(1, 150_000, 64), 1, "at least one");
    }

    #[test]
    fn samples_are_grouped_by_owner_in_order_and_cut_to_the_request_size() {
        let uuids = ids(7);
        let (a, b) = (Uuid::from_u128(100), Uuid::from_u128(200));
        // Even UUIDs on node a, odd ones on b, the 7th unknown.
        let owner = |uuid: &Uuid| match uuid.as_u128() {
            7 => None,
            n if n % 2 == 0 => Some(a),
            _ => Some(b),
        };
        let requests = group_by_owner(&uuids, owner, 2);
        let shape: Vec<(Option<Uuid>, Vec<usize>)> = requests
            .iter()
            .map(|request| (request.node, request.rows.iter().map(|(position, _)| *position).collect()))
            .collect();
        assert_eq!(
            shape,
            [
                (Some(b), vec![0, 2]),
                (Some(b), vec![4]),
                (Some(a), vec![1, 3]),
                (Some(a), vec![5]),
                (None, vec![6]),
            ]
        );
    }

    #[test]
    fn every_position_is_in_exactly_one_request() {
        let uuids = ids(100);
        let owner = |uuid: &Uuid| Some(Uuid::from_u128(uuid.as_u128() % 3));
        let mut positions: Vec<usize> = group_by_owner(&uuids, owner, 7)
            .into_iter()
            .flat_map(|request| {
                assert!(request.rows.len() <= 7);
                request.rows.into_iter().map(|(position, uuid)| {
                    assert_eq!(uuids[position], uuid);
                    position
                })
            })
            .collect();
        positions.sort_unstable();
        assert_eq!(positions, (0..100).collect::<Vec<_>>());
    }
}
