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

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn run<T>(future: impl Future<Output = T>) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
        runtime.block_on(future)
    }

    #[test]
    fn timeouts_overload_and_lost_connections_are_transient_rejections_are_not() {
        let attempt = |error| ExecutionError::LastAttemptError(RequestAttemptError::DbError(error, String::new()));
        assert!(is_transient(&ExecutionError::RequestTimeout(Duration::from_secs(1))));
        assert!(is_transient(&ExecutionError::EmptyPlan));
        assert!(is_transient(&attempt(DbError::Overloaded)));
        assert!(is_transient(&ExecutionError::LastAttemptError(RequestAttemptError::UnableToAllocStreamId)));
        assert!(!is_transient(&attempt(DbError::SyntaxError)));
        assert!(!is_transient(&attempt(DbError::Unauthorized)));
    }

    #[test]
    fn backoff_doubles_from_the_base_up_to_the_cap_with_jitter_in_the_upper_half() {
        for (retry, ceiling) in [(1, BACKOFF_BASE), (2, BACKOFF_BASE * 2), (4, BACKOFF_BASE * 8), (40, BACKOFF_CAP)] {
            for _ in 0..100 {
                let wait = backoff(retry);
                assert!(ceiling / 2 <= wait && wait <= ceiling, "retry {retry}: {wait:?}");
            }
        }
    }

    #[test]
    fn a_transient_failure_is_retried_until_it_passes_and_the_retries_are_counted() {
        let attempts = Cell::new(0);
        let outcome = run(with_backoff(3, |_: &&str| true, |retry| {
            attempts.set(attempts.get() + 1);
            async move { if retry < 2 { Err("timeout") } else { Ok(retry) } }
        }));
        assert_eq!(outcome, Ok((2, 2)));
        assert_eq!(attempts.get(), 3);
    }

    #[test]
    fn retries_stop_at_the_limit_and_at_once_on_a_permanent_failure() {
        let outcome: Result<((), u32), _> = run(with_backoff(2, |_: &&str| true, |_| async { Err("timeout") }));
        assert_eq!(outcome, Err(("timeout", 2)));
        let outcome: Result<((), u32), _> =
            run(with_backoff(5, |err: &&str| *err != "rejected", |_| async { Err("rejected") }));
        assert_eq!(outcome, Err(("rejected", 0)));
    }
}
