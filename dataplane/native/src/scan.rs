//! `Session.scan`: a whole table read by token ranges into columnar buffers.
//!
//! The Murmur3 ring is cut into slices read concurrently, each paged, and appended in token order,
//! so the result's row order is the table's token order whatever the ring's topology. Each column
//! becomes one contiguous buffer (text: dictionary codes), a few bytes per row instead of a Python
//! object per value.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::{StreamExt, stream};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use scylla::client::pager::NextRowError;
use scylla::client::session::Session as ScyllaSession;
use scylla::errors::PagerExecutionError;
use scylla::frame::response::result::{ColumnType, NativeType};
use scylla::statement::prepared::PreparedStatement as ScyllaPrepared;
use scylla::value::{CqlValue, Row};

use crate::buffer::le_bytes;
use crate::client::Client;
use crate::client::retry::with_backoff;
use crate::errors::{Failure, Kind, next_page_kind, one_line, prepare_kind};

/// What to read and how hard to push.
pub(crate) struct ScanRequest {
    pub keyspace: String,
    pub table: String,
    pub partition_key: Vec<String>,
    pub columns: Vec<String>,
    pub slices: u32,
    pub concurrency: u32,
    pub page_size: i32,
    pub max_retries: u32,
}

/// Reads every row of the table; returns `{column: (kind, values, nulls, dictionary)}`.
pub(crate) fn scan<'py>(
    py: Python<'py>,
    client: &Client,
    request: ScanRequest,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    request.check().map_err(PyValueError::new_err)?;
    let token = format!("token({})", request.partition_key.join(", "));
    let cql = format!(
        "SELECT {} FROM {}.{} WHERE {token} >= ? AND {token} <= ?",
        request.columns.join(", "),
        request.keyspace,
        request.table
    );
    let mut statement = client.prepare(py, &cql)?;
    statement.set_page_size(request.page_size);
    let kinds = statement
        .get_current_result_set_col_specs()
        .get()
        .iter()
        .map(|spec| {
            ColumnKind::of(spec.typ()).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "column {} has a type scan does not read: {:?}",
                    spec.name(),
                    spec.typ()
                ))
            })
        })
        .collect::<PyResult<Vec<_>>>()?;

    let rows_read = Arc::new(AtomicU64::new(0));
    let work = read_all(
        Arc::clone(&client.session),
        Arc::new(statement),
        kinds,
        token_slices(request.slices),
        request.concurrency as usize,
        request.max_retries,
        Arc::clone(&rows_read),
    );
    let mut reported = u64::MAX;
    let columns = client.block_on_reporting(py, work, |_| {
        let rows = rows_read.load(Ordering::Relaxed);
        if let Some(callback) = &progress
            && rows != reported
        {
            reported = rows;
            callback.call1((rows,))?;
        }
        Ok(())
    })??;

    let result = PyDict::new(py);
    for (name, column) in request.columns.iter().zip(columns) {
        result.set_item(name, column.into_py(py)?)?;
    }
    Ok(result)
}

impl ScanRequest {
    /// Why the request cannot be read, if it cannot.
    fn check(&self) -> Result<(), String> {
        if self.slices == 0 || self.concurrency == 0 || self.page_size <= 0 {
            return Err("slices, concurrency and page_size must be positive".to_string());
        }
        if self.partition_key.is_empty() || self.columns.is_empty() {
            return Err("partition_key and columns must not be empty".to_string());
        }
        let names = [&self.keyspace, &self.table]
            .into_iter()
            .chain(&self.partition_key)
            .chain(&self.columns);
        for name in names {
            let mut chars = name.chars();
            let plain = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !plain {
                return Err(format!("{name:?} is not a plain CQL identifier"));
            }
        }
        Ok(())
    }
}

/// Cuts the Murmur3 token range into `count` disjoint closed intervals covering it exactly.
fn token_slices(count: u32) -> Vec<(i64, i64)> {
    let count = i128::from(count);
    let (min, max) = (i128::from(i64::MIN), i128::from(i64::MAX));
    let width = (max - min + 1) / count;
    (0..count)
        .map(|i| {
            let low = min + i * width;
            let high = if i == count - 1 { max } else { low + width - 1 };
            (low as i64, high as i64)
        })
        .collect()
}

