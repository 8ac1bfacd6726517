//! The loader's data path: batches of samples read by UUID with many requests in flight, decoded on a thread
//! pool, assembled into one contiguous buffer per batch — all without the GIL.
//!
//! Python submits batches under tickets and takes them back in order (`take(ticket)`) or as they complete
//! (`take(None)`); every batch in flight shares one window of `concurrency` requests.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use fast_image_resize::images::Image as ResizeTarget;
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use futures::{FutureExt, StreamExt};
use image::DynamicImage;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::{PyErr, ffi};
use scylla::policies::load_balancing::{NodeIdentifier, SingleTargetLoadBalancingPolicy};
use scylla::statement::prepared::PreparedStatement;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use crate::errors::{Failure, Kind, execution_kind};
use crate::lifecycle;
use crate::retry::{is_transient, with_backoff};

/// Released batch buffers kept per fetcher for reuse.
const POOLED_BUFFERS: usize = 4;
/// Samples decoded per decoder task.
const DECODE_GROUP: usize = 8;
/// Sample size assumed until the first batch has been read, when the caller knows none.
const ASSUMED_SAMPLE_BYTES: usize = 65_536;

use crate::session::{Client, one_line};

/// How a sample's bytes become the batch's `data`.
#[derive(Clone, Copy)]
pub(crate) enum Decode {
    /// Bytes as stored, concatenated; `offsets` says where each sample starts.
    Bytes,
    /// Fixed-size raw tensors: each sample must be exactly `item_bytes` long.
    Raw { item_bytes: usize },
    /// JPEG/PNG decoded to uint8 height × width × channels, resized (centre-cropped to the aspect first when `crop`).
    Image(ImageShape),
}

#[derive(Clone, Copy)]
pub(crate) struct ImageShape {
    pub height: u32,
    pub width: u32,
    pub channels: u8,
    pub crop: bool,
}

impl ImageShape {
    fn item_bytes(&self) -> usize {
        self.height as usize * self.width as usize * self.channels as usize
    }
}

/// An owned byte buffer that Python sees through the buffer protocol (zero-copy `numpy.frombuffer`). A batch's
/// buffer goes back to its fetcher's pool when Python lets go of it.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Buffer {
    bytes: Vec<u8>,
    pool: Option<Arc<BufferPool>>,
}

impl Buffer {
    fn new(bytes: Vec<u8>) -> Self {
        Self { bytes, pool: None }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give(std::mem::take(&mut self.bytes));
        }
    }
}

#[pymethods]
impl Buffer {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let bytes = &slf.get().bytes;
        // Writable, so that torch.from_numpy accepts it; nothing on the Rust side reads the bytes after hand-off.
        let status = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr() as *mut c_void,
                bytes.len() as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if status == -1 {
            Err(PyErr::fetch(slf.py()))
        } else {
            Ok(())
        }
    }

    fn __len__(&self) -> usize {
        self.bytes.len()
    }
}

/// Batch buffers for reuse. A fresh buffer costs a page fault per 4 kB on first touch — more than copying the
/// samples into it — so buffers that Python has released are handed out again.
struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

impl BufferPool {
    /// A buffer of `len` initialised bytes (their values are stale).
    fn take_filled(&self, len: usize) -> Vec<u8> {
        let mut buffer = self.take(len);
        if buffer.len() >= len {
            buffer.truncate(len);
        } else {
            buffer.resize(len, 0);
        }
        buffer
    }

    /// An empty buffer with room for `capacity` bytes.
    fn take_empty(&self, capacity: usize) -> Vec<u8> {
        let mut buffer = self.take(capacity);
        buffer.clear();
        buffer.reserve(capacity);
        buffer
    }

    /// The smallest free buffer that holds `capacity`, else the largest one (growing it keeps its touched pages).
    fn take(&self, capacity: usize) -> Vec<u8> {
        let mut free = self.free.lock().expect("no panics while locked");
        let fitting = (0..free.len())
            .filter(|&i| free[i].capacity() >= capacity)
            .min_by_key(|&i| free[i].capacity());
        let chosen = fitting.or_else(|| (0..free.len()).max_by_key(|&i| free[i].capacity()));
        chosen.map(|i| free.swap_remove(i)).unwrap_or_default()
    }

