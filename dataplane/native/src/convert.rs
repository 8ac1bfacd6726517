//! Python values -> CQL values, checked against each bind marker's type while the GIL is held,
//! so that a bad value is reported before anything is sent.

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyFloat, PyInt, PyList, PyMemoryView, PyString, PyTuple,
};
use scylla::frame::response::result::{CollectionType, ColumnType, NativeType};
use scylla::value::{Counter, CqlTimestamp, CqlTimeuuid, CqlValue};
use uuid::Uuid;

/// The conversion applied to the values of one bind marker.
#[derive(Clone, Copy)]
enum ValueKind {
    Uuid,
    Timeuuid,
    TinyInt,
    SmallInt,
    Int,
    BigInt,
    Counter,
    Text,
    Ascii,
    Blob,
    Double,
    Float,
    Boolean,
    Timestamp,
    /// Any other CQL type: only None (NULL) can be bound to it.
    Unsupported,
}

impl ValueKind {
    fn of(typ: &ColumnType) -> Self {
        match typ {
            ColumnType::Native(native) => match native {
                NativeType::Uuid => Self::Uuid,
                NativeType::Timeuuid => Self::Timeuuid,
                NativeType::TinyInt => Self::TinyInt,
                NativeType::SmallInt => Self::SmallInt,
                NativeType::Int => Self::Int,
                NativeType::BigInt => Self::BigInt,
                NativeType::Counter => Self::Counter,
                NativeType::Text => Self::Text,
                NativeType::Ascii => Self::Ascii,
                NativeType::Blob => Self::Blob,
                NativeType::Double => Self::Double,
                NativeType::Float => Self::Float,
                NativeType::Boolean => Self::Boolean,
                NativeType::Timestamp => Self::Timestamp,
                _ => Self::Unsupported,
            },
            _ => Self::Unsupported,
        }
    }
}

/// One `?` of a prepared statement: its name, CQL type and how Python values are converted for it.
pub struct BindMarker {
    pub name: String,
    pub type_name: String,
    kind: ValueKind,
}

impl BindMarker {
    pub fn new(name: &str, typ: &ColumnType) -> Self {
        Self {
            name: name.to_owned(),
            type_name: cql_type_name(typ),
            kind: ValueKind::of(typ),
        }
    }
}

/// A row ready to be sent: one value per bind marker (None = NULL) and their payload size in bytes.
pub struct BoundRow {
    pub values: Vec<Option<CqlValue>>,
    pub payload_bytes: u64,
}

