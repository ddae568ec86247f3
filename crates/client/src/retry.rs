//! Bounded retry (R§11.4): one [`Retrier`] per operation tracks its overall deadline,
//! the backoff between attempts (exponential with jitter) and what the last attempt
//! ran into, so that giving up produces an error that says why.

use std::time::{Duration, Instant};

use ramstore_clock::{Clock, Rng};
use rand::Rng as _;

use crate::error::ClientError;
use crate::options::ClientOptions;

/// First backoff after a failed attempt.
pub const BACKOFF_INITIAL_MS: u64 = 1;
/// Backoffs double up to this.
pub const BACKOFF_MAX_MS: u64 = 256;
/// Longest wait a server's RETRY may ask for; longer requests are capped, so a
/// confused server cannot park a client.
pub const RETRY_DELAY_MAX_MS: u64 = 5_000;

const _: () = assert!(BACKOFF_INITIAL_MS > 0 && BACKOFF_INITIAL_MS <= BACKOFF_MAX_MS);

/// The retry state of one operation. It borrows the client's clock and random
/// source (no reference count touched per operation).
#[derive(Debug)]
pub(crate) struct Retrier<'a> {
    clock: &'a dyn Clock,
    rng: &'a dyn Rng,
    start: Instant,
    deadline: Instant,
    backoff_ms: u64,
    last: String,
    /// How long NO_SPACE answers are retried from the first one.
    no_space_patience: Duration,
    /// When this operation first heard NO_SPACE.
    no_space_since: Option<Instant>,
}