    /// Keeps a released buffer; when the pool is full, it replaces the smallest one if it is larger.
    fn give(&self, buffer: Vec<u8>) {
        let mut free = self.free.lock().expect("no panics while locked");
        if free.len() < self.keep {
            free.push(buffer);
        } else if let Some(smallest) = (0..free.len()).min_by_key(|&i| free[i].capacity())
            && free[smallest].capacity() < buffer.capacity()
        {
            free[smallest] = buffer;
        }
    }
}

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

struct Assembled {
    data: Vec<u8>,
    spans: Option<Vec<i64>>,
    labels: Vec<i32>,
    positions: Vec<i64>,
    missing: Vec<usize>,
    corrupt: Vec<(usize, String)>,
}

type Outcome = Result<Assembled, Failure>;

impl Shared {
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
    window: Semaphore,
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
}

/// Reads batches of `data_by_uuid` rows; see the module documentation.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Fetcher {
    shared: Arc<Shared>,
    done_tx: mpsc::UnboundedSender<(u64, Outcome)>,
    done_rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<(u64, Outcome)>>,
    finished: Mutex<HashMap<u64, Outcome>>,
}

impl Fetcher {
    pub(crate) fn new(
        client: Arc<Client>,
        statements: Statements,
        concurrency: u32,
        max_retries: u32,
        decode: Decode,
        decode_threads: usize,
        sample_bytes: usize,
    ) -> PyResult<Self> {
        if concurrency == 0 {
            return Err(PyValueError::new_err("concurrency must be at least 1"));
        }
        let decoders = match decode {
            Decode::Image(_) => Some(DecoderPool::start(decode_threads).map_err(|err| {
                PyRuntimeError::new_err(format!("cannot start decoder threads: {err}"))
            })?),
            _ => None,
        };
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                statements,
                targeted: Mutex::new(HashMap::new()),
                window: Semaphore::new(concurrency as usize),
                concurrency: concurrency as usize,
                max_retries,
                decode,
                decoders,
                pool: Arc::new(BufferPool {
                    free: Mutex::new(Vec::new()),
                    keep: POOLED_BUFFERS,
                }),
                sample_bytes: AtomicUsize::new(sample_bytes),
                retries: AtomicU64::new(0),
            }),
            done_tx,
            done_rx: tokio::sync::Mutex::new(done_rx),
            finished: Mutex::new(HashMap::new()),
        })
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
    /// Stops reading: closes the session this fetcher reads through (its connections and I/O threads) and joins its
    /// decoder threads, with the GIL released; batches in flight are abandoned and later calls fail.
    fn close(&self, py: Python<'_>) {
        self.shared.client.close(py);
        if let Some(decoders) = &self.shared.decoders {
            py.detach(|| decoders.close());
        }
    }

    /// Requests retried after a transient failure since this fetcher was made, counted as they happen.
    #[getter]
    fn retries(&self) -> u64 {
        self.shared.retries.load(Ordering::Relaxed)
    }

    /// Starts reading the samples whose UUIDs are `uuids` (16 bytes each, concatenated); returns at once.
    fn submit(&self, ticket: u64, uuids: &Bound<'_, PyBytes>) -> PyResult<()> {
        let raw = uuids.as_bytes();
        if raw.len() % 16 != 0 {
            return Err(PyValueError::new_err("uuids must be 16 bytes each"));
        }
        let uuids: Vec<Uuid> = raw
            .chunks_exact(16)
            .map(|bytes| Uuid::from_slice(bytes).expect("16 bytes"))
            .collect();
        let shared = Arc::clone(&self.shared);
        let done = self.done_tx.clone();
        self.shared.client.spawn(async move {
            let outcome = AssertUnwindSafe(read_batch(Arc::clone(&shared), uuids))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| {
                    Err(Failure::new(
                        Kind::Other,
                        "internal error while reading a batch (see stderr)",
                    ))
                });
            // The receiver lives as long as the Fetcher; a dropped Fetcher no longer wants the batch.
            let _ = done.send((ticket, outcome));
        });
        Ok(())
    }

    /// Waits (without the GIL) for batch `ticket`, or for whichever batch completes first when `ticket` is None.
    #[pyo3(signature = (ticket = None))]
    fn take(&self, py: Python<'_>, ticket: Option<u64>) -> PyResult<FetchedBatch> {
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
                None => self
                    .shared
                    .client
                    .block_on(py, async { self.done_rx.lock().await.recv().await })?
                    .expect("the sender lives in self"),
            };
            if ticket.is_none() || ticket == Some(received.0) {
                break received;
            }
            self.finished
                .lock()
                .expect("no panics while locked")
                .insert(received.0, received.1);
        };
        let batch = outcome.map_err(Failure::into_py)?;
        let buffer = |bytes: Vec<u8>| Py::new(py, Buffer::new(bytes));
        let data = Buffer {
            bytes: batch.data,
            pool: Some(Arc::clone(&self.shared.pool)),
        };
        Ok(FetchedBatch {
            ticket,
            data: Py::new(py, data)?,
            spans: batch
                .spans
                .map(|spans| buffer(i64_bytes(&spans)))
                .transpose()?,
            labels: buffer(i32_bytes(&batch.labels))?,
            positions: buffer(i64_bytes(&batch.positions))?,
            missing: batch.missing,
            corrupt: batch.corrupt,
        })
    }
}

