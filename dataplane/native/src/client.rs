//! The connection to a ring, shared by every data path: one tokio runtime and one scylla session per Python
//! `Session` (connect, wait without the GIL, stop the threads), prepared statements, and the retry policy (`retry`).
//! `fetch`, `scan` and `writer` use this module; only `session` (the Python class) sees them all.

pub(crate) mod retry;

use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::num::NonZeroUsize;
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use pyo3::exceptions::{PyConnectionError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use scylla::client::PoolSize;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::OpenSsl010Config;
use scylla::client::session::Session as ScyllaSession;
use scylla::client::session_builder::SessionBuilder;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::Consistency;
use scylla::statement::prepared::PreparedStatement as ScyllaPrepared;
use tokio::runtime::{Handle, Runtime};

use crate::convert::BindMarker;
use crate::errors::{Failure, one_line, prepare_kind, session_kind};
use crate::lifecycle;

/// How often a blocking wait wakes up to let Python handle signals (Ctrl-C).
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// How long stopping a runtime waits for its threads.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);

/// Threads of a session's I/O runtime. Two carry plain text at every rate measured (130k rows/s of 20 kB on 16
/// cores). Over TLS a connection's records are decrypted by the thread that polls it, and two threads capped TLS at
/// 1.8 GB/s there: one thread per connection to a node, as many as the cores allow.
fn io_threads(tls: bool, connections_per_node: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
    if tls {
        connections_per_node.clamp(2, cores.max(2))
    } else {
        2
    }
}

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
    fn start(worker_threads: usize) -> PyResult<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads)
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
                lifecycle::detach(py, || runtime.shutdown_timeout(SHUTDOWN_WAIT));
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
            Python::attach(|py| lifecycle::detach(py, || runtime.shutdown_timeout(SHUTDOWN_WAIT)));
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
        match lifecycle::detach(py, || runtime.handle.block_on(slice)) {
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

/// TLS to the nodes, their certificates verified against the CA in `ca_file` (PEM) and against each node's IP
/// address (the driver's check), or, with `server_name`, against that name instead: the nodes of a Ring share one
/// certificate name (its Service's), as their Pods' addresses are not known when their certificates are made.
fn tls_config(ca_file: &str, server_name: Option<&str>) -> PyResult<OpenSsl010Config> {
    let mut connector = SslConnector::builder(SslMethod::tls_client())
        .map_err(|err| PyConnectionError::new_err(format!("TLS: {err}")))?;
    connector.set_ca_file(ca_file).map_err(|err| {
        PyValueError::new_err(format!(
            "TLS: cannot read the CA certificate {ca_file}: {err}"
        ))
    })?;
    // Whole socket reads rather than a header read and a body read per record: half the syscalls at 20 kB samples.
    connector.set_read_ahead(true);
    // AES-128-GCM first (OpenSSL offers AES-256 first, and Cassandra's BoringSSL takes the client's order): 15 % less
    // cipher work per byte, still TLS 1.3's mandatory suite.
    connector
        .set_ciphersuites("TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256")
        .map_err(|err| PyConnectionError::new_err(format!("TLS: {err}")))?;
    if let Some(name) = server_name {
        connector
            .verify_param_mut()
            .set_host(name)
            .map_err(|err| PyValueError::new_err(format!("TLS: server name {name:?}: {err}")))?;
        // The name is checked instead of the address: only the address mismatch is forgiven, never a bad chain,
        // an expired certificate or another name.
        connector.set_verify_callback(SslVerifyMode::PEER, |verified, context| {
            verified || context.error().as_raw() == X509_V_ERR_IP_ADDRESS_MISMATCH
        });
    }
    Ok(OpenSsl010Config::new(connector))
}

/// OpenSSL's X509_V_ERR_IP_ADDRESS_MISMATCH (x509_vfy.h).
const X509_V_ERR_IP_ADDRESS_MISMATCH: i32 = 64;

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


/// Where a ring is and how to talk to it (`Session`'s arguments, checked).
pub(crate) struct Connect {
    pub hosts: Vec<String>,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<String>,
    pub consistency: Consistency,
    pub request_timeout: Duration,
    pub tls_ca_file: Option<String>,
    /// The name every node's certificate must carry, checked instead of its IP address.
    pub tls_server_name: Option<String>,
    pub local_dc: Option<String>,
    /// Connections to each node: one connection's socket buffers cap what it carries over a long link.
    pub connections_per_node: NonZeroUsize,
}

impl Client {
    /// Connects (GIL released) and registers the client for the exit hook.
    pub fn connect(py: Python<'_>, connect: Connect) -> PyResult<Arc<Self>> {
        // Retries are the data paths' own (`retry::with_backoff`, counted in their stats), not the driver's.
        let profile = ExecutionProfile::builder()
            .consistency(connect.consistency)
            .request_timeout(Some(connect.request_timeout))
            .retry_policy(Arc::new(FallthroughRetryPolicy::new()))
            .build();
        let contact_points: Vec<String> = connect
            .hosts
            .iter()
            .map(|host| contact_point(host, connect.port))
            .collect();
        let mut builder = SessionBuilder::new()
            .known_nodes(&contact_points)
            .default_execution_profile_handle(profile.into_handle())
            .pool_size(PoolSize::PerHost(connect.connections_per_node))
            // Token-aware routing needs keyspaces and tables, not column and UDT details.
            .fetch_full_schema_metadata(false);
        if let Some(ca_file) = &connect.tls_ca_file {
            builder = builder.tls_context(Some(tls_config(ca_file, connect.tls_server_name.as_deref())?));
        }
        if let Some(dc) = &connect.local_dc {
            // The default policy sends requests to this datacenter's nodes only (no failover to remote ones).
            builder = builder.prefer_datacenter(dc.clone());
        }
        match (connect.username, connect.password) {
            (Some(username), Some(password)) => builder = builder.user(username, password),
            (None, None) => {}
            _ => {
                return Err(PyValueError::new_err(
                    "give both username and password, or neither",
                ));
            }
        }

        let runtime = IoRuntime::start(io_threads(
            connect.tls_ca_file.is_some(),
            connect.connections_per_node.get(),
        ))?;
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
        if let Some(dc) = &connect.local_dc {
            check_datacenter(&session, dc)?;
        }
        let client = Arc::new(Client {
            runtime,
            session: Arc::new(session),
            local_dc: connect.local_dc,
        });
        lifecycle::register_client(&client);
        Ok(client)
    }

    /// Prepares `cql` (GIL released), marked idempotent: only reads and plain INSERTs go through this module, so a
    /// retry is always safe.
    pub fn prepare(&self, py: Python<'_>, cql: &str) -> PyResult<ScyllaPrepared> {
        let mut statement = self.block_on(py, self.session.prepare(cql))?.map_err(|err| {
            Failure::new(prepare_kind(&err), format!("cannot prepare {cql:?}: {}", one_line(&err)))
        })?;
        statement.set_is_idempotent(true);
        Ok(statement)
    }
}

/// A statement prepared by `Session.prepare`, with the conversion of each bind marker.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct PreparedStatement {
    pub statement: Arc<ScyllaPrepared>,
    pub markers: Vec<BindMarker>,
}

