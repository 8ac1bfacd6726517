//! `BulkWriter`: converts rows under the GIL, then writes them concurrently on the session's
//! runtime, retrying transient failures with backoff. The bytes in flight follow the adaptive `window` (as the
//! loader's reads do), under a cap of `concurrency` rows in flight.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use scylla::client::session::Session as ScyllaSession;
use scylla::errors::ExecutionError;
use scylla::statement::prepared::PreparedStatement as ScyllaPrepared;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::convert::{BoundRow, convert_row};
use crate::client::retry::{is_transient, with_backoff};
use crate::client::{Client, PreparedStatement};
use crate::errors::{Failure, execution_kind, one_line};
use crate::window::{FlowPermit, FlowWindow, WindowControl};

/// The window's floor, start and ceiling (bytes of row values in flight): on a short link the writer's row cap
/// binds before the floor; the ceiling covers 100 ms at 600 MB/s, more than one node takes in.
const WINDOW_FLOOR: usize = 4 << 20;
const WINDOW_START: usize = 8 << 20;
const WINDOW_CEILING: usize = 64 << 20;

/// Writes rows of prepared INSERTs concurrently; see `flush` for the outcome.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct BulkWriter {
    client: Arc<Client>,
    shared: Arc<WriterShared>,
}

/// What the row tasks share with the writer; the tasks outlive a writer dropped without flush.
struct WriterShared {
    session: Arc<ScyllaSession>,
    /// One permit per request in flight, across all `submit` calls: `concurrency` at most.
    requests: Arc<Semaphore>,
    /// Bytes in flight, adapted to the link.
    window: Arc<FlowWindow>,
    max_retries: u32,
    tally: Mutex<Tally>,
}

#[derive(Default)]
struct Tally {
    rows: u64,
    bytes: u64,
    retries: u64,
    failed: u64,
    since_flush: FlushOutcome,
}

/// What `flush` reports, then resets.
#[derive(Default)]
struct FlushOutcome {
    written: u64,
    failed: u64,
    /// Of `failed`: rows given up without another attempt because a row had already failed for good.
    not_sent: u64,
    /// The error of the first row that failed for good; once set, no more rows are sent.
    first_error: Option<Failure>,
}

impl Tally {
    fn record_written(&mut self, bytes: u64) {
        self.rows += 1;
        self.bytes += bytes;
        self.since_flush.written += 1;
    }

    fn record_failed(&mut self, err: &ExecutionError) {
        self.failed += 1;
        self.since_flush.failed += 1;
        self.since_flush
            .first_error
            .get_or_insert_with(|| Failure::new(execution_kind(err), one_line(err)));
    }

    /// After a row failed for good, flush will raise whatever happens next, so the remaining rows
    /// are failed at once instead of each waiting out its retries against a ring that is down.
    fn skip_if_halted(&mut self) -> bool {
        let halted = self.since_flush.first_error.is_some();
        if halted {
            self.failed += 1;
            self.since_flush.failed += 1;
            self.since_flush.not_sent += 1;
        }
        halted
    }
}