fn i32_bytes(values: &[i32]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
}

fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values
        .iter()
        .flat_map(|value| value.to_le_bytes())
        .collect()
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

/// Where arriving samples go: fixed-size slots by position (decoded images, raw tensors), or appended in arrival
/// order with a (start, end) span per position (stored bytes). Each sample is copied (or decoded) once, as soon as
/// it arrives, so its response frame is freed at once and the batch buffer is the only large allocation.
enum Target {
    Slots(Arc<Slots>),
    Appended {
        data: Vec<u8>,
        spans: Vec<(i64, i64)>,
    },
}

/// A batch buffer written concurrently, one slot per sample. Decoder threads hold an `Arc` while they write, so
/// the buffer outlives every writer even if the batch is abandoned.
struct Slots {
    data: std::cell::UnsafeCell<Vec<u8>>,
    item: usize,
}

// Safety: each slot is written by exactly one writer (one sample per position), and the buffer is read only after
// all writers are done (`into_inner` needs the last reference).
unsafe impl Sync for Slots {}

impl Slots {
    /// Safety: no other reference to slot `position` may exist while the returned one lives.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, position: usize) -> &mut [u8] {
        let data = unsafe { &mut *self.data.get() };
        let start = position * self.item;
        unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr().add(start), self.item) }
    }

    fn into_inner(self: Arc<Self>) -> Vec<u8> {
        match Arc::try_unwrap(self) {
            Ok(slots) => slots.data.into_inner(),
            Err(_) => unreachable!("every writer has finished"),
        }
    }
}

