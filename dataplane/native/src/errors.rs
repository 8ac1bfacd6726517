//! What Python sees when the ring fails: one exception class per kind of failure, so that `ringfeed.errors` turns
//! each into the user-facing error in one place, without reading messages.

use std::fmt::Display;

use pyo3::create_exception;
use pyo3::exceptions::{PyConnectionError, PyRuntimeError};
use pyo3::prelude::*;
use scylla::errors::{
    ConnectionError, ConnectionPoolError, ConnectionSetupRequestErrorKind, DbError, ExecutionError,
    MetadataError, NewSessionError, NextPageError, PrepareError, RequestAttemptError, RequestError,
};

create_exception!(
    ringfeed._native,
    RingError,
    PyRuntimeError,
    "A request to the ring failed (after its retries, where it had some)."
);
create_exception!(
    ringfeed._native,
    Timeout,
    RingError,
    "The ring did not answer in time (client or server timeout, overloaded node)."
);
create_exception!(
    ringfeed._native,
    Rejected,
    RingError,
    "The ring rejected a statement, or answered with other columns than asked (a table or column unknown or changed): retrying cannot help."
);
create_exception!(
    ringfeed._native,
    Unreachable,
    PyConnectionError,
    "No node could be reached, connections broke, or too few replicas are alive."
);
create_exception!(
    ringfeed._native,
    AuthenticationFailed,
    PyConnectionError,
    "The ring refused the credentials (or asked for some and none were given)."
);

/// Registers the exception classes on the module.
pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("RingError", py.get_type::<RingError>())?;
    module.add("Timeout", py.get_type::<Timeout>())?;
    module.add("Rejected", py.get_type::<Rejected>())?;
    module.add("Unreachable", py.get_type::<Unreachable>())?;
    module.add("AuthenticationFailed", py.get_type::<AuthenticationFailed>())?;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Unreachable,
    AuthenticationFailed,
    Timeout,
    Rejected,
    Other,
}

/// A failure on its way from the I/O threads to Python.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    pub kind: Kind,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// The same failure with another message (the kind stays).
    pub(crate) fn with_message(&self, message: impl Into<String>) -> Self {
        Self::new(self.kind, message)
    }

    pub(crate) fn into_py(self) -> PyErr {
        match self.kind {
            Kind::Unreachable => Unreachable::new_err(self.message),
            Kind::AuthenticationFailed => AuthenticationFailed::new_err(self.message),
            Kind::Timeout => Timeout::new_err(self.message),
            Kind::Rejected => Rejected::new_err(self.message),
            Kind::Other => RingError::new_err(self.message),
        }
    }
}

impl From<Failure> for PyErr {
    fn from(failure: Failure) -> Self {
        failure.into_py()
    }
}

/// An error message on one line (some driver messages span several).
pub(crate) fn one_line(err: impl Display) -> String {
    err.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn execution_kind(err: &ExecutionError) -> Kind {
    match err {
        ExecutionError::RequestTimeout(_) => Kind::Timeout,
        ExecutionError::EmptyPlan => Kind::Unreachable,
        ExecutionError::ConnectionPoolError(err) => pool_kind(err),
        ExecutionError::PrepareError(err) => prepare_kind(err),
        ExecutionError::LastAttemptError(err) => attempt_kind(err),
        ExecutionError::MetadataError(err) => metadata_kind(err),
        _ => Kind::Other,
    }
}

pub(crate) fn prepare_kind(err: &PrepareError) -> Kind {
    match err {
        PrepareError::ConnectionPoolError(err) => pool_kind(err),
        PrepareError::AllAttemptsFailed { first_attempt } => attempt_kind(first_attempt),
        _ => Kind::Other,
    }
}

pub(crate) fn session_kind(err: &NewSessionError) -> Kind {
    match err {
        NewSessionError::MetadataError(err) => metadata_kind(err),
        NewSessionError::FailedToResolveAnyHostname(_) => Kind::Unreachable,
        _ => Kind::Other,
    }
}

pub(crate) fn next_page_kind(err: &NextPageError) -> Kind {
    match err {
        NextPageError::RequestFailure(err) => request_kind(err),
        _ => Kind::Other,
    }
}

fn request_kind(err: &RequestError) -> Kind {
    match err {
        RequestError::RequestTimeout(_) => Kind::Timeout,
        RequestError::EmptyPlan => Kind::Unreachable,
        RequestError::ConnectionPoolError(err) => pool_kind(err),
        RequestError::LastAttemptError(err) => attempt_kind(err),
        _ => Kind::Other,
    }
}

fn metadata_kind(err: &MetadataError) -> Kind {
    match err {
        MetadataError::ConnectionPoolError(err) => pool_kind(err),
        _ => Kind::Other,
    }
}

fn pool_kind(err: &ConnectionPoolError) -> Kind {
    match err {
        ConnectionPoolError::Broken {
            last_connection_error,
        } => connection_kind(last_connection_error),
        _ => Kind::Unreachable,
    }
}

fn connection_kind(err: &ConnectionError) -> Kind {
    let ConnectionError::ConnectionSetupRequestError(setup) = err else {
        return Kind::Unreachable;
    };
    match &setup.error {
        ConnectionSetupRequestErrorKind::DbError(db_error, _) => match db_kind(db_error) {
            Kind::AuthenticationFailed => Kind::AuthenticationFailed,
            _ => Kind::Unreachable,
        },
        ConnectionSetupRequestErrorKind::MissingAuthentication
        | ConnectionSetupRequestErrorKind::StartAuthSessionError(_)
        | ConnectionSetupRequestErrorKind::AuthChallengeEvaluationError(_)
        | ConnectionSetupRequestErrorKind::AuthFinishError(_) => Kind::AuthenticationFailed,
        _ => Kind::Unreachable,
    }
}

fn attempt_kind(err: &RequestAttemptError) -> Kind {
    match err {
        RequestAttemptError::BrokenConnectionError(_) | RequestAttemptError::UnableToAllocStreamId => {
            Kind::Unreachable
        }
        RequestAttemptError::DbError(db_error, _) => db_kind(db_error),
        _ => Kind::Other,
    }
}

fn db_kind(err: &DbError) -> Kind {
    match err {
        DbError::Unavailable { .. } | DbError::IsBootstrapping => Kind::Unreachable,
        DbError::ReadTimeout { .. } | DbError::WriteTimeout { .. } | DbError::Overloaded => Kind::Timeout,
        DbError::AuthenticationError | DbError::Unauthorized => Kind::AuthenticationFailed,
        DbError::SyntaxError | DbError::Invalid | DbError::ConfigError | DbError::AlreadyExists { .. } => {
            Kind::Rejected
        }
        _ => Kind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_joins_a_message_spanning_lines() {
        assert_eq!(one_line("cannot connect:\n  node 1:\tdown "), "cannot connect: node 1: down");
    }

    #[test]
    fn database_errors_map_to_the_kinds_python_sees() {
        let cases = [
            (DbError::Overloaded, Kind::Timeout),
            (DbError::IsBootstrapping, Kind::Unreachable),
            (DbError::Unauthorized, Kind::AuthenticationFailed),
            (DbError::Invalid, Kind::Rejected),
            (DbError::TruncateError, Kind::Other),
        ];
        for (error, kind) in cases {
            assert_eq!(db_kind(&error), kind, "{error:?}");
        }
        assert_eq!(execution_kind(&ExecutionError::EmptyPlan), Kind::Unreachable);
    }
}