/// Why one value could not be converted; turned into a Python exception that names column and row.
enum Problem {
    WrongType(&'static str),
    OutOfRange(&'static str),
    BadValue(String),
    UnsupportedType,
}

/// Converts one row (a tuple or list with one value per bind marker).
pub fn convert_row(
    markers: &[BindMarker],
    row: &Bound<'_, PyAny>,
    row_index: usize,
) -> PyResult<BoundRow> {
    if let Ok(tuple) = row.cast::<PyTuple>() {
        convert_values(markers, tuple.len(), tuple.iter(), row_index)
    } else if let Ok(list) = row.cast::<PyList>() {
        convert_values(markers, list.len(), list.iter(), row_index)
    } else {
        Err(PyTypeError::new_err(format!(
            "row {row_index}: expected a tuple, got {}",
            type_name(row)
        )))
    }
}

fn convert_values<'py>(
    markers: &[BindMarker],
    len: usize,
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    row_index: usize,
) -> PyResult<BoundRow> {
    if len != markers.len() {
        return Err(PyTypeError::new_err(format!(
            "row {row_index}: has {len} values, the statement has {} bind markers",
            markers.len()
        )));
    }
    let mut values = Vec::with_capacity(len);
    let mut payload_bytes = 0;
    for (marker, item) in markers.iter().zip(items) {
        let value = convert_value(marker.kind, &item)
            .map_err(|problem| value_error(marker, row_index, &item, problem))?;
        payload_bytes += value.as_ref().map_or(0, payload_size);
        values.push(value);
    }
    Ok(BoundRow {
        values,
        payload_bytes,
    })
}

fn value_error(
    marker: &BindMarker,
    row_index: usize,
    value: &Bound<'_, PyAny>,
    problem: Problem,
) -> PyErr {
    let context = format!(
        "column '{}' ({}), row {row_index}",
        marker.name, marker.type_name
    );
    match problem {
        Problem::WrongType(expected) => PyTypeError::new_err(format!(
            "{context}: expected {expected}, got {}",
            type_name(value)
        )),
        Problem::OutOfRange(range) => {
            PyOverflowError::new_err(format!("{context}: value out of range for {range}"))
        }
        Problem::BadValue(reason) => PyValueError::new_err(format!("{context}: {reason}")),
        Problem::UnsupportedType => PyTypeError::new_err(format!(
            "{context}: values of this CQL type are not supported yet, only None"
        )),
    }
}

fn convert_value(kind: ValueKind, value: &Bound<'_, PyAny>) -> Result<Option<CqlValue>, Problem> {
    if value.is_none() {
        return Ok(None);
    }
    let converted = match kind {
        ValueKind::Uuid => CqlValue::Uuid(uuid(value)?),
        ValueKind::Timeuuid => {
            let id = uuid(value)?;
            if id.get_version_num() != 1 {
                return Err(Problem::BadValue(
                    "a timeuuid must be a version-1 UUID".into(),
                ));
            }
            CqlValue::Timeuuid(CqlTimeuuid::from(id))
        }
        ValueKind::TinyInt => CqlValue::TinyInt(integer(value, "tinyint")?),
        ValueKind::SmallInt => CqlValue::SmallInt(integer(value, "smallint")?),
        ValueKind::Int => CqlValue::Int(integer(value, "int")?),
        ValueKind::BigInt => CqlValue::BigInt(integer(value, "bigint")?),
        ValueKind::Counter => CqlValue::Counter(Counter(integer(value, "counter")?)),
        ValueKind::Timestamp => CqlValue::Timestamp(CqlTimestamp(integer(value, "timestamp")?)),
        ValueKind::Text => CqlValue::Text(text(value)?),
        ValueKind::Ascii => {
            let text = text(value)?;
            if !text.is_ascii() {
                return Err(Problem::BadValue(
                    "ascii text must contain only ASCII characters".into(),
                ));
            }
            CqlValue::Ascii(text)
        }
        ValueKind::Blob => CqlValue::Blob(blob(value)?),
        ValueKind::Double => CqlValue::Double(real(value)?),
        ValueKind::Float => {
            let real = real(value)?;
            if real.is_finite() && real.abs() > f64::from(f32::MAX) {
                return Err(Problem::OutOfRange("float (32-bit)"));
            }
            CqlValue::Float(real as f32)
        }
        ValueKind::Boolean => match value.cast::<PyBool>() {
            Ok(flag) => CqlValue::Boolean(flag.is_true()),
            Err(_) => return Err(Problem::WrongType("bool")),
        },
        ValueKind::Unsupported => return Err(Problem::UnsupportedType),
    };
    Ok(Some(converted))
}

fn uuid(value: &Bound<'_, PyAny>) -> Result<Uuid, Problem> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        let bytes = bytes.as_bytes();
        return Uuid::from_slice(bytes)
            .map_err(|_| Problem::BadValue(format!("a UUID needs 16 bytes, got {}", bytes.len())));
    }
    value
        .extract::<Uuid>()
        .map_err(|_| Problem::WrongType("uuid.UUID or 16 bytes"))
}

/// Any int-like value (int, numpy integer) but bool, range-checked for the target type.
fn integer<T: TryFrom<i64>>(
    value: &Bound<'_, PyAny>,
    cql_type: &'static str,
) -> Result<T, Problem> {
    if value.is_instance_of::<PyBool>() {
        return Err(Problem::WrongType("int"));
    }
    let wide = value.extract::<i64>().map_err(|err| {
        if err.is_instance_of::<PyOverflowError>(value.py()) {
            Problem::OutOfRange(cql_type)
        } else {
            Problem::WrongType("int")
        }
    })?;
    T::try_from(wide).map_err(|_| Problem::OutOfRange(cql_type))
}

fn real(value: &Bound<'_, PyAny>) -> Result<f64, Problem> {
    if let Ok(float) = value.cast::<PyFloat>() {
        return Ok(float.value());
    }
    if value.is_instance_of::<PyInt>() && !value.is_instance_of::<PyBool>() {
        return value
            .extract::<f64>()
            .map_err(|_| Problem::OutOfRange("double"));
    }
    Err(Problem::WrongType("float or int"))
}

fn text(value: &Bound<'_, PyAny>) -> Result<String, Problem> {
    let string = value
        .cast::<PyString>()
        .map_err(|_| Problem::WrongType("str"))?;
    string
        .to_str()
        .map(str::to_owned)
        .map_err(|err| Problem::BadValue(format!("not encodable as UTF-8: {err}")))
}

fn blob(value: &Bound<'_, PyAny>) -> Result<Vec<u8>, Problem> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        Ok(bytes.as_bytes().to_vec())
    } else if let Ok(array) = value.cast::<PyByteArray>() {
        Ok(array.to_vec())
    } else if value.is_instance_of::<PyMemoryView>() {
        // tobytes() handles every format, stride and layout a memoryview can have.
        let bytes = value
            .call_method0("tobytes")
            .map_err(|err| Problem::BadValue(format!("unreadable memoryview: {err}")))?;
        let bytes = bytes
            .cast::<PyBytes>()
            .map_err(|_| Problem::BadValue("memoryview.tobytes() did not return bytes".into()))?;
        Ok(bytes.as_bytes().to_vec())
    } else {
        Err(Problem::WrongType("bytes, bytearray or memoryview"))
    }
}

