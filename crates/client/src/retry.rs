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
        }
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
}
