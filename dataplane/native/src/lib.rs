//! `ringfeed._native`: Ringfeed's data path in Rust (the scylla driver on a tokio runtime).
//!
//! `session` connects and prepares, `convert` turns Python values into CQL values,
//! `writer` is the bulk ingest path, `scan` reads whole columns by token range,
//! `retry` is the policy they share.

mod convert;
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
    module.add("WriteError", module.py().get_type::<writer::WriteError>())?;
    Ok(())
}
