//! Batch buffers: owned bytes that Python reads through the buffer protocol without a copy, pooled for reuse.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::{PyErr, ffi};

/// An owned byte buffer that Python sees through the buffer protocol (zero-copy `numpy.frombuffer`). A batch's
/// buffer goes back to its fetcher's pool when Python lets go of it.
#[pyclass(module = "ringfeed._native", frozen)]
pub struct Buffer {
    bytes: Vec<u8>,
    pool: Option<Arc<BufferPool>>,
}

impl Buffer {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Self { bytes, pool: None }
    }

    /// A buffer that returns to `pool` when Python lets go of it.
    pub(crate) fn pooled(bytes: Vec<u8>, pool: &Arc<BufferPool>) -> Self {
        Self {
            bytes,
            pool: Some(Arc::clone(pool)),
        }
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
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
    /// Bytes (of capacity) the released buffers kept may hold in all.
    keep_bytes: usize,
    /// Buffers handed out that had to be allocated or grown (none free was large enough).
    allocated: AtomicU64,
}

impl BufferPool {
    /// A pool that keeps released buffers up to `keep_bytes` of them.
    pub(crate) fn new(keep_bytes: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            keep_bytes,
            allocated: AtomicU64::new(0),
        }
    }

    /// Buffers handed out so far that were allocated or grown rather than reused as they were.
    pub(crate) fn allocated(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// A buffer of `len` initialised bytes (their values are stale).
    pub(crate) fn take_filled(&self, len: usize) -> Vec<u8> {
        let mut buffer = self.take(len);
        if buffer.len() >= len {
            buffer.truncate(len);
        } else {
            buffer.resize(len, 0);
        }
        buffer
    }

    /// An empty buffer with room for `capacity` bytes.
    pub(crate) fn take_empty(&self, capacity: usize) -> Vec<u8> {
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
        let buffer = chosen.map(|i| free.swap_remove(i)).unwrap_or_default();
        if buffer.capacity() < capacity {
            self.allocated.fetch_add(1, Ordering::Relaxed);
        }
        buffer
    }

    /// Keeps a released buffer; when it does not fit, it replaces the smallest one if that makes room.
    fn give(&self, buffer: Vec<u8>) {
        let mut free = self.free.lock().expect("no panics while locked");
        let kept: usize = free.iter().map(Vec::capacity).sum();
        if kept + buffer.capacity() <= self.keep_bytes {
            free.push(buffer);
        } else if let Some(smallest) = (0..free.len()).min_by_key(|&i| free[i].capacity())
            && free[smallest].capacity() < buffer.capacity()
            && kept - free[smallest].capacity() + buffer.capacity() <= self.keep_bytes
        {
            free[smallest] = buffer;
        }
    }
}

/// Little-endian bytes of `values` (numpy's native order on the platforms Ringfeed runs on).
pub(crate) fn le_bytes<T: Copy, const N: usize>(values: &[T], to_bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&value| to_bytes(value)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_buffer_is_handed_out_again_smallest_fitting_first() {
        let pool = BufferPool::new(1100);
        pool.give(Vec::with_capacity(1000));
        pool.give(Vec::with_capacity(100));
        assert!(pool.take_empty(50).capacity() >= 100);
        assert!(pool.take_empty(50).capacity() >= 1000, "the larger one is left");
        assert_eq!(pool.allocated(), 0);
        assert_eq!(pool.take_empty(50).capacity(), 50, "the pool is empty: a fresh buffer");
        assert_eq!(pool.allocated(), 1);
    }

    #[test]
    fn a_full_pool_keeps_the_largest_buffers_within_its_bytes() {
        let pool = BufferPool::new(520);
        pool.give(Vec::with_capacity(10));
        pool.give(Vec::with_capacity(500));
        pool.give(Vec::with_capacity(20)); // replaces the 10
        pool.give(Vec::with_capacity(600)); // fits nowhere
        assert_eq!(pool.take_filled(30).capacity(), 500);
        assert_eq!(pool.take_filled(15).capacity(), 20);
        assert!(pool.free.lock().expect("no panics while locked").is_empty());
    }

    #[test]
    fn filled_buffers_have_the_asked_length() {
        let pool = BufferPool::new(64);
        pool.give(vec![7; 64]);
        assert_eq!(pool.take_filled(16).len(), 16);
        assert_eq!(pool.take_filled(100).len(), 100);
    }

    #[test]
    fn little_endian_bytes_of_integers() {
        assert_eq!(le_bytes(&[1i32, -1], i32::to_le_bytes), [1, 0, 0, 0, 255, 255, 255, 255]);
        assert_eq!(le_bytes(&[258i64], i64::to_le_bytes), [2, 1, 0, 0, 0, 0, 0, 0]);
    }
}