/// Reads the slices with `concurrency` in flight and appends them in token order.
async fn read_all(
    session: Arc<ScyllaSession>,
    statement: Arc<ScyllaPrepared>,
    kinds: Vec<ColumnKind>,
    slices: Vec<(i64, i64)>,
    concurrency: usize,
    max_retries: u32,
    rows_read: Arc<AtomicU64>,
) -> PyResult<Vec<Column>> {
    let mut merged: Vec<Column> = kinds.iter().map(|&kind| Column::new(kind)).collect();
    let mut slice_results = stream::iter(slices)
        .map(|bounds| {
            tokio::spawn(read_slice(
                Arc::clone(&session),
                Arc::clone(&statement),
                kinds.clone(),
                bounds,
                max_retries,
            ))
        })
        .buffered(concurrency);
    while let Some(joined) = slice_results.next().await {
        let columns = joined
            .map_err(|err| PyRuntimeError::new_err(format!("scan task failed: {err}")))?
            .map_err(Failure::into_py)?;
        let rows = columns.first().map_or(0, Column::len);
        for (into, from) in merged.iter_mut().zip(columns) {
            into.append(from);
        }
        rows_read.fetch_add(rows as u64, Ordering::Relaxed);
    }
    Ok(merged)
}

/// Why one attempt at a slice failed.
enum SliceError {
    /// The ring did not answer as hoped (timeouts, unavailable replicas, lost connections): retry.
    Transient(Failure),
    /// The data does not fit the columns: retrying cannot help.
    Permanent(Failure),
}

impl SliceError {
    fn permanent(message: String) -> Self {
        Self::Permanent(Failure::new(Kind::Other, message))
    }
}

impl From<PagerExecutionError> for SliceError {
    fn from(err: PagerExecutionError) -> Self {
        match &err {
            PagerExecutionError::NextPageError(page) => {
                Self::Transient(Failure::new(next_page_kind(page), one_line(&err)))
            }
            PagerExecutionError::PrepareError(prepare) => {
                Self::Permanent(Failure::new(prepare_kind(prepare), one_line(&err)))
            }
            _ => Self::permanent(one_line(&err)),
        }
    }
}

impl From<NextRowError> for SliceError {
    fn from(err: NextRowError) -> Self {
        match &err {
            NextRowError::NextPageError(page) => {
                Self::Transient(Failure::new(next_page_kind(page), one_line(&err)))
            }
            _ => Self::permanent(one_line(&err)),
        }
    }
}

/// Reads one token slice, starting it over after a transient failure (reads are idempotent).
async fn read_slice(
    session: Arc<ScyllaSession>,
    statement: Arc<ScyllaPrepared>,
    kinds: Vec<ColumnKind>,
    (low, high): (i64, i64),
    max_retries: u32,
) -> Result<Vec<Column>, Failure> {
    let transient = |err: &SliceError| matches!(err, SliceError::Transient(_));
    match with_backoff(max_retries, transient, |_| {
        try_read_slice(&session, &statement, &kinds, low, high)
    })
    .await
    {
        Ok((columns, _)) => Ok(columns),
        Err((SliceError::Transient(err), retries)) => Err(err.with_message(format!(
            "token range [{low}, {high}] failed after {retries} retries: {}",
            err.message
        ))),
        Err((SliceError::Permanent(err), _)) => Err(err),
    }
}

async fn try_read_slice(
    session: &ScyllaSession,
    statement: &ScyllaPrepared,
    kinds: &[ColumnKind],
    low: i64,
    high: i64,
) -> Result<Vec<Column>, SliceError> {
    let mut columns: Vec<Column> = kinds.iter().map(|&kind| Column::new(kind)).collect();
    let mut rows = session
        .execute_iter(statement.clone(), (low, high))
        .await?
        .rows_stream::<Row>()
        .map_err(|err| SliceError::permanent(one_line(err)))?;
    while let Some(row) = rows.next().await {
        for (column, value) in columns.iter_mut().zip(row?.columns) {
            column.push(value).map_err(SliceError::permanent)?;
        }
    }
    Ok(columns)
}

/// How a CQL type is stored column-wise.
#[derive(Clone, Copy)]
enum ColumnKind {
    Uuid,
    Int64,
    Float64,
    Bool,
    Text,
}

impl ColumnKind {
    fn of(typ: &ColumnType) -> Option<Self> {
        let ColumnType::Native(native) = typ else {
            return None;
        };
        Some(match native {
            NativeType::Uuid | NativeType::Timeuuid => Self::Uuid,
            NativeType::TinyInt
            | NativeType::SmallInt
            | NativeType::Int
            | NativeType::BigInt
            | NativeType::Counter => Self::Int64,
            NativeType::Float | NativeType::Double => Self::Float64,
            NativeType::Boolean => Self::Bool,
            NativeType::Text | NativeType::Ascii => Self::Text,
            _ => return None,
        })
    }
}

