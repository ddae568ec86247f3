//! [`SimClock`]: `ramstore_clock::Clock` on tokio's paused clock.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use ramstore_clock::{Clock, Sleep};

/// Wall time at simulated time zero: 2026-01-01T00:00:00Z, the same in every run.
const EPOCH_SECS: u64 = 1_767_225_600;

/// Simulated time: tokio's clock on a runtime built with `start_paused(true)`,
/// which moves only when every task is idle (to the next timer). Instants are
/// tokio's (a real instant taken once when the runtime starts, plus the simulated
/// time since); wall time is a fixed epoch plus the same.
#[derive(Debug)]
pub struct SimClock {
    start: tokio::time::Instant,
}

/// The zero of the first [`SimClock`] made in this process (one run per
/// process): what the log lines' timestamps count from ([`log_time`]).
static FIRST_START: OnceLock<tokio::time::Instant> = OnceLock::new();

/// Simulated time since the run's clock was made, for the log lines of
/// `RUST_LOG` (the same time the `--verbose` lines show); zero before that.
pub fn log_time() -> Duration {
    FIRST_START.get().map_or(Duration::ZERO, |s| {
        tokio::time::Instant::now().saturating_duration_since(*s)
    })
}

impl SimClock {
    /// A clock whose zero is now. Call inside the paused runtime.
    pub fn handle() -> Arc<SimClock> {
        let start = tokio::time::Instant::now();
        let _ = FIRST_START.set(start);
        Arc::new(SimClock { start })
    }

    /// Simulated time since the clock was made.
    pub fn elapsed(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.start)
    }

    /// [`SimClock::elapsed`] in nanoseconds.
    pub fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_SECS) + self.elapsed()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::from_future(tokio::time::sleep_until(tokio::time::Instant::from_std(
            deadline,
        )))
    }

    /// Simulated code must never block its thread: the one thread is the whole
    /// cluster, so simulated time could never reach `deadline`. Reaching this is
    /// a bug in the simulation's configuration (docs/design-notes.md,
    /// "Determinism rules for simulated code"), reported loudly.
    fn block_until(&self, _deadline: Instant, _wait: &mut dyn FnMut(Duration) -> bool) -> bool {
        panic!("a simulated component blocked its thread on the clock (block_until)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_clock_moves_only_with_simulated_time() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let clock = SimClock::handle();
            let dyn_clock: Arc<dyn Clock> = clock.clone();
            let (t0, w0) = (dyn_clock.now(), dyn_clock.wall());
            dyn_clock.sleep(Duration::from_secs(3600)).await;
            assert_eq!(dyn_clock.now() - t0, Duration::from_secs(3600));
            assert_eq!(
                dyn_clock.wall().duration_since(w0).ok(),
                Some(Duration::from_secs(3600))
            );
            assert_eq!(clock.elapsed(), Duration::from_secs(3600));
        });
    }
}