impl WriterShared {
    fn tally(&self) -> MutexGuard<'_, Tally> {
        // The counters stay meaningful even if a holder panicked.
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl BulkWriter {
    pub(crate) fn new(client: Arc<Client>, concurrency: u32, max_retries: u32) -> PyResult<Self> {
        if concurrency == 0 {
            return Err(PyValueError::new_err("concurrency must be at least 1"));
        }
        let shared = WriterShared {
            session: Arc::clone(&client.session),
            requests: Arc::new(Semaphore::new(concurrency as usize)),
            window: FlowWindow::new(WindowControl::new(WINDOW_START, WINDOW_FLOOR, WINDOW_CEILING, Instant::now())),
            max_retries,
            tally: Mutex::default(),
        };
        Ok(Self {
            client,
            shared: Arc::new(shared),
        })
    }
}

#[pymethods]
impl BulkWriter {
    /// Converts all rows first (a bad value raises and nothing of the call is sent),
    /// then starts one write per row, blocking only while the window is full.
    fn submit(
        &self,
        py: Python<'_>,
        stmt: &Bound<'_, PreparedStatement>,
        rows: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let prepared = stmt.get();
        let rows = rows
            .try_iter()?
            .enumerate()
            .map(|(index, row)| convert_row(&prepared.markers, &row?, index))
            .collect::<PyResult<Vec<BoundRow>>>()?;

        let shared = Arc::clone(&self.shared);
        let statement = Arc::clone(&prepared.statement);
        self.client.block_on(py, async move {
            for row in rows {
                let room = shared.window.acquire(row.payload_bytes as usize).await;
                let slot = Arc::clone(&shared.requests)
                    .acquire_owned()
                    .await
                    .expect("the request semaphore is never closed");
                tokio::spawn(write_row(
                    Arc::clone(&shared),
                    Arc::clone(&statement),
                    row,
                    (room, slot),
                ));
            }
        })
    }

    /// Waits until every submitted row is written or has failed; returns the rows written
    /// since the last flush, or raises the first failure's kind (`Unreachable`, `Timeout`, …) if any row failed
    /// after all retries.
    fn flush(&self, py: Python<'_>) -> PyResult<u64> {
        let window = Arc::clone(&self.shared.window);
        self.client.block_on(py, async move { window.wait_idle().await })?;

        let outcome = std::mem::take(&mut self.shared.tally().since_flush);
        match outcome.first_error {
            None => Ok(outcome.written),
            Some(first_error) => Err(first_error
                .with_message(format!(
                    "{} of {} rows failed ({} not sent after the first failure); first error, after up to {} retries: {}",
                    outcome.failed,
                    outcome.written + outcome.failed,
                    outcome.not_sent,
                    self.shared.max_retries,
                    first_error.message,
                ))
                .into_py()),
        }
    }

    /// Cumulative counters: rows written, their payload bytes, retries, rows failed.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (rows, bytes, retries, failed) = {
            let tally = self.shared.tally();
            (tally.rows, tally.bytes, tally.retries, tally.failed)
        };
        let stats = PyDict::new(py);
        stats.set_item("rows", rows)?;
        stats.set_item("bytes", bytes)?;
        stats.set_item("retries", retries)?;
        stats.set_item("failed", failed)?;
        Ok(stats)
    }
}

/// Writes one row, retrying transient failures; holds its room in the window and its request slot until done.
async fn write_row(
    shared: Arc<WriterShared>,
    statement: Arc<ScyllaPrepared>,
    row: BoundRow,
    (mut room, _slot): (FlowPermit, OwnedSemaphorePermit),
) {
    let transient =
        |failure: &WriteFailure| matches!(failure, WriteFailure::Failed(err) if is_transient(err));
    let (shared, statement, row) = (&shared, &statement, &row);
    let outcome = with_backoff(shared.max_retries, transient, |retry| async move {
        {
            let mut tally = shared.tally();
            if tally.skip_if_halted() {
                return Err(WriteFailure::Halted);
            }
            if retry > 0 {
                tally.retries += 1; // counted as it happens: stats() during an outage shows the rows in backoff
            }
        }
        shared
            .session
            .execute_unpaged(statement, &row.values)
            .await
            .map_err(|err| WriteFailure::Failed(Box::new(err)))
    })
    .await;
    let mut tally = shared.tally();
    match outcome {
        Ok(_) => {
            room.delivered(row.payload_bytes as usize);
            tally.record_written(row.payload_bytes);
        }
        Err((WriteFailure::Failed(err), _)) => tally.record_failed(&err),
        Err((WriteFailure::Halted, _)) => {}
    }
}

/// Why an attempt at a row did not write it.
enum WriteFailure {
    /// Another row had failed for good: this one is given up unsent (counted by `skip_if_halted`).
    Halted,
    Failed(Box<ExecutionError>),
}
