//! What the loader's data path measures for Prometheus: relaxed atomic counters bumped on the hot path (no lock, no
//! GIL) and read at scrape time. One `LoaderMetrics` belongs to one Python `Loader` and outlives its fetchers (a
//! reconnect or a forked worker makes a new fetcher; the counts go on).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;

/// Upper bounds (seconds) of the fetch latency buckets: a loopback read of a few rows takes 0.2-2 ms, a read over
/// a long link 10-200 ms, a retried one seconds.
const FETCH_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
/// Upper bounds (seconds) of the decode time buckets: one 224² JPEG decodes and resizes in 1-10 ms.
const DECODE_BOUNDS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

/// A Prometheus histogram of durations with fixed buckets.
pub(crate) struct Histogram {
    bounds: &'static [f64],
    /// One per bound and one for +Inf, not cumulative (made cumulative when read).
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = self.bounds.partition_point(|bound| *bound < seconds);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(elapsed.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// (upper bounds, cumulative counts per bound then +Inf, sum in seconds).
    pub(crate) fn snapshot(&self) -> (Vec<f64>, Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                total += count.load(Ordering::Relaxed);
                total
            })
            .collect();
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        (self.bounds.to_vec(), cumulative, sum)
    }
}

/// How often a stage found its input ready when it went for the next piece of work: the slow stage of a pipeline
/// is the one whose successor keeps waiting.
#[derive(Default)]
pub(crate) struct Stage {
    asked: AtomicU64,
    ready: AtomicU64,
}

impl Stage {
    pub(crate) fn record(&self, was_ready: bool) {
        self.asked.fetch_add(1, Ordering::Relaxed);
        if was_ready {
            self.ready.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub(crate) struct PathMetrics {
    /// One read request, sent to answered (its retries included).
    pub(crate) fetch_latency: Histogram,
    /// One image, decoded and resized.
    pub(crate) decode_time: Histogram,
    /// A decoder thread went for its next group of fetched samples.
    pub(crate) decode_input: Stage,
    /// The loader's consumer (the trainer, or the sidecar's feed) asked for its next batch.
    pub(crate) batch_handoff: Stage,
    /// Batches complete and not yet taken: the prefetch queue.
    pub(crate) batches_ready: AtomicI64,
}

impl Default for PathMetrics {
    fn default() -> Self {
        Self {
            fetch_latency: Histogram::new(FETCH_BOUNDS),
            decode_time: Histogram::new(DECODE_BOUNDS),
            decode_input: Stage::default(),
            batch_handoff: Stage::default(),
            batches_ready: AtomicI64::new(0),
        }
    }
}

/// The data path's measurements, shared by the fetchers of one loader; `snapshot()` reads them.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct LoaderMetrics {
    pub(crate) path: Arc<PathMetrics>,
}

#[pymethods]
impl LoaderMetrics {
    #[new]
    fn new() -> Self {
        Self {
            path: Arc::new(PathMetrics::default()),
        }
    }

    /// `fetch_latency_seconds` and `decode_seconds` as (bounds, cumulative counts with +Inf last, sum);
    /// `decode_input` and `batch_handoff` as (asked, found ready); `batches_ready` (the prefetch queue now).
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let path = &self.path;
        let stage = |stage: &Stage| {
            (
                stage.asked.load(Ordering::Relaxed),
                stage.ready.load(Ordering::Relaxed),
            )
        };
        let dict = PyDict::new(py);
        dict.set_item("fetch_latency_seconds", path.fetch_latency.snapshot())?;
        dict.set_item("decode_seconds", path.decode_time.snapshot())?;
        dict.set_item("decode_input", stage(&path.decode_input))?;
        dict.set_item("batch_handoff", stage(&path.batch_handoff))?;
        dict.set_item("batches_ready", path.batches_ready.load(Ordering::Relaxed).max(0))?;
        Ok(dict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_land_in_the_first_bucket_whose_bound_holds_them_and_counts_come_out_cumulative() {
        let histogram = Histogram::new(&[0.001, 0.01]);
        for micros in [500, 1000, 5000, 20_000, 30_000] {
            histogram.observe(Duration::from_micros(micros));
        }
        let (bounds, counts, sum) = histogram.snapshot();
        assert_eq!(bounds, vec![0.001, 0.01]);
        assert_eq!(counts, vec![2, 3, 5]); // ≤ 1 ms (a bound holds its own value), ≤ 10 ms, +Inf
        assert!((sum - 0.0565).abs() < 1e-9);
    }

    #[test]
    fn a_stage_counts_every_request_and_the_ready_ones() {
        let stage = Stage::default();
        for ready in [true, false, true] {
            stage.record(ready);
        }
        assert_eq!(stage.asked.load(Ordering::Relaxed), 3);
        assert_eq!(stage.ready.load(Ordering::Relaxed), 2);
    }
}