/// Reads every sample of a batch (at most `concurrency` requests in flight across all batches) and copies or
/// decodes each one as it arrives.
async fn read_batch(shared: Arc<Shared>, uuids: Vec<Uuid>) -> Outcome {
    let count = uuids.len();
    let mut target = match shared.decode {
        Decode::Bytes => {
            let per_sample = shared.sample_bytes.load(Ordering::Relaxed).max(1024);
            let estimate = per_sample * count + per_sample * count / 16;
            Target::Appended {
                data: shared.pool.take_empty(estimate),
                spans: vec![(0, 0); count],
            }
        }
        Decode::Raw { item_bytes: item } => Target::Slots(Arc::new(Slots {
            data: std::cell::UnsafeCell::new(shared.pool.take_filled(count * item)),
            item,
        })),
        Decode::Image(shape) => Target::Slots(Arc::new(Slots {
            data: std::cell::UnsafeCell::new(shared.pool.take_filled(count * shape.item_bytes())),
            item: shape.item_bytes(),
        })),
    };
    let mut labels: Vec<Option<i32>> = vec![None; count];
    let mut corrupt: Vec<(usize, String)> = Vec::new();
    let mut arrived_bytes = 0;
    let (decoded_tx, mut decoded_rx) =
        mpsc::unbounded_channel::<Vec<(usize, Result<(), String>)>>();
    let mut decoding = 0;
    let mut waiting: Vec<(usize, Bytes)> = Vec::new();

    let mut reads = futures::stream::iter(requests(&shared, &uuids))
        .map(|request| {
            let shared = &shared;
            async move {
                let rows = request.rows.len() as u32;
                let _permits = shared
                    .window
                    .acquire_many(rows)
                    .await
                    .expect("never closed");
                read_rows(shared, request).await
            }
        })
        .buffer_unordered(shared.concurrency);
    while let Some(result) = reads.next().await {
        let arrived = result?;
        for (position, row) in arrived {
            labels[position] = Some(row.label);
            arrived_bytes += row.data.len();
            match (&mut target, shared.decode) {
                (Target::Appended { data, spans }, _) => {
                    let start = data.len() as i64;
                    data.extend_from_slice(&row.data);
                    spans[position] = (start, data.len() as i64);
                }
                (Target::Slots(slots), Decode::Raw { item_bytes }) => {
                    if row.data.len() == item_bytes {
                        // Safety: one sample per position; nothing else writes or reads this slot.
                        unsafe { slots.slot(position) }.copy_from_slice(&row.data);
                    } else {
                        corrupt.push((
                            position,
                            format!("{} bytes, expected {item_bytes}", row.data.len()),
                        ));
                    }
                }
                (Target::Slots(slots), Decode::Image(shape)) => {
                    waiting.push((position, row.data));
                    if waiting.len() == DECODE_GROUP {
                        decoding += dispatch_decodes(
                            &shared,
                            slots,
                            shape,
                            std::mem::take(&mut waiting),
                            &decoded_tx,
                        );
                    }
                }
                (Target::Slots(_), Decode::Bytes) => unreachable!("stored bytes are appended"),
            }
        }
    }
    drop(reads);
    if let (Target::Slots(slots), Decode::Image(shape)) = (&target, shared.decode) {
        decoding += dispatch_decodes(&shared, slots, shape, waiting, &decoded_tx);
    }
    for _ in 0..decoding {
        let results = decoded_rx
            .recv()
            .await
            .expect("every decoder task reports once");
        corrupt.extend(
            results
                .into_iter()
                .filter_map(|(position, result)| result.err().map(|r| (position, r))),
        );
    }
    corrupt.sort_unstable_by_key(|(position, _)| *position);
    let missing: Vec<usize> = (0..count)
        .filter(|&position| labels[position].is_none())
        .collect();
    for (position, _) in &corrupt {
        labels[*position] = None;
    }
    let delivered: Vec<usize> = (0..count)
        .filter(|&position| labels[position].is_some())
        .collect();
    let arrived = count - missing.len();
    if arrived > 0 {
        shared
            .sample_bytes
            .store(arrived_bytes.div_ceil(arrived), Ordering::Relaxed);
    }

    let (data, spans) = match target {
        Target::Appended { data, spans } => {
            let spans = delivered
                .iter()
                .flat_map(|&position| [spans[position].0, spans[position].1])
                .collect();
            (data, Some(spans))
        }
        Target::Slots(slots) => {
            let item = slots.item;
            let mut data = slots.into_inner();
            // Missing and corrupt samples leave holes: move the delivered ones to the front, in order.
            for (index, &position) in delivered.iter().enumerate() {
                if index != position {
                    data.copy_within(position * item..(position + 1) * item, index * item);
                }
            }
            data.truncate(delivered.len() * item);
            (data, None)
        }
    };
    Ok(Assembled {
        data,
        spans,
        labels: delivered
            .iter()
            .map(|&position| labels[position].expect("delivered"))
            .collect(),
        positions: delivered.iter().map(|&position| position as i64).collect(),
        missing,
        corrupt,
    })
}

