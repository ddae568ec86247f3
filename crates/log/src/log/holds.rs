//! Tombstone holds: tombstones that stay live until their holder lets them go,
//! whatever becomes of the segment of the object they kill (L§3, K§2.3.4).
//!
//! A tombstone normally lives while the segment of its object is in the log: once
//! both are cleaned, nothing in the log says the key was ever deleted, which is
//! right for this log alone. A migration target needs more (design notes
//! "Migration: lineage recovery", known limit 1 before it was fixed): until the
//! coordinator has recorded its migration done, a crash of the target rolls the
//! range back by replaying the target's log onto the source's fenced copy, and
//! only a tombstone in that log can kill the source's older copy of a key the
//! target deleted. So the target appends, next to the ordinary tombstone of such a
//! delete, a second one naming a *hold*: a pseudo segment id (top bit set, never
//! a real segment's) that counts as in the log until it is released.
//!
//! The accounting treats a hold as a segment (`tombstones`): its tombstones are
//! listed and counted live, combined cleaning copies and moves them like any live
//! tombstone, and releasing the hold expires them as a segment leaving the log
//! does (`Log::tombstone_targets_left`). Expiry happens under `combined_pass`
//! (segments leave the log in one place); a release that finds a pass running
//! leaves the expiry to the next pass, and the hold's tombstones stay live until
//! then (never too few live tombstones, only a little longer).
//!
//! Thread-safety: the holds are in the segment table, under its mutex. A held
//! append checks its hold and lists its tombstone under that mutex, so a release
//! never misses a tombstone that names it.

use super::Log;

/// Pseudo segment ids of holds have this bit set; real segment ids count up from 1
/// and never reach it.
pub const HOLD_ID_BIT: u64 = 1 << 63;

/// A hold on tombstones (module doc): obtained from [`Log::hold_tombstones`],
/// given back with [`Log::release_tombstones`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TombstoneHold(u64);

impl TombstoneHold {
    /// The pseudo segment id the hold's tombstones name.
    pub fn id(self) -> u64 {
        self.0
    }

    /// The hold with pseudo segment id `id`, if `id` is one (for a holder that
    /// keeps it as a plain integer, 0 meaning none).
    pub fn from_id(id: u64) -> Option<Self> {
        (id & HOLD_ID_BIT != 0).then_some(Self(id))
    }
}

/// The holds of a log, in its segment table.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    next: u64,
    /// Holds a held append may still name.
    active: Vec<u64>,
    /// Released holds whose tombstones still count live until the next combined
    /// pass (or release) expires them.
    expiring: Vec<u64>,
}

impl Holds {
    /// Whether pseudo segment id `id` is a hold not released.
    pub fn is_active(&self, id: u64) -> bool {
        self.active.contains(&id)
    }

    /// Every hold whose tombstones are live (for the cleaner's "in the log" sets).
    pub fn live(&self) -> impl Iterator<Item = u64> + '_ {
        self.active.iter().chain(&self.expiring).copied()
    }
}

impl Log {
    /// A new hold: tombstones appended with it ([`Self::append_held_tombstone`])
    /// stay live until [`Self::release_tombstones`].
    pub fn hold_tombstones(&self) -> TombstoneHold {
        let mut table = self.segments.lock();
        let holds = &mut table.holds;
        holds.next += 1;
        let id = HOLD_ID_BIT | holds.next;
        holds.active.push(id);
        TombstoneHold(id)
    }

    /// Lets `hold`'s tombstones die: from now on they are dead like those of a
    /// segment that left the log. Idempotent. Never waits for a cleaning pass
    /// (module doc).
    pub fn release_tombstones(&self, hold: TombstoneHold) {
        {
            let mut table = self.segments.lock();
            let holds = &mut table.holds;
            let Some(i) = holds.active.iter().position(|&h| h == hold.0) else {
                return;
            };
            holds.active.swap_remove(i);
            holds.expiring.push(hold.0);
        }
        if let Some(_one_pass) = self.combined_pass.try_lock() {
            self.expire_released_holds();
        }
    }

    /// Whether `hold` is held (not released).
    pub fn is_held(&self, hold: TombstoneHold) -> bool {
        self.segments.lock().holds.is_active(hold.0)
    }

    /// Live tombstone bytes naming `hold` (its tombstones, wherever they are).
    pub fn held_tombstone_bytes(&self, hold: TombstoneHold) -> u64 {
        self.tombstone_targets.lock().bytes_naming(hold.0)
    }

    /// Expires the tombstones of released holds. The caller holds
    /// `combined_pass`, so no pass moves them meanwhile.
    pub(crate) fn expire_released_holds(&self) {
        let gone = std::mem::take(&mut self.segments.lock().holds.expiring);
        if !gone.is_empty() {
            self.tombstone_targets_left(&gone);
        }
    }
}
