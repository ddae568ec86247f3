//! Bounded retry (R§11.4): one [`Retrier`] per operation tracks its overall deadline,
//! the backoff between attempts (exponential with jitter) and what the last attempt
//! ran into, so that giving up produces an error that says why.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::error::ClientError;

/// First backoff after a failed attempt.
pub const BACKOFF_INITIAL_MS: u64 = 1;
/// Backoffs double up to this.
pub const BACKOFF_MAX_MS: u64 = 256;
/// Longest wait a server's RETRY may ask for; longer requests are capped, so a
/// confused server cannot park a client.
pub const RETRY_DELAY_MAX_MS: u64 = 5_000;

const _: () = assert!(BACKOFF_INITIAL_MS > 0 && BACKOFF_INITIAL_MS <= BACKOFF_MAX_MS);

/// The retry state of one operation.
#[derive(Debug)]
pub(crate) struct Retrier {
    start: Instant,
    deadline: Instant,
    backoff_ms: u64,
    last: String,
    /// How long NO_SPACE answers are retried from the first one.
    no_space_patience: Duration,
    /// When this operation first heard NO_SPACE.
    no_space_since: Option<Instant>,
}

impl Retrier {
    /// A retrier for an operation that may take `total`.
    pub(crate) fn new(total: Duration) -> Self {
        let start = Instant::now();
        Self {
            start,
            deadline: start + total,
            backoff_ms: BACKOFF_INITIAL_MS,
            last: String::from("nothing was attempted"),
            no_space_patience: total,
            no_space_since: None,
        }
    }

    /// The same retrier, giving up on a full log after `patience` of NO_SPACE
    /// answers ([`crate::ClientOptions::no_space_patience`]; without this call,
    /// NO_SPACE is retried until the operation deadline).
    pub(crate) fn with_no_space_patience(mut self, patience: Duration) -> Self {
        self.no_space_patience = patience;
        self
    }

    /// Records a NO_SPACE answer from the master at `server`: the error to give up
    /// with once the operation has heard NO_SPACE for the whole patience, counted
    /// from the first one, or `None` to back off and try again. The wait is bounded
    /// from the first refusal, not from the last, so that a log which keeps
    /// refusing this write while taking smaller ones cannot hold it until the
    /// operation deadline.
    pub(crate) fn no_space(&mut self, server: &str) -> Option<ClientError> {
        let now = Instant::now();
        let first = *self.no_space_since.get_or_insert(now);
        let waited = now.saturating_duration_since(first);
        (waited >= self.no_space_patience).then(|| ClientError::NoSpace {
            server: server.to_string(),
            waited,
        })
    }

    /// The deadline for the next attempt (`per_attempt`, cut to what is left), or
    /// `None` when the operation's time is up.
    pub(crate) fn attempt_deadline(&self, per_attempt: Duration) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| per_attempt.min(left))
    }

    /// Records why an attempt failed (for the error if the operation gives up).
    pub(crate) fn note(&mut self, why: String) {
        self.last = why;
    }

    /// What the last failed attempt ran into.
    pub(crate) fn last(&self) -> &str {
        &self.last
    }

    /// Sleeps before the next attempt: the current backoff with jitter (uniform in
    /// `[b/2, b]`), never past the deadline; then doubles the backoff.
    pub(crate) async fn back_off(&mut self) {
        let b = self.backoff_ms;
        let ms = rand::thread_rng().gen_range(b.div_ceil(2)..=b);
        self.backoff_ms = (b * 2).min(BACKOFF_MAX_MS);
        self.sleep(Duration::from_millis(ms)).await;
    }

    /// Sleeps for the delay a server's RETRY asked for (capped), with a little
    /// jitter so that clients told the same delay do not return in lockstep.
    pub(crate) async fn wait_as_told(&mut self, delay_ms: u32) {
        let ms = u64::from(delay_ms).min(RETRY_DELAY_MAX_MS);
        let jitter = rand::thread_rng().gen_range(0..=ms / 8);
        self.sleep(Duration::from_millis(ms + jitter)).await;
    }

    async fn sleep(&self, d: Duration) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(d.min(left)).await;
    }

    /// The error for an operation whose deadline passed.
    pub(crate) fn deadline_exceeded(&self) -> ClientError {
        ClientError::DeadlineExceeded {
            elapsed: self.start.elapsed(),
            last_attempt: self.last.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn backoff_grows_and_stops_at_the_deadline() {
        let mut r = Retrier::new(Duration::from_millis(50));
        assert_eq!(
            r.attempt_deadline(Duration::from_secs(2))
                .map(|d| d <= Duration::from_millis(50)),
            Some(true)
        );
        for _ in 0..20 {
            r.back_off().await;
        }
        assert_eq!(r.backoff_ms, BACKOFF_MAX_MS);
        assert_eq!(r.attempt_deadline(Duration::from_secs(2)), None);
        r.note("read at m1: RETRY".into());
        let e = r.deadline_exceeded();
        assert!(e.to_string().contains("read at m1: RETRY"), "{e}");
    }

    #[tokio::test]
    async fn no_space_gives_up_after_the_patience_from_the_first_refusal() {
        let mut r =
            Retrier::new(Duration::from_secs(30)).with_no_space_patience(Duration::from_millis(20));
        assert_eq!(r.no_space("m1:1"), None, "the first refusal is retried");
        tokio::time::sleep(Duration::from_millis(25)).await;
        match r.no_space("m1:1") {
            Some(ClientError::NoSpace { server, waited }) => {
                assert_eq!(server, "m1:1");
                assert!(waited >= Duration::from_millis(20), "{waited:?}");
            }
            other => panic!("expected NoSpace, got {other:?}"),
        }
        // The operation itself still has time: only NO_SPACE is cut short.
        assert!(r.attempt_deadline(Duration::from_secs(2)).is_some());
    }

    #[tokio::test]
    async fn no_space_with_zero_patience_fails_at_once() {
        let mut r = Retrier::new(Duration::from_secs(30)).with_no_space_patience(Duration::ZERO);
        let e = r
            .no_space("m2:1")
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("log of the server at m2:1 is full"), "{e}");
    }

    #[test]
    fn no_space_without_patience_waits_for_the_operation_deadline() {
        let mut r = Retrier::new(Duration::from_secs(30));
        assert_eq!(r.no_space_patience, Duration::from_secs(30));
        assert_eq!(r.no_space("m3:1"), None);
    }
}
