//! Native threads never outlive the interpreter.
//!
//! At interpreter exit (an `atexit` hook, so while Python is still whole) every native wait is told to end, the
//! Python threads inside one are given time to get back to Python, then every I/O runtime and decoder pool of this
//! process is stopped and its threads joined. Objects a forked child inherits are never stopped or dropped there:
//! their threads exist only in the parent.
//!
//! Every call that releases the GIL goes through [`detach`]. Once the hook has run, a thread coming back from native
//! code never takes the GIL again: CPython 3.11-3.13 end a daemon thread that takes it during finalisation with
//! `pthread_exit`, a forced unwind through this extension's Rust frames, which the wheels' unwinder (LLVM's libunwind,
//! linked by zig) turns into a crash. Such a thread sleeps until the process ends, as CPython 3.14 does itself.

use std::cell::Cell;
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
/// Threads past `detach`'s exit check on their way back to the GIL: the hook waits for them to get there.
static RETURNING: AtomicUsize = AtomicUsize::new(0);
static CLIENTS: Mutex<Vec<Weak<Client>>> = Mutex::new(Vec::new());
static DECODERS: Mutex<Vec<Weak<DecoderPool>>> = Mutex::new(Vec::new());

thread_local! {
    /// True on the thread running the exit hook: the one thread that may take the GIL back after it.
    static RUNS_EXIT_HOOK: Cell<bool> = const { Cell::new(false) };
    /// This thread's `InNativeWait` guards: a thread that stops in `detach` gives its share back.
    static WAITS_HERE: Cell<usize> = const { Cell::new(0) };
}

/// Counts the current thread as inside a native wait while it lives.
pub(crate) struct InNativeWait(());

impl InNativeWait {
    pub(crate) fn enter() -> Self {
        IN_NATIVE_WAIT.fetch_add(1, Ordering::SeqCst);
        WAITS_HERE.with(|waits| waits.set(waits.get() + 1));
        Self(())
    }
}

impl Drop for InNativeWait {
    fn drop(&mut self) {
        WAITS_HERE.with(|waits| waits.set(waits.get() - 1));
        IN_NATIVE_WAIT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `work` with the GIL released, then takes it back, unless the interpreter is exiting and this thread is not
/// the one exiting it: then the thread sleeps until the process ends (module documentation).
pub(crate) fn detach<T: Send>(py: Python<'_>, work: impl FnOnce() -> T + Send) -> T {
    let output = py.detach(|| {
        let output = work();
        // With the hook's store and load of EXITING and RETURNING in the other order, one of the two sees the other.
        RETURNING.fetch_add(1, Ordering::SeqCst);
        if EXITING.load(Ordering::SeqCst) && !RUNS_EXIT_HOOK.with(Cell::get) {
            RETURNING.fetch_sub(1, Ordering::SeqCst);
            IN_NATIVE_WAIT.fetch_sub(WAITS_HERE.with(Cell::get), Ordering::SeqCst);
            loop {
                std::thread::park();
            }
        }
        output
    });
    RETURNING.fetch_sub(1, Ordering::SeqCst);
    output
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
    RUNS_EXIT_HOOK.with(|runs| runs.set(true));
    EXITING.store(true, Ordering::SeqCst);
    // Without the GIL, so that the threads inside a native wait, and those already past `detach`'s check, can take
    // it back and return to Python.
    detach(py, || {
        let deadline = Instant::now() + DRAIN_WAIT;
        while (IN_NATIVE_WAIT.load(Ordering::SeqCst) > 0 || RETURNING.load(Ordering::SeqCst) > 0)
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    for client in alive(&CLIENTS) {
        client.close(py);
    }
    for pool in alive(&DECODERS) {
        detach(py, || pool.close());
    }
}
