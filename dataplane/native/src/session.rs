//! Connection to a ring: one tokio runtime and one scylla session per Python `Session`.

use std::fmt::Display;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::OpenSsl010Config;
use scylla::client::session::Session as ScyllaSession;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement as ScyllaPrepared;
use tokio::runtime::{Handle, Runtime};

use crate::convert::BindMarker;
use crate::errors::{Failure, prepare_kind, session_kind};
use crate::fetch::{Decode, Fetcher, Statements, image_shape};
use crate::lifecycle;
use crate::scan::{ScanRequest, scan};
use crate::writer::BulkWriter;

/// How often a blocking wait wakes up to let Python handle signals (Ctrl-C).
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// How long stopping a runtime waits for its threads.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// A tokio runtime whose threads are stopped and joined (up to 2 s, without the GIL) when it is closed or dropped:
/// threads left running while the process exits (interpreter finalisation, then libc's exit handlers) crash it.
/// Requests still in flight are abandoned.
struct IoRuntime {
    handle: Handle,
    /// None once closed.
    runtime: Mutex<Option<Runtime>>,
    closed: AtomicBool,
    owner: u32,
}

impl IoRuntime {
    fn start() -> PyResult<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ringfeed-io")
            .enable_all()
            .build()
            .map_err(|err| PyRuntimeError::new_err(format!("cannot start the I/O runtime: {err}")))?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
            closed: AtomicBool::new(false),
            owner: lifecycle::this_process(),
        })
    }

    fn check_open(&self) -> PyResult<()> {
        lifecycle::check_not_exiting()?;
        if self.closed.load(Ordering::SeqCst) {
            return Err(PyRuntimeError::new_err("this ringfeed session is closed"));
        }
        Ok(())
    }

    fn take(&self) -> Option<Runtime> {
        self.runtime
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Stops the I/O threads and waits for them with the GIL released; later waits fail at once.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(runtime) = self.take() {
            if lifecycle::forked_since(self.owner) {
                std::mem::forget(runtime); // its threads are the parent's
            } else {
                py.detach(|| runtime.shutdown_timeout(SHUTDOWN_WAIT));
            }
        }
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        let Some(runtime) = self.take() else { return };
        if lifecycle::forked_since(self.owner) {
            std::mem::forget(runtime); // its threads are the parent's: waiting for them would hang
        } else if Handle::try_current().is_ok() {
            // Inside one of its own threads (the last task let go of the client) the runtime cannot wait for itself.
            runtime.shutdown_background();
        } else {
            // Dropped by Python, which holds the GIL: the I/O threads never need it, other Python threads may.
            Python::attach(|py| py.detach(|| runtime.shutdown_timeout(SHUTDOWN_WAIT)));
        }
    }
}

/// The runtime and the driver session, shared by a `Session` and its writers.
pub(crate) struct Client {
    runtime: IoRuntime,
    pub session: Arc<ScyllaSession>,
    /// The datacenter whose nodes serve every request (None: any).
    pub local_dc: Option<String>,
}

impl Client {
    /// Runs `future` in the background on this client's runtime (a closed runtime drops it).
    pub fn spawn(&self, future: impl Future<Output = ()> + Send + 'static) {
        self.runtime.handle.spawn(future);
    }

    /// Stops the I/O threads now; every later wait on this client fails.
    pub fn close(&self, py: Python<'_>) {
        self.runtime.close(py);
    }

    /// Runs `future` on this client's runtime with the GIL released; see [`block_on`].
    pub fn block_on<F>(&self, py: Python<'_>, future: F) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        block_on(py, &self.runtime, future)
    }

    /// Like `block_on`, and calls `on_wake` with the GIL held at every wake-up and at the end
    /// (progress reports); an error from it ends the wait.
    pub fn block_on_reporting<F>(
        &self,
        py: Python<'_>,
        future: F,
        on_wake: impl FnMut(Python<'_>) -> PyResult<()>,
    ) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        block_on_with(py, &self.runtime, future, on_wake)
    }
}

/// Runs `future` to completion with the GIL released, waking up regularly so that
/// a `KeyboardInterrupt`, a closed session or the interpreter's exit ends the wait (the future is then dropped).
fn block_on<F>(py: Python<'_>, runtime: &IoRuntime, future: F) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    block_on_with(py, runtime, future, |_| Ok(()))
}

fn block_on_with<F>(
    py: Python<'_>,
    runtime: &IoRuntime,
    future: F,
    mut on_wake: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let _counted = lifecycle::InNativeWait::enter();
    let mut future = pin!(future);
    loop {
        runtime.check_open()?;
        let slice = async { tokio::time::timeout(SIGNAL_CHECK_INTERVAL, future.as_mut()).await };
        match py.detach(|| runtime.handle.block_on(slice)) {
            Ok(output) => {
                on_wake(py)?;
                return Ok(output);
            }
            Err(_elapsed) => {
                py.check_signals()?;
                on_wake(py)?;
            }
        }
    }
}

