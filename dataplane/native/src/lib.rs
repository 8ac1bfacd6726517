//! `ringfeed._native`: Ringfeed's data path in Rust (the scylla driver on a tokio runtime).
//!
//! `client` is the connection every data path shares (runtime, session, prepared statements, retry policy);
//! `session` is the Python class that opens the data paths: `writer` (bulk ingest, values converted by `convert`),
//! `scan` (whole columns by token range) and `fetch` (the loader's batches, put together by `decode` into
//! `buffer`s, measured in `metrics`; random crops drawn by `crop`, fused into the JPEG decode by `jpeg`), both paced by an adaptive `window` of bytes in flight. `errors` turns failures into Python exceptions by kind, `lifecycle` stops every native thread before
//! the interpreter exits.

mod buffer;
mod client;
mod convert;
mod crop;
mod decode;
mod errors;
mod fetch;
mod jpeg;
mod lifecycle;
mod metrics;
mod scan;
mod session;
mod window;
mod writer;

use pyo3::prelude::*;

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<session::Session>()?;
    module.add_class::<client::PreparedStatement>()?;
    module.add_class::<writer::BulkWriter>()?;
    module.add_class::<fetch::Fetcher>()?;
    module.add_class::<fetch::FetchedBatch>()?;
    module.add_class::<buffer::Buffer>()?;
    module.add_class::<metrics::LoaderMetrics>()?;
    module.add_function(wrap_pyfunction!(decode::decode_image_py, module)?)?;
    module.add_function(wrap_pyfunction!(decode::random_crop_box, module)?)?;
    module.add_function(wrap_pyfunction!(decode::image_box_py, module)?)?;
    errors::register(module)?;
    let close_all = wrap_pyfunction!(lifecycle::close_all_at_exit, module)?;
    module.add_function(close_all.clone())?;
    module
        .py()
        .import("atexit")?
        .call_method1("register", (close_all,))?;
    Ok(())
}
