//! Native threads never outlive the interpreter.
//!
//! At interpreter exit (an `atexit` hook, so while Python is still whole) every native wait is told to end, the
//! Python threads inside one are given time to get back to Python, then every I/O runtime and decoder pool of this
//! process is stopped and its threads joined. Objects a forked child inherits are never stopped or dropped there:
//! their threads exist only in the parent.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::client::Client;
use crate::decode::DecoderPool;

/// How long the exit hook waits for Python threads to leave their native waits (each wakes every 100 ms).
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// Set by the exit hook: from then on every native wait ends at once with an error.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Python threads inside a native wait (`InNativeWait` guards).
static IN_NATIVE_WAIT: AtomicUsize = AtomicUsize::new(0);
static CLIENTS: Mutex<Vec<Weak<Client>>> = Mutex::new(Vec::new());
static DECODERS: Mutex<Vec<Weak<DecoderPool>>> = Mutex::new(Vec::new());

/// Counts the current thread as inside a native wait while it lives.
pub(crate) struct InNativeWait(());

impl InNativeWait {
    pub(crate) fn enter() -> Self {
        IN_NATIVE_WAIT.fetch_add(1, Ordering::SeqCst);
        Self(())
    }
}

impl Drop for InNativeWait {
    fn drop(&mut self) {
        IN_NATIVE_WAIT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Fails once the interpreter is exiting.
pub(crate) fn check_not_exiting() -> PyResult<()> {
    if EXITING.load(Ordering::SeqCst) {
        return Err(PyRuntimeError::new_err(
            "the interpreter is exiting: ringfeed's native sessions are closed",
        ));
    }
    Ok(())
}

/// The id of this process, recorded by objects that own threads.
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// True in a forked child of the process that made an object: the object's threads are not here.
pub(crate) fn forked_since(owner: u32) -> bool {
    std::process::id() != owner
}

pub(crate) fn register_client(client: &Arc<Client>) {
    register(&CLIENTS, client);
}

pub(crate) fn register_decoders(pool: &Arc<DecoderPool>) {
    register(&DECODERS, pool);
}

fn register<T>(registry: &Mutex<Vec<Weak<T>>>, item: &Arc<T>) {
    let mut items = registry.lock().unwrap_or_else(PoisonError::into_inner);
    items.retain(|weak| weak.strong_count() > 0);
    items.push(Arc::downgrade(item));
}

fn alive<T>(registry: &Mutex<Vec<Weak<T>>>) -> Vec<Arc<T>> {
    let items = registry.lock().unwrap_or_else(PoisonError::into_inner);
    items.iter().filter_map(Weak::upgrade).collect()
}

/// The exit hook (registered with `atexit` when the module is imported).
#[pyfunction]
#[pyo3(name = "_close_all_at_exit")]
pub(crate) fn close_all_at_exit(py: Python<'_>) {
    EXITING.store(true, Ordering::SeqCst);
    // Without the GIL, so that those threads can take it back and return to Python.
    py.detach(|| {
        let deadline = Instant::now() + DRAIN_WAIT;
        while IN_NATIVE_WAIT.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    for client in alive(&CLIENTS) {
        client.close(py);
    }
    for pool in alive(&DECODERS) {
        py.detach(|| pool.close());
    }
}