impl PreparedStatement {
    pub(crate) fn new(statement: ScyllaPrepared) -> Self {
        let markers = statement
            .get_variable_col_specs()
            .iter()
            .map(|spec| BindMarker::new(spec.name(), spec.typ()))
            .collect();
        Self {
            statement: Arc::new(statement),
            markers,
        }
    }
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

pub(crate) fn parse_consistency(name: &str) -> Result<Consistency, String> {
    match name.to_ascii_uppercase().as_str() {
        "ONE" => Ok(Consistency::One),
        "TWO" => Ok(Consistency::Two),
        "LOCAL_ONE" => Ok(Consistency::LocalOne),
        "QUORUM" => Ok(Consistency::Quorum),
        "LOCAL_QUORUM" => Ok(Consistency::LocalQuorum),
        "ALL" => Ok(Consistency::All),
        _ => Err(format!(
            "unknown consistency {name:?}; use ONE, TWO, LOCAL_ONE, QUORUM, LOCAL_QUORUM or ALL"
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consistency_names_are_case_insensitive_and_unknown_ones_are_refused() {
        assert_eq!(parse_consistency("local_quorum"), Ok(Consistency::LocalQuorum));
        assert_eq!(parse_consistency("ONE"), Ok(Consistency::One));
        let refused = parse_consistency("EACH_QUORUM").unwrap_err();
        assert!(refused.contains("EACH_QUORUM"), "{refused}");
    }

    #[test]
    fn contact_points_bracket_ipv6_literals_only() {
        assert_eq!(contact_point("127.0.10.1", 9042), "127.0.10.1:9042");
        assert_eq!(contact_point("::1", 9042), "[::1]:9042");
        assert_eq!(contact_point("[::1]", 9042), "[::1]:9042");
        assert_eq!(contact_point("node-1.ring", 19042), "node-1.ring:19042");
    }

    #[test]
    fn tls_sessions_poll_each_connection_to_a_node_on_a_thread_of_its_own() {
        let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
        assert_eq!(io_threads(false, 8), 2);
        assert_eq!(io_threads(true, 1), 2);
        assert_eq!(io_threads(true, 4), 4.min(cores.max(2)));
        assert_eq!(io_threads(true, 64), cores.max(2));
    }
}