/// Size of a value's CQL encoding, without the 4-byte length prefix.
fn payload_size(value: &CqlValue) -> u64 {
    match value {
        CqlValue::Boolean(_) | CqlValue::TinyInt(_) => 1,
        CqlValue::SmallInt(_) => 2,
        CqlValue::Int(_) | CqlValue::Float(_) => 4,
        CqlValue::BigInt(_)
        | CqlValue::Counter(_)
        | CqlValue::Timestamp(_)
        | CqlValue::Double(_) => 8,
        CqlValue::Uuid(_) | CqlValue::Timeuuid(_) => 16,
        CqlValue::Text(text) | CqlValue::Ascii(text) => text.len() as u64,
        CqlValue::Blob(blob) => blob.len() as u64,
        _ => 0,
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |name| name.to_string())
}

/// The CQL spelling of a type, e.g. `bigint`, `frozen<list<text>>`, `map<text, int>`.
pub fn cql_type_name(typ: &ColumnType) -> String {
    match typ {
        ColumnType::Native(native) => native_type_name(native).to_owned(),
        ColumnType::Collection { frozen, typ } => {
            let collection = match typ {
                CollectionType::List(element) => format!("list<{}>", cql_type_name(element)),
                CollectionType::Set(element) => format!("set<{}>", cql_type_name(element)),
                CollectionType::Map(key, value) => {
                    format!("map<{}, {}>", cql_type_name(key), cql_type_name(value))
                }
                _ => "collection".to_owned(),
            };
            frozen_if(*frozen, collection)
        }
        ColumnType::Vector { typ, dimensions } => {
            format!("vector<{}, {dimensions}>", cql_type_name(typ))
        }
        ColumnType::UserDefinedType { frozen, definition } => frozen_if(
            *frozen,
            format!("{}.{}", definition.keyspace, definition.name),
        ),
        ColumnType::Tuple(elements) => {
            let elements: Vec<String> = elements.iter().map(cql_type_name).collect();
            format!("tuple<{}>", elements.join(", "))
        }
        _ => "unknown".to_owned(),
    }
}

fn frozen_if(frozen: bool, name: String) -> String {
    if frozen {
        format!("frozen<{name}>")
    } else {
        name
    }
}

fn native_type_name(native: &NativeType) -> &'static str {
    match native {
        NativeType::Ascii => "ascii",
        NativeType::Boolean => "boolean",
        NativeType::Blob => "blob",
        NativeType::Counter => "counter",
        NativeType::Date => "date",
        NativeType::Decimal => "decimal",
        NativeType::Double => "double",
        NativeType::Duration => "duration",
        NativeType::Float => "float",
        NativeType::Int => "int",
        NativeType::BigInt => "bigint",
        NativeType::Text => "text",
        NativeType::Timestamp => "timestamp",
        NativeType::Inet => "inet",
        NativeType::SmallInt => "smallint",
        NativeType::TinyInt => "tinyint",
        NativeType::Time => "time",
        NativeType::Timeuuid => "timeuuid",
        NativeType::Uuid => "uuid",
        NativeType::Varint => "varint",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cql_type_names_are_spelled_as_in_cql() {
        let text = ColumnType::Native(NativeType::Text);
        let list = ColumnType::Collection {
            frozen: true,
            typ: CollectionType::List(Box::new(text.clone())),
        };
        let map = ColumnType::Collection {
            frozen: false,
            typ: CollectionType::Map(Box::new(text.clone()), Box::new(ColumnType::Native(NativeType::Int))),
        };
        assert_eq!(cql_type_name(&ColumnType::Native(NativeType::BigInt)), "bigint");
        assert_eq!(cql_type_name(&list), "frozen<list<text>>");
        assert_eq!(cql_type_name(&map), "map<text, int>");
        assert_eq!(cql_type_name(&ColumnType::Tuple(vec![text, ColumnType::Native(NativeType::Uuid)])), "tuple<text, uuid>");
        let vector = ColumnType::Vector { typ: Box::new(ColumnType::Native(NativeType::Float)), dimensions: 3 };
        assert_eq!(cql_type_name(&vector), "vector<float, 3>");
    }

    #[test]
    fn bind_markers_convert_by_their_cql_type() {
        assert!(matches!(BindMarker::new("id", &ColumnType::Native(NativeType::Timeuuid)).kind, ValueKind::Timeuuid));
        assert!(matches!(BindMarker::new("d", &ColumnType::Native(NativeType::Date)).kind, ValueKind::Unsupported));
    }

    #[test]
    fn payload_sizes_are_those_of_the_cql_encoding() {
        assert_eq!(payload_size(&CqlValue::Blob(vec![0; 20_000])), 20_000);
        assert_eq!(payload_size(&CqlValue::Text("héllo".into())), 6);
        assert_eq!(payload_size(&CqlValue::BigInt(1)), 8);
        assert_eq!(payload_size(&CqlValue::Uuid(Uuid::nil())), 16);
        assert_eq!(payload_size(&CqlValue::Boolean(true)), 1);
    }
}
