//! Group commit: many threads that each need "my writes are durable" share one
//! `sync_data` call.
//!
//! Syncs run in *rounds*, one at a time. A caller joins the round that has not
//! started yet (creating it if needed) after its writes have returned, so whichever
//! sync that round runs covers them. If no sync is running, the caller leads: it
//! starts the round and syncs; everyone who joined meanwhile waits and takes the same
//! outcome. Callers that arrive while a sync runs form the next round, whose first
//! waiter to wake leads it. With N concurrent writers a round serves up to N of them,
//! so the number of syncs grows with the number of sync *durations* elapsed, not with
//! the number of writes.
//!
//! A failed sync fails every caller of its round, and only them: a later round
//! syncs again (Linux may have dropped the dirty pages of a failed `fdatasync`, so a
//! caller whose round failed can never be told its bytes are durable).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::disk::Disk;

/// Shares syncs between concurrent callers. `Send + Sync`.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<State>,
    finished: Condvar,
    syncs: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// A round's sync is running.
    syncing: bool,
    /// The round new callers join; it starts when the running one (if any) ends.
    next: Option<Arc<Round>>,
}

#[derive(Debug, Default)]
struct Round {
    /// Set once, by the leader, when the round's sync returned.
    outcome: OnceLock<Result<(), SyncFailure>>,
}

/// An `io::Error` reduced to what can be handed to every caller of a round.
#[derive(Debug, Clone)]
struct SyncFailure {
    kind: io::ErrorKind,
    os_code: Option<i32>,
    message: String,
}

impl SyncFailure {
    fn of(e: &io::Error) -> Self {
        Self {
            kind: e.kind(),
            os_code: e.raw_os_error(),
            message: e.to_string(),
        }
    }

    fn to_error(&self) -> io::Error {
        match self.os_code {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(self.kind, self.message.clone()),
        }
    }
}

impl GroupCommit {
    /// Returns once a `sync_data` that started after this call began has returned:
    /// every write that returned before the call is then durable.
    pub(crate) fn sync(&self, disk: &dyn Disk) -> io::Result<()> {
        let mut state = self.state.lock();
        let round = state.next.get_or_insert_with(Arc::default).clone();
        loop {
            if let Some(outcome) = round.outcome.get() {
                return outcome.as_ref().map_err(SyncFailure::to_error).copied();
            }
            if !state.syncing {
                // Our round has not finished and no sync is running: the leader of a
                // round sets its outcome before clearing `syncing` (under this lock),
                // so our round has not started either, and it is still `next`.
                return self.lead(&mut state, disk);
            }
            self.finished.wait(&mut state);
        }
    }

    /// Runs the `next` round's sync with the lock released.
    fn lead(&self, state: &mut MutexGuard<'_, State>, disk: &dyn Disk) -> io::Result<()> {
        let round = state.next.take().unwrap_or_default();
        state.syncing = true;
        let result = MutexGuard::unlocked(state, || disk.sync_data());
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let _ = round
            .outcome
            .set(result.as_ref().map(|_| ()).map_err(SyncFailure::of));
        state.syncing = false;
        self.finished.notify_all();
        result
    }

    /// Syncs run so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;
    use crate::faulty::{FaultPlan, FaultyDisk};
    use std::time::Duration;

    fn slow_disk() -> FaultyDisk<MemDisk> {
        let d = FaultyDisk::new(MemDisk::new());
        d.set_len(1024).unwrap();
        d.set_plan(FaultPlan {
            sync_delay: Duration::from_millis(2),
            ..FaultPlan::default()
        });
        d
    }

    #[test]
    fn sync_single_caller_syncs_once() {
        let g = GroupCommit::default();
        let d = slow_disk();
        d.write_at(0, b"a").unwrap();
        g.sync(&d).unwrap();
        assert_eq!((g.syncs(), d.syncs()), (1, 1));
        assert_eq!(d.inner().unsynced_writes(), 0);
    }

    #[test]
    fn sync_concurrent_callers_share_syncs() {
        const THREADS: u64 = 8;
        const ROUNDS: u64 = 10;
        let g = GroupCommit::default();
        let d = slow_disk();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (g, d) = (&g, &d);
                s.spawn(move || {
                    for i in 0..ROUNDS {
                        d.write_at(t * 16 + i, b"x").unwrap();
                        g.sync(d).unwrap();
                        // Our write returned before our sync call, so it is durable.
                        assert_eq!(d.inner().durable()[(t * 16 + i) as usize], b'x');
                    }
                });
            }
        });
        assert!(
            d.syncs() <= THREADS * ROUNDS / 2,
            "{} syncs for {} callers",
            d.syncs(),
            THREADS * ROUNDS
        );
        assert_eq!(g.syncs(), d.syncs());
    }

    #[test]
    fn sync_failure_reaches_caller_then_next_round_succeeds() {
        let g = GroupCommit::default();
        let d = FaultyDisk::new(MemDisk::new());
        d.set_len(16).unwrap();
        d.set_plan(FaultPlan {
            fail_sync: Some(1),
            ..FaultPlan::default()
        });
        assert!(g.sync(&d).is_err());
        g.sync(&d).unwrap();
    }

    #[test]
    fn sync_failure_fails_whole_round() {
        const THREADS: usize = 6;
        let g = GroupCommit::default();
        let d = FaultyDisk::new(MemDisk::new());
        d.set_len(16).unwrap();
        d.set_plan(FaultPlan {
            fail_sync: Some(2),
            sync_delay: Duration::from_millis(5),
            ..FaultPlan::default()
        });
        let results: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|_| s.spawn(|| g.sync(&d).is_ok()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let failed = results.iter().filter(|ok| !**ok).count();
        // Exactly the callers of round 2 failed: at least one, and a round's outcome
        // is never mixed, so the number of syncs decides the rest.
        assert!(failed >= 1, "{results:?}");
        assert!(d.syncs() >= 2);
        assert_eq!(d.injected_failures(), 1);
    }
}
