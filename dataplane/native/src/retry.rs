//! Retry policy shared by the bulk paths: which failures are transient, how long to wait, and the retry loop.

use std::future::Future;
use std::time::Duration;

use scylla::errors::{DbError, ExecutionError, RequestAttemptError};

const BACKOFF_BASE: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(2);

/// Failures that may pass by themselves: timeouts, overload, unavailable or bootstrapping
/// replicas, broken or missing connections, internal server errors.
pub(crate) fn is_transient(err: &ExecutionError) -> bool {
    match err {
        ExecutionError::RequestTimeout(_)
        | ExecutionError::ConnectionPoolError(_)
        | ExecutionError::EmptyPlan => true,
        ExecutionError::LastAttemptError(attempt) => match attempt {
            RequestAttemptError::BrokenConnectionError(_)
            | RequestAttemptError::UnableToAllocStreamId => true,
            RequestAttemptError::DbError(db_error, _) => matches!(
                db_error,
                DbError::Unavailable { .. }
                    | DbError::Overloaded
                    | DbError::IsBootstrapping
                    | DbError::WriteTimeout { .. }
                    | DbError::ReadTimeout { .. }
                    | DbError::RateLimitReached { .. }
                    | DbError::ServerError
            ),
            _ => false,
        },
        _ => false,
    }
}

/// Exponential backoff (`BACKOFF_BASE` doubling per retry, capped at `BACKOFF_CAP`) with
/// jitter in [half, full] so that the retries of a failed window do not arrive together.
pub(crate) fn backoff(retry: u32) -> Duration {
    let doublings = retry.saturating_sub(1).min(16);
    let ceiling = BACKOFF_BASE.saturating_mul(1 << doublings).min(BACKOFF_CAP);
    ceiling.mul_f64(0.5 + fastrand::f64() / 2.0)
}

/// Runs `attempt` (given the retry number, 0 first) until it succeeds, fails with an error that `transient` rejects,
/// or has failed `max_retries` retries, sleeping `backoff` before each retry; → the value and the retries it took,
/// or the last error and the retries.
pub(crate) async fn with_backoff<T, E, F, Fut>(
    max_retries: u32,
    transient: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<(T, u32), (E, u32)>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut retries = 0;
    loop {
        match attempt(retries).await {
            Ok(value) => return Ok((value, retries)),
            Err(err) if retries < max_retries && transient(&err) => {
                retries += 1;
                tokio::time::sleep(backoff(retries)).await;
            }
            Err(err) => return Err((err, retries)),
        }
    }
}