/// TLS to the nodes, their certificates verified against the CA in `ca_file` (PEM) and, by the driver, against
/// each node's IP address.
fn tls_config(ca_file: &str) -> PyResult<OpenSsl010Config> {
    let mut connector = SslConnector::builder(SslMethod::tls_client())
        .map_err(|err| PyConnectionError::new_err(format!("TLS: {err}")))?;
    connector.set_ca_file(ca_file).map_err(|err| {
        PyValueError::new_err(format!(
            "TLS: cannot read the CA certificate {ca_file}: {err}"
        ))
    })?;
    Ok(OpenSsl010Config::new(connector))
}

/// Fails with the ring's datacenters when none of its nodes is in `dc` (every request would find no node).
fn check_datacenter(session: &ScyllaSession, dc: &str) -> PyResult<()> {
    let state = session.get_cluster_state();
    let mut known: Vec<&str> = state
        .get_nodes_info()
        .iter()
        .filter_map(|node| node.datacenter.as_deref())
        .collect();
    if known.contains(&dc) {
        return Ok(());
    }
    known.sort_unstable();
    known.dedup();
    Err(PyConnectionError::new_err(format!(
        "no node of the ring is in datacenter '{dc}'; its datacenters: {}",
        known.join(", ")
    )))
}

/// A connection to a Cassandra ring.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Session {
    client: Arc<Client>,
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (hosts, port = 9042, username = None, password = None, consistency = "ONE", request_timeout_ms = 12000, tls_ca_file = None, local_dc = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        hosts: Vec<String>,
        port: u16,
        username: Option<String>,
        password: Option<String>,
        consistency: &str,
        request_timeout_ms: u64,
        tls_ca_file: Option<String>,
        local_dc: Option<String>,
    ) -> PyResult<Self> {
        if hosts.is_empty() {
            return Err(PyValueError::new_err("hosts is empty"));
        }
        if request_timeout_ms == 0 {
            return Err(PyValueError::new_err("request_timeout_ms must be positive"));
        }
        // Retries are the writer's (with backoff, counted in its stats), not the driver's.
        let profile = ExecutionProfile::builder()
            .consistency(parse_consistency(consistency)?)
            .request_timeout(Some(Duration::from_millis(request_timeout_ms)))
            .retry_policy(Arc::new(FallthroughRetryPolicy::new()))
            .build();
        let contact_points: Vec<String> =
            hosts.iter().map(|host| contact_point(host, port)).collect();
        let mut builder = SessionBuilder::new()
            .known_nodes(&contact_points)
            .default_execution_profile_handle(profile.into_handle())
            // Token-aware routing needs keyspaces and tables, not column and UDT details.
            .fetch_full_schema_metadata(false);
        if let Some(ca_file) = tls_ca_file {
            builder = builder.tls_context(Some(tls_config(&ca_file)?));
        }
        if let Some(dc) = &local_dc {
            // The default policy sends requests to this datacenter's nodes only (no failover to remote ones).
            builder = builder.prefer_datacenter(dc.clone());
        }
        match (username, password) {
            (Some(username), Some(password)) => builder = builder.user(username, password),
            (None, None) => {}
            _ => {
                return Err(PyValueError::new_err(
                    "give both username and password, or neither",
                ));
            }
        }

        let runtime = IoRuntime::start()?;
        let session = block_on(py, &runtime, builder.build())?.map_err(|err| {
            Failure::new(
                session_kind(&err),
                format!(
                    "cannot connect to {}: {}",
                    contact_points.join(", "),
                    one_line(&err)
                ),
            )
        })?;
        if let Some(dc) = &local_dc {
            check_datacenter(&session, dc)?;
        }
        let client = Arc::new(Client {
            runtime,
            session: Arc::new(session),
            local_dc,
        });
        lifecycle::register_client(&client);
        Ok(Self { client })
    }

    /// Prepares a statement; its bind markers decide how `BulkWriter.submit` converts values.
    fn prepare(&self, py: Python<'_>, cql: &str) -> PyResult<PreparedStatement> {
        let session = &self.client.session;
        let mut statement = self
            .client
            .block_on(py, session.prepare(cql))?
            .map_err(|err| {
                Failure::new(prepare_kind(&err), format!("cannot prepare {cql:?}: {}", one_line(&err)))
            })?;
        // Only idempotent writes (plain INSERTs) go through this module, so retrying is safe.
        statement.set_is_idempotent(true);
        let markers = statement
            .get_variable_col_specs()
            .iter()
            .map(|spec| BindMarker::new(spec.name(), spec.typ()))
            .collect();
        Ok(PreparedStatement {
            statement: Arc::new(statement),
            markers,
        })
    }

    /// Reads whole columns of a table by token range; see the stub file for the result's shape.
    #[pyo3(signature = (keyspace, table, partition_key, columns, slices = 256, concurrency = 16,
                        page_size = 5000, max_retries = 8, progress = None))]
    #[allow(clippy::too_many_arguments)]
    fn scan<'py>(
        &self,
        py: Python<'py>,
        keyspace: String,
        table: String,
        partition_key: Vec<String>,
        columns: Vec<String>,
        slices: u32,
        concurrency: u32,
        page_size: i32,
        max_retries: u32,
        progress: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let request = ScanRequest {
            keyspace,
            table,
            partition_key,
            columns,
            slices,
            concurrency,
            page_size,
            max_retries,
        };
        scan(py, &self.client, request, progress)
    }

    /// A batch reader of `keyspace.table` rows (uuid → label, data); see `fetch.rs` and the stub file.
    #[pyo3(signature = (keyspace, table = "data_by_uuid", concurrency = 64, max_retries = 8, image_size = None,
                        channels = 3, crop = true, raw_item_bytes = None, decode_threads = 2,
                        request_bytes = 524_288, sample_bytes = 0))]
    #[allow(clippy::too_many_arguments)]
    fn fetcher(
        &self,
        py: Python<'_>,
        keyspace: &str,
        table: &str,
        concurrency: u32,
        max_retries: u32,
        image_size: Option<(u32, u32)>,
        channels: u8,
        crop: bool,
        raw_item_bytes: Option<usize>,
        decode_threads: usize,
        request_bytes: usize,
        sample_bytes: usize,
    ) -> PyResult<Fetcher> {
        let decode = match (image_size, raw_item_bytes) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give image_size or raw_item_bytes, not both",
                ));
            }
            (Some((height, width)), None) => {
                Decode::Image(image_shape(height, width, channels, crop)?)
            }
            (None, Some(0)) => {
                return Err(PyValueError::new_err("raw_item_bytes must be positive"));
            }
            (None, Some(item_bytes)) => Decode::Raw { item_bytes },
            (None, None) => Decode::Bytes,
        };
        if decode_threads == 0 {
            return Err(PyValueError::new_err("decode_threads must be at least 1"));
        }
        if request_bytes == 0 {
            return Err(PyValueError::new_err("request_bytes must be at least 1"));
        }
        let prepare = |cql: String| -> PyResult<ScyllaPrepared> {
            let mut statement = self
                .client
                .block_on(py, self.client.session.prepare(cql.as_str()))?
                .map_err(|err| {
                    Failure::new(prepare_kind(&err), format!("cannot prepare {cql:?}: {}", one_line(&err)))
                })?;
            statement.set_is_idempotent(true);
            // The columns are known from the prepare: rows come back without repeating their metadata.
            statement.set_use_cached_result_metadata(true);
            Ok(statement)
        };
        let statements = Statements {
            one: prepare(format!(
                "SELECT label, data FROM {keyspace}.{table} WHERE uuid = ?"
            ))?,
            many: prepare(format!(
                "SELECT uuid, label, data FROM {keyspace}.{table} WHERE uuid IN ?"
            ))?,
            keyspace: keyspace.to_owned(),
            table: table.to_owned(),
            request_bytes,
        };
        Fetcher::new(
            Arc::clone(&self.client),
            statements,
            concurrency,
            max_retries,
            decode,
            decode_threads,
            sample_bytes,
        )
    }

    /// Closes the connections and stops the I/O threads now (waiting up to 2 s for them); every later request
    /// through this session, its fetchers or its writers fails. Dropping the last reference does the same.
    fn close(&self, py: Python<'_>) {
        self.client.close(py);
    }

    #[pyo3(signature = (concurrency = 64, max_retries = 8))]
    fn writer(&self, concurrency: u32, max_retries: u32) -> PyResult<BulkWriter> {
        BulkWriter::new(Arc::clone(&self.client), concurrency, max_retries)
    }
}