enum Values {
    /// 16 bytes per row, as stored (big-endian).
    Uuid(Vec<u8>),
    Int64(Vec<i64>),
    Float64(Vec<f64>),
    Bool(Vec<u8>),
    /// Dictionary-encoded: a code per row (-1: null) into `values`, in order of first appearance.
    Text {
        codes: Vec<i32>,
        values: Vec<String>,
        index: HashMap<String, i32>,
    },
}

/// One column of the rows read so far.
struct Column {
    values: Values,
    /// 1 where the value is null (the value slot then holds zero); None while there is none.
    nulls: Option<Vec<u8>>,
    len: usize,
}

impl Column {
    fn new(kind: ColumnKind) -> Self {
        let values = match kind {
            ColumnKind::Uuid => Values::Uuid(Vec::new()),
            ColumnKind::Int64 => Values::Int64(Vec::new()),
            ColumnKind::Float64 => Values::Float64(Vec::new()),
            ColumnKind::Bool => Values::Bool(Vec::new()),
            ColumnKind::Text => Values::Text {
                codes: Vec::new(),
                values: Vec::new(),
                index: HashMap::new(),
            },
        };
        Self {
            values,
            nulls: None,
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, value: Option<CqlValue>) -> Result<(), String> {
        let is_null = value.is_none();
        match (&mut self.values, value) {
            (Values::Uuid(v), None) => v.extend_from_slice(&[0; 16]),
            (Values::Uuid(v), Some(CqlValue::Uuid(u))) => v.extend_from_slice(u.as_bytes()),
            (Values::Uuid(v), Some(CqlValue::Timeuuid(u))) => v.extend_from_slice(u.as_bytes()),
            (Values::Int64(v), None) => v.push(0),
            (Values::Int64(v), Some(CqlValue::TinyInt(i))) => v.push(i64::from(i)),
            (Values::Int64(v), Some(CqlValue::SmallInt(i))) => v.push(i64::from(i)),
            (Values::Int64(v), Some(CqlValue::Int(i))) => v.push(i64::from(i)),
            (Values::Int64(v), Some(CqlValue::BigInt(i))) => v.push(i),
            (Values::Int64(v), Some(CqlValue::Counter(c))) => v.push(c.0),
            (Values::Float64(v), None) => v.push(0.0),
            (Values::Float64(v), Some(CqlValue::Double(x))) => v.push(x),
            (Values::Float64(v), Some(CqlValue::Float(x))) => v.push(f64::from(x)),
            (Values::Bool(v), None) => v.push(0),
            (Values::Bool(v), Some(CqlValue::Boolean(b))) => v.push(u8::from(b)),
            (Values::Text { codes, .. }, None) => codes.push(-1),
            (
                Values::Text {
                    codes,
                    values,
                    index,
                },
                Some(CqlValue::Text(s) | CqlValue::Ascii(s)),
            ) => codes.push(intern(values, index, s)),
            (_, Some(other)) => {
                return Err(format!("unexpected value {other:?} in a scanned column"));
            }
        }
        if is_null && self.nulls.is_none() {
            self.nulls = Some(vec![0; self.len]);
        }
        if let Some(nulls) = &mut self.nulls {
            nulls.push(u8::from(is_null));
        }
        self.len += 1;
        Ok(())
    }

    /// Appends `other`'s rows (same kind); text codes are translated into this column's dictionary.
    fn append(&mut self, other: Column) {
        match (&mut self.nulls, &other.nulls) {
            (None, None) => {}
            (None, Some(from)) => {
                let mut nulls = vec![0; self.len];
                nulls.extend_from_slice(from);
                self.nulls = Some(nulls);
            }
            (Some(into), None) => into.resize(self.len + other.len, 0),
            (Some(into), Some(from)) => into.extend_from_slice(from),
        }
        match (&mut self.values, other.values) {
            (Values::Uuid(into), Values::Uuid(from)) | (Values::Bool(into), Values::Bool(from)) => {
                into.extend_from_slice(&from)
            }
            (Values::Int64(into), Values::Int64(from)) => into.extend_from_slice(&from),
            (Values::Float64(into), Values::Float64(from)) => into.extend_from_slice(&from),
            (
                Values::Text {
                    codes,
                    values,
                    index,
                },
                Values::Text {
                    codes: from_codes,
                    values: from_values,
                    ..
                },
            ) => {
                let translate: Vec<i32> = from_values
                    .into_iter()
                    .map(|value| intern(values, index, value))
                    .collect();
                codes.extend(from_codes.into_iter().map(|code| {
                    if code < 0 {
                        code
                    } else {
                        translate[code as usize]
                    }
                }));
            }
            _ => unreachable!("slices of one scan have the same column kinds"),
        }
        self.len += other.len;
    }

    /// `(kind, values, nulls or None, dictionary or None)`; buffers are little-endian.
    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let nulls = self.nulls.map(|nulls| PyBytes::new(py, &nulls));
        let (kind, data, dictionary) = match self.values {
            Values::Uuid(v) => ("uuid", PyBytes::new(py, &v), None),
            Values::Int64(v) => (
                "int64",
                PyBytes::new(py, &le_bytes(&v, |x| x.to_le_bytes())),
                None,
            ),
            Values::Float64(v) => (
                "float64",
                PyBytes::new(py, &le_bytes(&v, |x| x.to_le_bytes())),
                None,
            ),
            Values::Bool(v) => ("bool", PyBytes::new(py, &v), None),
            Values::Text { codes, values, .. } => (
                "text",
                PyBytes::new(py, &le_bytes(&codes, |x| x.to_le_bytes())),
                Some(PyList::new(py, values)?),
            ),
        };
        PyTuple::new(
            py,
            [
                kind.into_pyobject(py)?.into_any(),
                data.into_any(),
                nulls.into_pyobject(py)?.into_any(),
                dictionary.into_pyobject(py)?.into_any(),
            ],
        )
    }
}