type DecodeTask = Box<dyn FnOnce() + Send>;

/// Decoder threads fed by a queue. An idle thread sleeps in the queue's receive: on cores shared with the Cassandra
/// node a work-stealing pool's idle spinning costs the node CPU, and a task (a group of samples, milliseconds of
/// work) gains nothing from stealing.
pub(crate) struct DecoderPool {
    tasks: Mutex<Option<std::sync::mpsc::Sender<DecodeTask>>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    owner: u32,
}

impl DecoderPool {
    fn start(threads: usize) -> std::io::Result<Arc<Self>> {
        let (sender, receiver) = std::sync::mpsc::channel::<DecodeTask>();
        let receiver = Arc::new(Mutex::new(receiver));
        let threads = (0..threads.max(1))
            .map(|index| {
                let receiver = Arc::clone(&receiver);
                std::thread::Builder::new()
                    .name(format!("ringfeed-decode-{index}"))
                    .spawn(move || {
                        loop {
                            // The lock is held only while waiting for one task; the task runs unlocked.
                            let task = receiver.lock().expect("decoder queue lock").recv();
                            match task {
                                Ok(task) => task(),
                                Err(_) => return, // the pool was closed
                            }
                        }
                    })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        let pool = Arc::new(Self {
            tasks: Mutex::new(Some(sender)),
            threads: Mutex::new(threads),
            owner: lifecycle::this_process(),
        });
        lifecycle::register_decoders(&pool);
        Ok(pool)
    }

    /// Queues a task; a closed pool drops it (its batch then fails).
    fn spawn(&self, task: impl FnOnce() + Send + 'static) {
        if let Some(sender) = self.tasks.lock().expect("decoder queue lock").as_ref() {
            let _ = sender.send(Box::new(task));
        }
    }

    /// Closes the queue and joins the threads (each finishes its task first); in a forked child, leaves the
    /// parent's threads alone.
    pub(crate) fn close(&self) {
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner).take();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        if lifecycle::forked_since(self.owner) {
            std::mem::forget(threads); // joining threads that are not in this process would hang
            return;
        }
        for thread in threads {
            let _ = thread.join();
        }
    }
}

impl Drop for DecoderPool {
    fn drop(&mut self) {
        self.close();
    }
}

/// Hands a group of arrived samples to the decoder threads; returns the number of tasks started (0 or 1). Groups
/// keep decoding in step with the reads at a fraction of the cost of one task per sample.
fn dispatch_decodes(
    shared: &Shared,
    slots: &Arc<Slots>,
    shape: ImageShape,
    group: Vec<(usize, Bytes)>,
    done: &mpsc::UnboundedSender<Vec<(usize, Result<(), String>)>>,
) -> usize {
    if group.is_empty() {
        return 0;
    }
    let (slots, done) = (Arc::clone(slots), done.clone());
    shared
        .decoders
        .as_ref()
        .expect("image decoding has a pool")
        .spawn(move || {
            let results: Vec<_> = group
                .iter()
                // Safety (slot): one sample per position; nothing else writes or reads this slot.
                .map(|(position, data)| {
                    // A decoder panic on a hostile input is that sample's corruption, not a lost batch.
                    let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        decode_image(data, &shape, unsafe { slots.slot(*position) })
                    }));
                    (
                        *position,
                        decoded.unwrap_or_else(|_| {
                            Err("the image decoder panicked on it".to_string())
                        }),
                    )
                })
                .collect();
            // Let go of the buffer before reporting: the batch takes it back once every decoder is done.
            drop(slots);
            let _ = done.send(results);
        });
    1
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
        return uuids
            .iter()
            .enumerate()
            .map(|(position, uuid)| Request {
                rows: vec![(position, *uuid)],
                node: None,
            })
            .collect();
    }
    let state = shared.client.session.get_cluster_state();
    let (keyspace, table) = (
        shared.statements.keyspace.as_str(),
        shared.statements.table.as_str(),
    );
    let local_dc = shared.client.local_dc.as_deref();
    // (owning node, its (position, uuid)s), in order of first appearance.
    type NodeRows = (Option<Uuid>, Vec<(usize, Uuid)>);
    let mut by_node: Vec<NodeRows> = Vec::new();
    for (position, uuid) in uuids.iter().enumerate() {
        let node = state
            .compute_token(keyspace, table, &(uuid,))
            .ok()
            .and_then(|token| {
                state
                    .get_token_endpoints(keyspace, table, token)
                    .into_iter()
                    .find(|(node, _)| {
                        node.is_connected()
                            && local_dc.is_none_or(|dc| node.datacenter.as_deref() == Some(dc))
                    })
            })
            .map(|(node, _)| node.host_id);
        match by_node.iter_mut().find(|(owner, _)| *owner == node) {
            Some((_, rows)) => rows.push((position, *uuid)),
            None => by_node.push((node, vec![(position, *uuid)])),
        }
    }
    by_node
        .into_iter()
        .flat_map(|(node, rows)| {
            rows.chunks(per_request)
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

/// Decodes a JPEG or PNG into `out` (height × width × channels, uint8), resizing with a bilinear filter; with `crop`
/// the source is first centre-cropped to the target's aspect ratio (the usual evaluation transform).
pub(crate) fn decode_image(
    encoded: &[u8],
    shape: &ImageShape,
    out: &mut [u8],
) -> Result<(), String> {
    let decoded =
        image::load_from_memory(encoded).map_err(|err| format!("cannot decode: {err}"))?;
    let (source, pixel_type) = match shape.channels {
        1 => (
            DynamicImage::ImageLuma8(decoded.into_luma8()),
            PixelType::U8,
        ),
        _ => (
            DynamicImage::ImageRgb8(decoded.into_rgb8()),
            PixelType::U8x3,
        ),
    };
    if source.width() == shape.width && source.height() == shape.height {
        out.copy_from_slice(source.as_bytes());
        return Ok(());
    }
    let mut target = ResizeTarget::from_slice_u8(shape.width, shape.height, out, pixel_type)
        .map_err(|err| format!("cannot resize: {err}"))?;
    let mut options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear));
    if shape.crop {
        options = options.fit_into_destination(Some((0.5, 0.5)));
    }
    // One resizer per thread: it keeps its scratch buffers (~160 kB for 224×224 RGB) between images, which a
    // fresh one would allocate, page-fault and free for every image.
    thread_local! {
        static RESIZER: std::cell::RefCell<Resizer> = std::cell::RefCell::new(Resizer::new());
    }
    RESIZER
        .with_borrow_mut(|resizer| resizer.resize(&source, &mut target, &options))
        .map_err(|err| format!("cannot resize: {err}"))
}

/// `decode_image` for Python: the same decoder the loader uses, for baselines and tests.
#[pyfunction]
#[pyo3(name = "decode_image", signature = (encoded, height, width, channels = 3, crop = true))]
pub fn decode_image_py(
    py: Python<'_>,
    encoded: &Bound<'_, PyBytes>,
    height: u32,
    width: u32,
    channels: u8,
    crop: bool,
) -> PyResult<Buffer> {
    let shape = image_shape(height, width, channels, crop)?;
    let encoded = encoded.as_bytes();
    let mut out = vec![0u8; shape.item_bytes()];
    py.detach(|| decode_image(encoded, &shape, &mut out))
        .map_err(PyValueError::new_err)?;
    Ok(Buffer::new(out))
}

pub(crate) fn image_shape(
    height: u32,
    width: u32,
    channels: u8,
    crop: bool,
) -> PyResult<ImageShape> {
    if height == 0 || width == 0 {
        return Err(PyValueError::new_err(
            "image height and width must be positive",
        ));
    }
    if channels != 1 && channels != 3 {
        return Err(PyValueError::new_err(format!(
            "channels must be 1 or 3, got {channels}"
        )));
    }
    Ok(ImageShape {
        height,
        width,
        channels,
        crop,
    })
}
