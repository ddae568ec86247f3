//! A ticker on a [`Clock`], like `tokio::time::interval` with
//! `MissedTickBehavior::Delay`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clock::later;
use crate::Clock;

/// How late a tick may complete and still count as on time: the next tick then
/// keeps the schedule (tokio's threshold).
const ON_TIME_SLACK: Duration = Duration::from_millis(5);

/// Ticks every period of its clock; the first tick completes at once. A tick that
/// completes late (more than 5 ms) moves the schedule: the next one comes a whole
/// period after it, so a slow consumer never gets a burst of catch-up ticks.
#[derive(Debug)]
pub struct Interval {
    clock: Arc<dyn Clock>,
    period: Duration,
    next: Instant,
}

/// A ticker every `period` of `clock` (a zero period ticks every millisecond:
/// `tokio::time::interval` panics on it instead).
pub fn interval(clock: &Arc<dyn Clock>, period: Duration) -> Interval {
    Interval {
        next: clock.now(),
        clock: clock.clone(),
        period: period.max(Duration::from_millis(1)),
    }
}

impl Interval {
    /// Waits for the next tick and returns the instant it was due. Cancel-safe:
    /// dropping the future before it completes leaves the schedule as it was, so
    /// it may be used in `tokio::select!` loops.
    pub async fn tick(&mut self) -> Instant {
        let due = self.next;
        self.clock.sleep_until(due).await;
        let now = self.clock.now();
        self.next = if now > later(due, ON_TIME_SLACK) {
            later(now, self.period)
        } else {
            later(due, self.period)
        };
        due
    }

    /// The time between ticks.
    pub fn period(&self) -> Duration {
        self.period
    }
}
