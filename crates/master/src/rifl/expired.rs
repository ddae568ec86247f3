//! The client leases a master knows expired (RIFL §4.2), in bounded memory.
//!
//! A late retry under an expired lease must be refused (`STALE_RPC`), not run as
//! new: its completion record was forgotten with the lease. Remembering every
//! expired id would grow without bound over a long run, so each shard keeps at
//! most `capacity` ids and a *floor*: when the set is full its lowest id is
//! dropped and the floor rises to it. The coordinator hands lease ids out in
//! increasing order (`ramstore_coordinator::client_leases`), so ids at or below
//! the floor are old; but a live client with an old id may still send its first
//! RPC to this master. Such a lease, unknown here and at or below the floor, is
//! *unverified*: its RPCs are answered RETRY and the lease-expiry loop asks the
//! coordinator about it (`CheckClientLease`); live, it is admitted, expired, it
//! is remembered as expired again. The unverified ids waiting for that answer
//! are bounded too (`MAX_UNVERIFIED`; beyond it a lease is asked about on a
//! later retry).
//!
//! Memory per shard: at most `capacity + MAX_UNVERIFIED` ids (8 bytes each, plus
//! the B-tree's overhead).

use std::collections::BTreeSet;

/// Expired lease ids one shard remembers by default: 4,096 × 16 shards = 65,536
/// ids, about 1 MiB with the B-tree's overhead.
pub const DEFAULT_EXPIRED_PER_SHARD: usize = 4096;
/// Unverified leases one shard waits on at a time.
pub const MAX_UNVERIFIED: usize = 256;

/// What a shard knows of a lease that has no records here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    /// The coordinator said it expired: its RPCs are stale.
    Expired,
    /// At or below the floor and not remembered: ask the coordinator first.
    Unverified,
    /// Above the floor and not expired: a lease new to this master.
    New,
}

#[derive(Debug)]
pub(crate) struct ExpiredLeases {
    capacity: usize,
    /// Every expired id at or below this one has been forgotten.
    floor: u64,
    ids: BTreeSet<u64>,
    unverified: BTreeSet<u64>,
}

impl ExpiredLeases {
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "an expired-lease set must hold an id");
        Self {
            capacity,
            floor: 0,
            ids: BTreeSet::new(),
            unverified: BTreeSet::new(),
        }
    }

    pub(crate) fn classify(&self, lease_id: u64) -> Known {
        if self.ids.contains(&lease_id) {
            Known::Expired
        } else if lease_id <= self.floor {
            Known::Unverified
        } else {
            Known::New
        }
    }

    pub(crate) fn is_expired(&self, lease_id: u64) -> bool {
        self.ids.contains(&lease_id)
    }

    /// Remembers that `lease_id` expired. Beyond the capacity the lowest other
    /// id is dropped and the floor rises to it; the id just learned is kept even
    /// if it is below the floor (the coordinator has just said so, and a late
    /// retry waiting on that answer must now be told STALE_RPC, not RETRY).
    pub(crate) fn insert(&mut self, lease_id: u64) {
        self.unverified.remove(&lease_id);
        self.ids.insert(lease_id);
        while self.ids.len() > self.capacity {
            let lowest = self.ids.iter().copied().find(|id| *id != lease_id);
            match lowest {
                Some(lowest) => {
                    self.ids.remove(&lowest);
                    self.floor = self.floor.max(lowest);
                }
                None => break,
            }
        }
    }

    /// Queues `lease_id` for the coordinator's verdict, if there is room.
    pub(crate) fn note_unverified(&mut self, lease_id: u64) {
        if self.unverified.len() < MAX_UNVERIFIED {
            self.unverified.insert(lease_id);
        }
    }

    /// The coordinator says `lease_id` is live: it waits no more. Returns whether
    /// it was waiting.
    pub(crate) fn verified_live(&mut self, lease_id: u64) -> bool {
        self.unverified.remove(&lease_id)
    }

    pub(crate) fn unverified(&self) -> impl Iterator<Item = u64> + '_ {
        self.unverified.iter().copied()
    }

    /// Ids held now (expired and unverified).
    pub(crate) fn len(&self) -> usize {
        self.ids.len() + self.unverified.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_beyond_capacity_raises_the_floor_and_keeps_the_newest() {
        let mut e = ExpiredLeases::new(3);
        for id in [5, 1, 9, 7] {
            e.insert(id);
        }
        assert_eq!(e.len(), 3);
        assert_eq!(
            e.classify(1),
            Known::Unverified,
            "dropped: now below the floor"
        );
        assert_eq!(e.classify(3), Known::New, "above the floor (1)");
        e.insert(11);
        assert_eq!(e.classify(3), Known::Unverified, "below the new floor (5)");
        assert_eq!(e.classify(9), Known::Expired);
        assert_eq!(e.classify(10), Known::New);
    }

    #[test]
    fn insert_below_the_floor_keeps_the_id_just_learned() {
        let mut e = ExpiredLeases::new(1);
        e.insert(5);
        e.insert(9);
        assert_eq!(e.classify(5), Known::Unverified);
        e.insert(5);
        assert_eq!(
            e.classify(5),
            Known::Expired,
            "the coordinator just said so"
        );
        assert_eq!(e.classify(9), Known::Unverified, "dropped to make room");
        assert_eq!(e.len(), 1);
    }

    #[test]
    fn note_unverified_is_bounded_and_verified_live_releases() {
        let mut e = ExpiredLeases::new(1);
        for id in 0..(MAX_UNVERIFIED as u64 + 10) {
            e.note_unverified(id);
        }
        assert_eq!(e.unverified().count(), MAX_UNVERIFIED);
        assert!(e.verified_live(0));
        assert!(!e.verified_live(0));
        e.insert(1);
        assert!(
            !e.unverified().any(|id| id == 1),
            "expired is no longer waiting"
        );
    }
}
