//! Whether this master is refusing writes for lack of memory, and since when.
//!
//! A full log answers NO_SPACE (L§7: the cleaner must free space first). Most of
//! the time that is transient — the cleaner catches up within milliseconds — and
//! callers retry. But when the live data leaves no room the log stays full, and a
//! caller that retries every write for its whole patience multiplies the wait by
//! the number of writes (a Redis pipeline of N SETs would wait N × patience). So
//! the master remembers when the current run of refusals began: once it has been
//! refusing for longer than the patience ([`FullLog::patience`]), the Redis front
//! end's direct path answers a refused write at once (`-OOM`) instead of waiting
//! again. Every write is still tried first, so the first write that fits ends the
//! run and writes are accepted again as soon as the cleaner has freed space.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Default patience with a full log ([`FullLog::patience`],
/// `ramstore server --no-space-wait-ms`); the client library's default
/// ([`ramstore_client::DEFAULT_NO_SPACE_PATIENCE_MS`]) is the same.
pub const DEFAULT_NO_SPACE_WAIT_MS: u64 = ramstore_client::DEFAULT_NO_SPACE_PATIENCE_MS;

/// Most a patience may be: a client's operation deadline (30 s by default) must
/// not be shorter than the wait the server makes it sit through.
pub const MAX_NO_SPACE_WAIT_MS: u64 = 60_000;

/// A master's record of refused writes (NO_SPACE). Thread-safe, lock-free.
#[derive(Debug)]
pub struct FullLog {
    /// The origin of the millisecond clock below.
    epoch: Instant,
    /// 1 + milliseconds from `epoch` to the first refusal of the current run;
    /// 0: the last write was accepted (or none was refused yet).
    since_ms: AtomicU64,
    /// Updates answered NO_SPACE, ever.
    answers: AtomicU64,
    /// How long a run of refusals may last before refused writes are answered at
    /// once.
    patience: Duration,
}

impl FullLog {
    /// A record that lets a run of refusals last `patience` before writes fail at
    /// once; `epoch` is now on the clock of the instants it will be given.
    pub fn new(patience: Duration, epoch: Instant) -> Self {
        Self {
            epoch,
            since_ms: AtomicU64::new(0),
            answers: AtomicU64::new(0),
            patience,
        }
    }

    /// How long a run of refusals may last before refused writes are answered at
    /// once.
    pub fn patience(&self) -> Duration {
        self.patience
    }

    /// Records a refused write at `now`: how long the current run of refusals has
    /// lasted (zero if this refusal starts it).
    pub fn refused(&self, now: Instant) -> Duration {
        self.answers.fetch_add(1, Ordering::Relaxed);
        let now_ms = self.millis(now);
        // Only the first refusal of a run sets the start; later ones keep it.
        let since =
            match self
                .since_ms
                .compare_exchange(0, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => now_ms,
                Err(since) => since,
            };
        Duration::from_millis(now_ms.saturating_sub(since))
    }

    /// Records an accepted write: the log takes writes again, and the run of
    /// refusals (if any) is over. A load first, so that the fast path does not
    /// write a shared cache line on every write.
    pub fn accepted(&self) {
        if self.since_ms.load(Ordering::Relaxed) != 0 {
            self.since_ms.store(0, Ordering::Relaxed);
        }
    }

    /// How long the log has been refusing writes at `now` (since the first refusal
    /// after the last accepted write), or `None` if the last write was accepted.
    pub fn refusing_for(&self, now: Instant) -> Option<Duration> {
        match self.since_ms.load(Ordering::Relaxed) {
            0 => None,
            since => Some(Duration::from_millis(
                self.millis(now).saturating_sub(since),
            )),
        }
    }

    /// Whether the current run of refusals has outlasted the patience at `now`:
    /// the log is taken to be out of memory rather than waiting for its cleaner.
    pub fn out_of_memory(&self, now: Instant) -> bool {
        self.refusing_for(now).is_some_and(|d| d >= self.patience)
    }

    /// Updates answered NO_SPACE so far.
    pub fn answers(&self) -> u64 {
        self.answers.load(Ordering::Relaxed)
    }

    /// 1 + whole milliseconds from the epoch to `at` (never 0, which means "not
    /// refusing").
    fn millis(&self, at: Instant) -> u64 {
        let ms = at.saturating_duration_since(self.epoch).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX - 1) + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record and its epoch, on a manual clock.
    fn full_log(patience: Duration) -> (FullLog, Instant) {
        let t0 = ramstore_clock::ManualClock::new().origin();
        (FullLog::new(patience, t0), t0)
    }

    #[test]
    fn refused_starts_a_run_that_accepted_ends() {
        let (log, t0) = full_log(Duration::from_secs(3));
        assert_eq!(log.refusing_for(t0), None);
        assert_eq!(log.refused(t0), Duration::ZERO);
        let t1 = t0 + Duration::from_millis(1500);
        assert_eq!(log.refused(t1), Duration::from_millis(1500));
        assert_eq!(log.refusing_for(t1), Some(Duration::from_millis(1500)));
        assert!(
            !log.out_of_memory(t1),
            "a transient refusal is within the patience"
        );
        log.accepted();
        assert_eq!(log.refusing_for(t1), None);
        assert_eq!(log.answers(), 2);
    }

    #[test]
    fn out_of_memory_once_refusing_for_the_patience() {
        let (log, t0) = full_log(Duration::from_millis(100));
        log.refused(t0);
        let later = t0 + Duration::from_millis(100);
        assert!(log.out_of_memory(later));
        // A later refusal does not restart the run.
        assert_eq!(log.refused(later), Duration::from_millis(100));
        // One accepted write: the cleaner freed space, writes are tried and waited
        // for again.
        log.accepted();
        assert!(!log.out_of_memory(later));
        assert_eq!(log.refused(later), Duration::ZERO);
    }

    #[test]
    fn zero_patience_is_out_of_memory_at_the_first_refusal() {
        let (log, t0) = full_log(Duration::ZERO);
        assert!(!log.out_of_memory(t0));
        log.refused(t0);
        assert!(log.out_of_memory(t0));
    }
}
