//! `ringfeed._native`: Ringfeed's data path in Rust (the scylla driver on a tokio runtime).
//!
//! `session` connects and prepares, `convert` turns Python values into CQL values,
//! `writer` is the bulk ingest path, `scan` reads whole columns by token range,
//! `fetch` reads and decodes the loader's batches, `retry` is the policy they share, `errors` turns failures into
//! Python exceptions by kind, `lifecycle` stops every native thread before the interpreter exits.

mod convert;
mod errors;
mod fetch;
mod lifecycle;
mod retry;
mod scan;
mod session;
mod writer;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<session::Session>()?;
    module.add_class::<session::PreparedStatement>()?;
    module.add_class::<writer::BulkWriter>()?;
    module.add_class::<fetch::Fetcher>()?;
    module.add_class::<fetch::FetchedBatch>()?;
    module.add_class::<fetch::Buffer>()?;
    module.add_function(wrap_pyfunction!(fetch::decode_image_py, module)?)?;
    errors::register(module)?;
    let close_all = wrap_pyfunction!(lifecycle::close_all_at_exit, module)?;
    module.add_function(close_all.clone())?;
    module
        .py()
        .import("atexit")?
        .call_method1("register", (close_all,))?;
    Ok(())
}