fn intern(values: &mut Vec<String>, index: &mut HashMap<String, i32>, value: String) -> i32 {
    if let Some(&code) = index.get(&value) {
        return code;
    }
    let code = values.len() as i32;
    index.insert(value.clone(), code);
    values.push(value);
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_slices_cover_the_ring_exactly_once_in_order() {
        for count in [1, 3, 256] {
            let slices = token_slices(count);
            assert_eq!(slices.len(), count as usize);
            assert_eq!(slices[0].0, i64::MIN);
            assert_eq!(slices.last().expect("one at least").1, i64::MAX);
            for pair in slices.windows(2) {
                assert_eq!(pair[0].1.checked_add(1), Some(pair[1].0), "adjacent, disjoint");
            }
        }
    }

    #[test]
    fn text_columns_are_dictionary_encoded_across_appended_slices() {
        let mut first = Column::new(ColumnKind::Text);
        for value in [Some("b"), None, Some("a")] {
            first.push(value.map(|v| CqlValue::Text(v.into()))).expect("text");
        }
        let mut second = Column::new(ColumnKind::Text);
        for value in ["a", "c", "a"] {
            second.push(Some(CqlValue::Text(value.into()))).expect("text");
        }
        first.append(second);
        let Values::Text { codes, values, .. } = &first.values else { unreachable!() };
        assert_eq!(values, &["b", "a", "c"]);
        assert_eq!(codes, &[0, -1, 1, 1, 2, 1]);
        assert_eq!(first.nulls.as_deref(), Some(&[0, 1, 0, 0, 0, 0][..]));
        assert_eq!(first.len(), 6);
    }

    #[test]
    fn integers_widen_to_int64_and_other_values_are_refused() {
        let mut column = Column::new(ColumnKind::Int64);
        column.push(Some(CqlValue::SmallInt(-3))).expect("an int");
        column.push(Some(CqlValue::BigInt(1 << 40))).expect("an int");
        assert!(column.push(Some(CqlValue::Text("x".into()))).is_err());
        let Values::Int64(values) = &column.values else { unreachable!() };
        assert_eq!(values, &[-3, 1 << 40]);
        assert!(column.nulls.is_none(), "no null seen: no null mask");
    }

    #[test]
    fn only_plain_identifiers_are_accepted() {
        let request = |table: &str| ScanRequest {
            keyspace: "ks".into(),
            table: table.into(),
            partition_key: vec!["uuid".into()],
            columns: vec!["label".into()],
            slices: 4,
            concurrency: 2,
            page_size: 100,
            max_retries: 0,
        };
        assert!(request("data_by_uuid").check().is_ok());
        assert!(request("t; DROP TABLE x").check().is_err());
        assert!(request("1table").check().is_err());
    }
}