impl<'a> Retrier<'a> {
    /// A retrier for an operation that may take `total`, on the clock and random
    /// source of `options`.
    pub(crate) fn new(options: &'a ClientOptions, total: Duration) -> Self {
        let clock = &*options.clock;
        let start = clock.now();
        Self {
            clock,
            rng: &*options.rng,
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
        let now = self.clock.now();
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
        let left = self.deadline.saturating_duration_since(self.clock.now());
        (!left.is_zero()).then(|| per_attempt.min(left))
    }

    /// Whether the operation's deadline is still ahead (a retry loop that sleeps
    /// through [`Self::back_off`] must stop once this is false: past the deadline
    /// the back-off sleeps nothing, and the loop would spin).
    pub(crate) fn has_time_left(&self) -> bool {
        self.clock.now() < self.deadline
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
        let ms = self.rng.as_rand().gen_range(b.div_ceil(2)..=b);
        self.backoff_ms = (b * 2).min(BACKOFF_MAX_MS);
        self.sleep(Duration::from_millis(ms)).await;
    }

    /// Sleeps for the delay a server's RETRY asked for (capped), with a little
    /// jitter so that clients told the same delay do not return in lockstep.
    pub(crate) async fn wait_as_told(&mut self, delay_ms: u32) {
        let ms = u64::from(delay_ms).min(RETRY_DELAY_MAX_MS);
        let jitter = self.rng.as_rand().gen_range(0..=ms / 8);
        self.sleep(Duration::from_millis(ms + jitter)).await;
    }

    async fn sleep(&self, d: Duration) {
        let left = self.deadline.saturating_duration_since(self.clock.now());
        self.clock.sleep(d.min(left)).await;
    }

    /// The error for an operation whose deadline passed.
    pub(crate) fn deadline_exceeded(&self) -> ClientError {
        ClientError::DeadlineExceeded {
            elapsed: self.clock.elapsed(self.start),
            last_attempt: self.last.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::Poll;

    use ramstore_clock::{ManualClock, SeededRng};

    use super::*;

    fn options() -> ClientOptions {
        ClientOptions::new("c:1")
    }

    /// Options on a manual clock, with seeded jitter.
    fn manual(clock: &ManualClock) -> ClientOptions {
        ClientOptions {
            clock: clock.handle(),
            rng: SeededRng::handle(3),
            ..options()
        }
    }

    /// Polls `f` once: whether it finished.
    async fn poll_once<F: Future>(f: Pin<&mut F>) -> bool {
        let mut f = Some(f);
        std::future::poll_fn(|cx| {
            let ready = f.as_mut().is_some_and(|f| f.as_mut().poll(cx).is_ready());
            Poll::Ready(ready)
        })
        .await
    }

    #[tokio::test]
    async fn backoff_grows_and_stops_at_the_deadline() {
        let options = options();
        let mut r = Retrier::new(&options, Duration::from_millis(50));
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
    async fn back_off_sleeps_a_jittered_backoff_cut_at_the_deadline() {
        let clock = ManualClock::new();
        let options = manual(&clock);
        let mut r = Retrier::new(&options, Duration::from_millis(100));
        r.backoff_ms = 64;
        {
            let mut sleep = std::pin::pin!(r.back_off());
            assert!(!poll_once(sleep.as_mut()).await);
            let [until] = clock.sleepers()[..] else {
                panic!("one sleep expected")
            };
            let slept = until - clock.origin();
            assert!(
                (Duration::from_millis(32)..=Duration::from_millis(64)).contains(&slept),
                "{slept:?}"
            );
            clock.advance(slept);
            assert!(poll_once(sleep.as_mut()).await);
        }
        assert_eq!(r.backoff_ms, 128);
        // 128 ms of backoff, but the operation has less left: cut to the deadline.
        let mut sleep = std::pin::pin!(r.back_off());
        assert!(!poll_once(sleep.as_mut()).await);
        assert_eq!(
            clock.sleepers(),
            vec![clock.origin() + Duration::from_millis(100)]
        );
    }

    #[tokio::test]
    async fn attempt_deadline_is_cut_to_what_is_left_and_ends_at_the_deadline() {
        let clock = ManualClock::new();
        let options = manual(&clock);
        let r = Retrier::new(&options, Duration::from_millis(100));
        let per_attempt = Duration::from_millis(30);
        assert_eq!(r.attempt_deadline(per_attempt), Some(per_attempt));
        clock.advance(Duration::from_millis(80));
        assert_eq!(
            r.attempt_deadline(per_attempt),
            Some(Duration::from_millis(20))
        );
        clock.advance(Duration::from_millis(20));
        assert_eq!(r.attempt_deadline(per_attempt), None);
        match r.deadline_exceeded() {
            ClientError::DeadlineExceeded { elapsed, .. } => {
                assert_eq!(elapsed, Duration::from_millis(100));
            }
            other => panic!("expected DeadlineExceeded, got {other:?}"),
        }
    }

    #[test]
    fn no_space_gives_up_after_the_patience_from_the_first_refusal() {
        let clock = ManualClock::new();
        let options = manual(&clock);
        let mut r = Retrier::new(&options, Duration::from_secs(30))
            .with_no_space_patience(Duration::from_millis(20));
        assert_eq!(r.no_space("m1:1"), None, "the first refusal is retried");
        clock.advance(Duration::from_millis(19));
        assert_eq!(r.no_space("m1:1"), None, "19 ms into a 20 ms patience");
        clock.advance(Duration::from_millis(1));
        match r.no_space("m1:1") {
            Some(ClientError::NoSpace { server, waited }) => {
                assert_eq!(server, "m1:1");
                assert_eq!(waited, Duration::from_millis(20));
            }
            other => panic!("expected NoSpace, got {other:?}"),
        }
        // The operation itself still has time: only NO_SPACE is cut short.
        assert!(r.attempt_deadline(Duration::from_secs(2)).is_some());
    }

    #[tokio::test]
    async fn no_space_with_zero_patience_fails_at_once() {
        let options = options();
        let mut r =
            Retrier::new(&options, Duration::from_secs(30)).with_no_space_patience(Duration::ZERO);
        let e = r
            .no_space("m2:1")
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("log of the server at m2:1 is full"), "{e}");
    }

    #[test]
    fn no_space_without_patience_waits_for_the_operation_deadline() {
        let options = options();
        let mut r = Retrier::new(&options, Duration::from_secs(30));
        assert_eq!(r.no_space_patience, Duration::from_secs(30));
        assert_eq!(r.no_space("m3:1"), None);
    }
}
