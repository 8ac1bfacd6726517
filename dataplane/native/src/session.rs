//! `Session`, the Python class: a connection to a ring (`client`) and the data paths opened through it.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::client::{Client, Connect, PreparedStatement, parse_consistency};
use crate::decode::{Decode, DecoderPool, RandomCropRanges, fit_of, image_shape};
use crate::fetch::{Fetcher, Statements};
use crate::lifecycle;
use crate::metrics::{LoaderMetrics, PathMetrics};
use crate::scan::{ScanRequest, scan};
use crate::writer::BulkWriter;

/// A connection to a Cassandra ring.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Session {
    client: Arc<Client>,
    /// The decoder threads of this session's image fetchers, started by the first one: the feeds of a sidecar's
    /// local ranks share them, as they share the connections.
    decoders: Mutex<Option<Arc<DecoderPool>>>,
}

impl Session {
    fn decoder_pool(&self, threads: usize, metrics: &Arc<PathMetrics>) -> PyResult<Arc<DecoderPool>> {
        let mut pool = self.decoders.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pool.as_ref() {
            return Ok(Arc::clone(pool));
        }
        let started = DecoderPool::start(threads, Arc::clone(metrics))
            .map_err(|err| PyRuntimeError::new_err(format!("cannot start decoder threads: {err}")))?;
        *pool = Some(Arc::clone(&started));
        Ok(started)
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (hosts, port = 9042, username = None, password = None, consistency = "ONE", request_timeout_ms = 12000, tls_ca_file = None, local_dc = None, connections_per_node = 1, tls_server_name = None))]
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
        connections_per_node: usize,
        tls_server_name: Option<String>,
    ) -> PyResult<Self> {
        if hosts.is_empty() {
            return Err(PyValueError::new_err("hosts is empty"));
        }
        if request_timeout_ms == 0 {
            return Err(PyValueError::new_err("request_timeout_ms must be positive"));
        }
        let connect = Connect {
            hosts,
            port,
            username,
            password,
            consistency: parse_consistency(consistency).map_err(PyValueError::new_err)?,
            request_timeout: Duration::from_millis(request_timeout_ms),
            tls_ca_file,
            tls_server_name,
            local_dc,
            connections_per_node: NonZeroUsize::new(connections_per_node)
                .ok_or_else(|| PyValueError::new_err("connections_per_node must be at least 1"))?,
        };
        Ok(Self {
            client: Client::connect(py, connect)?,
            decoders: Mutex::new(None),
        })
    }

    /// Prepares a statement; its bind markers decide how `BulkWriter.submit` converts values.
    fn prepare(&self, py: Python<'_>, cql: &str) -> PyResult<PreparedStatement> {
        Ok(PreparedStatement::new(self.client.prepare(py, cql)?))
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
                        request_bytes = 524_288, sample_bytes = 0, memory_bytes = 134_217_728, metrics = None,
                        random_crop = None, seed = 0, defer_decode = false))]
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
        memory_bytes: usize,
        metrics: Option<PyRef<'_, LoaderMetrics>>,
        random_crop: Option<RandomCropRanges>,
        seed: u64,
        defer_decode: bool,
    ) -> PyResult<Fetcher> {
        let decode = match (image_size, raw_item_bytes) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give image_size or raw_item_bytes, not both",
                ));
            }
            (Some((height, width)), None) => {
                let shape = image_shape(height, width, channels, fit_of(crop, random_crop, seed)?)
                    .map_err(PyValueError::new_err)?;
                if defer_decode { Decode::Deferred(shape) } else { Decode::Image(shape) }
            }
            (None, Some(0)) => {
                return Err(PyValueError::new_err("raw_item_bytes must be positive"));
            }
            (None, _) if defer_decode => {
                return Err(PyValueError::new_err("defer_decode needs image_size"));
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
        let prepare = |cql: String| -> PyResult<_> {
            let mut statement = self.client.prepare(py, &cql)?;
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
        // Without one given, the fetcher measures for no one (a loader passes its own, kept across fetchers).
        let metrics = metrics.map_or_else(|| Arc::new(PathMetrics::default()), |metrics| Arc::clone(&metrics.path));
        let decoders = match decode {
            Decode::Image(_) => Some(self.decoder_pool(decode_threads, &metrics)?),
            _ => None,
        };
        Fetcher::new(
            Arc::clone(&self.client),
            statements,
            concurrency,
            max_retries,
            decode,
            decoders,
            sample_bytes,
            memory_bytes,
            metrics,
        )
    }

    /// Closes the connections, stops the I/O threads now (waiting up to 2 s for them) and joins the decoder
    /// threads; every later request through this session, its fetchers or its writers fails. Dropping the last
    /// reference does the same.
    fn close(&self, py: Python<'_>) {
        self.client.close(py);
        // Taken out first: joining the decoder threads with the lock held would block a `fetcher` call meanwhile.
        let decoders = self.decoders.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(pool) = decoders {
            lifecycle::detach(py, || pool.close());
        }
    }

    #[pyo3(signature = (concurrency = 64, max_retries = 8))]
    fn writer(&self, concurrency: u32, max_retries: u32) -> PyResult<BulkWriter> {
        BulkWriter::new(Arc::clone(&self.client), concurrency, max_retries)
    }
}
