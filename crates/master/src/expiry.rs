//! Key expiry's vocabulary: what a write does to an object's expiry time, and
//! the wall clock expiry times are read against.
//!
//! An expiry time is absolute wall-clock milliseconds since the Unix epoch,
//! stored in the object's own log entry (`ramstore_log::entry`, type 0x82): the
//! log is the truth (R§4), so recovery, cold start and the cleaner carry it
//! without a side table. Absolute rather than relative because a relative time
//! would have to be rebased at every replay, and a replayed entry's age is not
//! known; the price is that masters' wall clocks must roughly agree (NTP), as
//! Redis replicas' do.

use std::time::UNIX_EPOCH;

use ramstore_clock::Clock;

/// What a write does to the object's expiry time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Keep the current object's expiry (Redis's INCR, `SET … KEEPTTL`); a new
    /// object never expires.
    Keep,
    /// Store this expiry (`None`: never expires; a plain SET clears a TTL).
    Set(Option<u64>),
}

/// The wall-clock time of `clock` in ms since the Unix epoch (0 before it,
/// saturating far after it): the time expiry times are compared with. Product
/// code reads wall time only through the `Clock` seam, so tests drive expiry
/// with a manual clock.
pub fn wall_ms(clock: &dyn Clock) -> u64 {
    clock
        .wall()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_clock::ManualClock;
    use std::time::Duration;

    #[test]
    fn wall_ms_follows_the_manual_clock() {
        let clock = ManualClock::new();
        let before = wall_ms(&*clock.handle());
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(wall_ms(&*clock.handle()), before + 1_500);
    }
}
