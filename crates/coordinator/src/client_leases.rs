//! Client leases (RIFL §4.2, RAMCloud's `ClientLeaseAuthority`): the identity
//! under which a client's exactly-once RPCs are numbered. Not to be confused with
//! the servers' membership leases (`crate::lease`).
//!
//! A client opens a lease (`ClientLease` with id 0) and renews it before it runs
//! out; masters ask whether a lease is still live (`CheckClientLease`) before
//! they forget its completion records.
//!
//! Durability, so a standby coordinator that takes over (R§9) never reissues an
//! id and knows which leases are live:
//! - Ids are reserved in blocks of [`LEASE_ID_BLOCK`]: the top of the reserved
//!   range is written to external storage before any id of the block is handed
//!   out, so one storage write covers a thousand leases; a new coordinator starts
//!   above the stored top (ids of a block it never handed out are skipped).
//! - Each live lease has a key of its own, written before its id is returned
//!   and deleted once it has expired. Expiry times are not stored: clocks of
//!   two coordinators do not agree, so a coordinator that loads the leases gives
//!   each a full term from then. That only extends leases (records are kept a
//!   little longer), never shortens one a client counts on.
//!
//! Renewals write nothing, which keeps their cost at one RPC.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ramstore_clock::Clock;

use crate::error::CoordinatorError;
use crate::storage::{ExternalStorage, StorageError};

/// Lease ids reserved by one storage write.
pub const LEASE_ID_BLOCK: u64 = 1024;
/// How long a lease lasts after it is opened or renewed (RAMCloud: minutes;
/// short enough here that the records of vanished clients go soon). The default
/// of `ramstore coordinator --client-lease-term-ms`.
pub const CLIENT_LEASE_TERM_MS: u64 = 30_000;
/// The shortest term a coordinator accepts: clients renew at half the term, so a
/// shorter one would spend a coordinator RPC every few hundred milliseconds.
pub const MIN_CLIENT_LEASE_TERM_MS: u64 = 1_000;
/// The longest term a coordinator accepts (a vanished client's records live
/// that long).
pub const MAX_CLIENT_LEASE_TERM_MS: u64 = 3_600_000;
/// The key holding the top of the reserved id range.
pub const RESERVED_KEY: &str = "client_leases/reserved";
/// The prefix of the per-lease keys.
pub const LEASE_PREFIX: &str = "client_lease/";

fn lease_key(id: u64) -> String {
    format!("{LEASE_PREFIX}{id:020}")
}

#[derive(Debug)]
struct State {
    /// The next id to hand out.
    next_id: u64,
    /// Every id up to this one may have been handed out (it is stored).
    reserved: u64,
    /// Live leases and when they expire on this coordinator's clock.
    expiries: BTreeMap<u64, Instant>,
}

/// The coordinator's client lease authority.
pub struct ClientLeases {
    storage: Arc<dyn ExternalStorage>,
    clock: Arc<dyn Clock>,
    /// The term in milliseconds ([`ClientLeases::set_term_ms`] may change it
    /// once the coordinator is serving; leases already granted keep theirs).
    term_ms: AtomicU64,
    /// Loaded from storage at first use.
    state: Mutex<Option<State>>,
}

impl std::fmt::Debug for ClientLeases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientLeases")
            .field("term_ms", &self.term_ms())
            .finish_non_exhaustive()
    }
}

impl ClientLeases {
    /// An authority over `storage`, timing leases of `term_ms` on `clock`.
    pub fn new(storage: Arc<dyn ExternalStorage>, clock: Arc<dyn Clock>, term_ms: u64) -> Self {
        Self {
            storage,
            clock,
            term_ms: AtomicU64::new(term_ms),
            state: Mutex::new(None),
        }
    }

    /// The lease term in milliseconds.
    pub fn term_ms(&self) -> u64 {
        self.term_ms.load(Ordering::Relaxed)
    }

    /// Grants and renews later leases for `term_ms` (clamped to
    /// [`MIN_CLIENT_LEASE_TERM_MS`]..=[`MAX_CLIENT_LEASE_TERM_MS`]): clients learn
    /// the term from each grant and renewal.
    pub fn set_term_ms(&self, term_ms: u64) {
        let ms = term_ms.clamp(MIN_CLIENT_LEASE_TERM_MS, MAX_CLIENT_LEASE_TERM_MS);
        self.term_ms.store(ms, Ordering::Relaxed);
    }

    fn term(&self) -> Duration {
        Duration::from_millis(self.term_ms())
    }

    /// Runs `f` on the state, loading it from storage first if needed.
    fn with_state<R>(
        &self,
        f: impl FnOnce(&mut State, Instant) -> Result<R, CoordinatorError>,
    ) -> Result<R, CoordinatorError> {
        let mut guard = self.state.lock();
        let now = self.clock.now();
        if guard.is_none() {
            *guard = Some(self.load(now)?);
        }
        match guard.as_mut() {
            Some(state) => f(state, now),
            None => unreachable!("loaded just above"),
        }
    }

    fn load(&self, now: Instant) -> Result<State, CoordinatorError> {
        let reserved = match self.storage.get(RESERVED_KEY)? {
            None => 0,
            Some(bytes) => parse_u64(RESERVED_KEY, &bytes)?,
        };
        let mut expiries = BTreeMap::new();
        for (key, _) in self.storage.list(LEASE_PREFIX)? {
            let id = key[LEASE_PREFIX.len()..]
                .parse::<u64>()
                .map_err(|e| corrupt(&key, e.to_string()))?;
            // A full term from now: see the module doc.
            expiries.insert(id, now + self.term());
        }
        Ok(State {
            next_id: reserved + 1,
            reserved,
            expiries,
        })
    }

