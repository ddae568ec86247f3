//! Epochs: when is it safe to reuse the memory of a cleaned segment? (L§6.3)
//!
//! Every operation that may touch log memory *pins* the current epoch for its
//! duration. The cleaner, after it has redirected every hash table reference away
//! from a segment, *advances* the epoch to `E` and tags the segment with `E`; the
//! segment's seglets may be reused once no pin older than `E` remains.
//!
//! Why this is enough: a pin stores the epoch it read and only then reads the hash
//! table (both sequentially consistent). If the cleaner's scan of the pins missed a
//! pin, that pin was stored after the scan, so its hash table reads come after the
//! cleaner's redirections and cannot lead into the old segment.
//!
//! Pins claim one of a fixed set of cache-line-padded slots with one CAS; a thread
//! starts at its own preferred slot, so in the common case no two threads share a
//! cache line. Pinning is lock-free and does not allocate.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Pins that can be held at once; more simply wait for a slot.
pub const EPOCH_SLOTS: usize = 256;

#[repr(align(64))]
struct Slot(AtomicU64);

/// The epoch tracker of one log. Thread-safe.
pub struct Epochs {
    current: AtomicU64,
    slots: Box<[Slot]>,
}

/// An operation in progress; unpins on drop.
pub struct EpochGuard<'a> {
    slot: &'a AtomicU64,
}

impl Drop for EpochGuard<'_> {
    fn drop(&mut self) {
        self.slot.store(0, Ordering::Release);
    }
}

fn preferred_slot() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        if m.get() == usize::MAX {
            m.set(NEXT.fetch_add(1, Ordering::Relaxed) % EPOCH_SLOTS);
        }
        m.get()
    })
}

impl Default for Epochs {
    fn default() -> Self {
        Self::new()
    }
}

impl Epochs {
    pub fn new() -> Self {
        Self {
            // Epoch 0 marks a free slot, so real epochs start at 1.
            current: AtomicU64::new(1),
            slots: (0..EPOCH_SLOTS).map(|_| Slot(AtomicU64::new(0))).collect(),
        }
    }

    /// Marks the start of an operation that may read log memory.
    pub fn pin(&self) -> EpochGuard<'_> {
        let start = preferred_slot();
        loop {
            let epoch = self.current.load(Ordering::SeqCst);
            for i in 0..EPOCH_SLOTS {
                let slot = &self.slots[(start + i) % EPOCH_SLOTS].0;
                if slot
                    .compare_exchange(0, epoch, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
                {
                    return EpochGuard { slot };
                }
            }
            std::thread::yield_now();
        }
    }

    /// Starts a new epoch and returns it. Memory unreachable from the hash table
    /// before this call may be reused once [`Epochs::safe`] says so for the result.
    pub fn advance(&self) -> u64 {
        self.current.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The oldest epoch still pinned, or `u64::MAX` when nothing is pinned.
    pub fn oldest_pinned(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.0.load(Ordering::SeqCst))
            .filter(|&e| e != 0)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Whether memory retired at `epoch` (a value returned by `advance`) is free of
    /// readers.
    pub fn safe(&self, epoch: u64) -> bool {
        self.oldest_pinned() >= epoch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_waits_for_older_pins() {
        let epochs = Epochs::new();
        let old = epochs.pin();
        let retired_at = epochs.advance();
        assert!(!epochs.safe(retired_at));
        let newer = epochs.pin();
        drop(old);
        assert!(
            epochs.safe(retired_at),
            "a pin taken after the advance does not block"
        );
        drop(newer);
        assert_eq!(epochs.oldest_pinned(), u64::MAX);
    }

    #[test]
    fn pin_nested_uses_distinct_slots() {
        let epochs = Epochs::new();
        let guards: Vec<_> = (0..EPOCH_SLOTS).map(|_| epochs.pin()).collect();
        assert_eq!(epochs.oldest_pinned(), 1);
        drop(guards);
        assert_eq!(epochs.oldest_pinned(), u64::MAX);
    }
}