/// A statement prepared by `Session.prepare`.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct PreparedStatement {
    pub statement: Arc<ScyllaPrepared>,
    pub markers: Vec<BindMarker>,
}

#[pymethods]
impl PreparedStatement {
    /// `(name, cql_type_name)` of each bind marker, in order.
    #[getter]
    fn columns(&self) -> Vec<(String, String)> {
        self.markers
            .iter()
            .map(|marker| (marker.name.clone(), marker.type_name.clone()))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("PreparedStatement({:?})", self.statement.get_statement())
    }
}

fn parse_consistency(name: &str) -> PyResult<Consistency> {
    match name.to_ascii_uppercase().as_str() {
        "ONE" => Ok(Consistency::One),
        "TWO" => Ok(Consistency::Two),
        "LOCAL_ONE" => Ok(Consistency::LocalOne),
        "QUORUM" => Ok(Consistency::Quorum),
        "LOCAL_QUORUM" => Ok(Consistency::LocalQuorum),
        "ALL" => Ok(Consistency::All),
        _ => Err(PyValueError::new_err(format!(
            "unknown consistency {name:?}; use ONE, TWO, LOCAL_ONE, QUORUM, LOCAL_QUORUM or ALL"
        ))),
    }
}

/// `host:port`, with an IPv6 literal in brackets.
fn contact_point(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// An error message on one line (some driver messages span several).
pub(crate) fn one_line(err: impl Display) -> String {
    err.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