    /// Opens a new lease: its id and term in milliseconds. The id and the lease
    /// are in storage before this returns.
    pub fn open(&self) -> Result<(u64, u64), CoordinatorError> {
        self.with_state(|state, now| {
            self.sweep(state, now)?;
            if state.next_id > state.reserved {
                let top = state.next_id - 1 + LEASE_ID_BLOCK;
                self.storage.put(RESERVED_KEY, top.to_string().as_bytes())?;
                state.reserved = top;
            }
            let id = state.next_id;
            self.storage.put(&lease_key(id), b"")?;
            state.next_id += 1;
            state.expiries.insert(id, now + self.term());
            Ok((id, self.term_ms()))
        })
    }

    /// Renews lease `id` for another term; `UnknownLease` if it has expired or
    /// was never issued (the client then opens a new one).
    pub fn renew(&self, id: u64) -> Result<u64, CoordinatorError> {
        self.with_state(|state, now| match state.expiries.get_mut(&id) {
            Some(expiry) if *expiry > now => {
                *expiry = now + self.term();
                Ok(self.term_ms())
            }
            _ => {
                self.forget(state, id)?;
                Err(CoordinatorError::UnknownLease(id))
            }
        })
    }

    /// Whether lease `id` is live now.
    pub fn is_live(&self, id: u64) -> Result<bool, CoordinatorError> {
        self.with_state(|state, now| match state.expiries.get(&id) {
            Some(expiry) if *expiry > now => Ok(true),
            Some(_) => {
                self.forget(state, id)?;
                Ok(false)
            }
            None => Ok(false),
        })
    }

    /// The live leases (tests, statistics).
    pub fn live(&self) -> Result<Vec<u64>, CoordinatorError> {
        self.with_state(|state, now| {
            Ok(state
                .expiries
                .iter()
                .filter(|(_, e)| **e > now)
                .map(|(id, _)| *id)
                .collect())
        })
    }

    /// Forgets expired leases (their keys go from storage).
    fn sweep(&self, state: &mut State, now: Instant) -> Result<(), CoordinatorError> {
        let expired: Vec<u64> = state
            .expiries
            .iter()
            .filter(|(_, e)| **e <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.forget(state, id)?;
        }
        Ok(())
    }

    fn forget(&self, state: &mut State, id: u64) -> Result<(), CoordinatorError> {
        if state.expiries.contains_key(&id) {
            self.storage.delete(&lease_key(id))?;
            state.expiries.remove(&id);
        }
        Ok(())
    }
}

fn corrupt(key: &str, reason: String) -> StorageError {
    StorageError::Corrupt {
        key: key.to_owned(),
        reason,
    }
}

fn parse_u64(key: &str, bytes: &[u8]) -> Result<u64, StorageError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| corrupt(key, "not a number".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::MemoryStorage;
    use ramstore_clock::ManualClock;

    fn authority(storage: &Arc<MemoryStorage>, clock: &Arc<ManualClock>) -> ClientLeases {
        ClientLeases::new(storage.clone(), clock.clone(), 1_000)
    }

    #[test]
    fn open_hands_out_increasing_ids_and_reserves_them_in_one_block() {
        let storage = Arc::new(MemoryStorage::default());
        let clock = Arc::new(ManualClock::new());
        let a = authority(&storage, &clock);
        let ids: Vec<u64> = (0..5).map(|_| a.open().expect("open").0).collect();
        assert_eq!(ids, vec![1, 2, 3, 4, 5]);
        assert_eq!(
            storage.get(RESERVED_KEY).expect("get"),
            Some(LEASE_ID_BLOCK.to_string().into_bytes())
        );
    }

    #[test]
    fn open_after_failover_never_reissues_an_id_and_keeps_live_leases() {
        let storage = Arc::new(MemoryStorage::default());
        let clock = Arc::new(ManualClock::new());
        let old = authority(&storage, &clock);
        let (first, _) = old.open().expect("open");
        let (second, _) = old.open().expect("open");
        // A standby takes over on the same storage.
        let new = authority(&storage, &clock);
        assert_eq!(new.live().expect("live"), vec![first, second]);
        assert!(new.is_live(first).expect("check"));
        let (third, _) = new.open().expect("open");
        assert!(
            third > LEASE_ID_BLOCK,
            "{third} may have been issued before"
        );
        assert_eq!(new.renew(second).expect("renew"), 1_000);
    }

    #[test]
    fn renew_of_an_expired_lease_is_unknown_and_forgets_it() {
        let storage = Arc::new(MemoryStorage::default());
        let clock = Arc::new(ManualClock::new());
        let a = authority(&storage, &clock);
        let (id, term) = a.open().expect("open");
        clock.advance(Duration::from_millis(term / 2));
        assert_eq!(a.renew(id).expect("renewed in time"), term);
        clock.advance(Duration::from_millis(term * 3 / 4));
        assert!(a.is_live(id).expect("check"), "the renewal extended it");
        clock.advance(Duration::from_millis(term));
        assert!(!a.is_live(id).expect("check"));
        assert!(matches!(a.renew(id), Err(CoordinatorError::UnknownLease(i)) if i == id));
        assert!(storage.list(LEASE_PREFIX).expect("list").is_empty());
        assert!(matches!(
            a.renew(999),
            Err(CoordinatorError::UnknownLease(999))
        ));
    }
}
