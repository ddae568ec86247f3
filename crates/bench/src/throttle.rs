//! A replica sink that stands in for backups: it paces every `replicate` call to a
//! fixed back-end bandwidth (L§8.1: each master had about 700 MB/s to its backups).
//!
//! Without it, combined cleaning would cost only memory bandwidth and the whole point
//! of two-level cleaning — keeping cleaner traffic off the backups — would not show
//! in the numbers.
//!
//! The model is one shared link: a virtual clock `next_free` says when the link is
//! next idle. A call of `len` bytes takes the slot
//! `[max(now, next_free), max(now, next_free) + len / bandwidth)` and the caller
//! waits until the end of its slot (replication is synchronous: the write is
//! acknowledged once its bytes are on the backups). Writers and the cleaner share the
//! link, so an 8 MiB survivor segment delays the writes queued behind it, as a real
//! backup link would.
//!
//! Cost per call when the link is idle: one clock read and one compare-and-swap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ramstore_log::ReplicaSink;

/// Waits longer than this sleep (minus [`SLEEP_SLACK_NS`]); shorter waits yield, and
/// the last tens of microseconds spin. Sleeping on this VM overshoots by tens of
/// microseconds, so short waits would lose bandwidth if they slept; and on a busy
/// machine a yield can hand the core to another process for a whole time slice, so
/// the common short waits (a 10 KB write takes 14 µs at 700 MB/s) spin.
const SLEEP_ABOVE_NS: u64 = 200_000;
/// How early to wake from a sleep, to absorb the scheduler's overshoot.
const SLEEP_SLACK_NS: u64 = 100_000;
/// Below this, spin instead of yielding.
const SPIN_BELOW_NS: u64 = 50_000;

/// A [`ReplicaSink`] paced to a bandwidth in MB/s (10^6 bytes per second).
#[derive(Debug)]
pub struct ThrottledReplicas {
    start: Instant,
    /// Nanoseconds per 1,000 bytes; 0 means unthrottled.
    ns_per_kb: u64,
    /// When the virtual link is next idle, in ns since `start`.
    next_free_ns: AtomicU64,
    bytes: AtomicU64,
    calls: AtomicU64,
    waited_ns: AtomicU64,
}

/// Counters of a [`ThrottledReplicas`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleStats {
    pub bytes: u64,
    pub calls: u64,
    /// Total time callers spent waiting for their slot (all threads).
    pub waited_ns: u64,
}

impl ThrottledReplicas {
    /// A sink for `mbps` MB/s; `0` replicates instantly (and only counts bytes).
    pub fn new(mbps: u64) -> Self {
        Self {
            start: Instant::now(),
            // 1,000 bytes at `mbps` × 10^6 B/s take 10^6 / mbps ns.
            ns_per_kb: 1_000_000u64.checked_div(mbps).unwrap_or(0),
            next_free_ns: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            waited_ns: AtomicU64::new(0),
        }
    }

    pub fn stats(&self) -> ThrottleStats {
        ThrottleStats {
            bytes: self.bytes.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            waited_ns: self.waited_ns.load(Ordering::Relaxed),
        }
    }

    fn now_ns(&self) -> u64 {
        // u64 nanoseconds last 584 years.
        self.start.elapsed().as_nanos() as u64
    }

    /// Takes the next slot for `len` bytes and returns when it ends.
    fn reserve(&self, len: usize, now: u64) -> u64 {
        let cost = (len as u64).saturating_mul(self.ns_per_kb) / 1000;
        let mut cur = self.next_free_ns.load(Ordering::Relaxed);
        loop {
            let end = cur.max(now) + cost;
            match self.next_free_ns.compare_exchange_weak(
                cur,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return end,
                Err(seen) => cur = seen,
            }
        }
    }

    fn wait_until(&self, end: u64, mut now: u64) {
        let began = now;
        while now < end {
            let left = end - now;
            if left > SLEEP_ABOVE_NS {
                std::thread::sleep(Duration::from_nanos(left - SLEEP_SLACK_NS));
            } else if left > SPIN_BELOW_NS {
                // Lets the cleaner thread have the core while this writer waits.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            now = self.now_ns();
        }
        if now > began {
            self.waited_ns.fetch_add(now - began, Ordering::Relaxed);
        }
    }
}

impl ReplicaSink for ThrottledReplicas {
    fn replicate(&self, _segment_id: u64, _offset: usize, len: usize) {
        self.bytes.fetch_add(len as u64, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
        if self.ns_per_kb == 0 {
            return;
        }
        let now = self.now_ns();
        let end = self.reserve(len, now);
        if end > now {
            self.wait_until(end, now);
        }
    }

    fn close(&self, _segment_id: u64) {}

    fn cleaned(&self, _survivors: &[u64], _freed: &[u64]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_to_bandwidth() {
        // 100 MB/s: 10 calls of 100 kB take 10 ms in total.
        let t = ThrottledReplicas::new(100);
        let start = Instant::now();
        for _ in 0..10 {
            t.replicate(1, 0, 100_000);
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(10), "{took:?}");
        assert!(took < Duration::from_millis(200), "{took:?}");
        assert_eq!(t.stats().bytes, 1_000_000);
    }

    #[test]
    fn unthrottled_counts_only() {
        let t = ThrottledReplicas::new(0);
        t.replicate(1, 0, 1 << 30);
        assert_eq!(t.stats().bytes, 1 << 30);
        assert_eq!(t.stats().waited_ns, 0);
    }
}
