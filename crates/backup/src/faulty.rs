//! A fault-injecting [`Disk`] wrapper (docs/design.md §7): fails the N-th write or the N-th
//! sync, runs out of space after a byte budget, and can make syncs slow. It also
//! counts writes and syncs, which is how tests see group commit at work.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use ramstore_clock::{system_clock, Clock};

use crate::disk::Disk;

/// What a [`FaultyDisk`] does wrong. Counts are 1-based and refer to operations made
/// after the plan was installed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// The write with this number fails (once).
    pub fail_write: Option<u64>,
    /// A failing write first writes the first half of its bytes, as a write cut
    /// short by the device would; otherwise it writes nothing.
    pub tear_failed_write: bool,
    /// The sync with this number fails (once), without syncing anything.
    pub fail_sync: Option<u64>,
    /// Writes fail with `ENOSPC` once they would take the bytes written since the
    /// plan was installed above this budget (a thin-provisioned or shared device
    /// filling up).
    pub space_bytes: Option<u64>,
    /// Every sync sleeps this long first (a busy disk), on the disk's clock.
    pub sync_delay: Duration,
}

/// A [`Disk`] that wraps another and misbehaves as its [`FaultPlan`] says.
#[derive(Debug)]
pub struct FaultyDisk<D> {
    inner: D,
    plan: Mutex<PlanState>,
    writes: AtomicU64,
    syncs: AtomicU64,
    failures: AtomicU64,
    /// The clock slow syncs sleep on.
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct PlanState {
    plan: FaultPlan,
    writes: u64,
    syncs: u64,
    bytes: u64,
}

impl<D: Disk> FaultyDisk<D> {
    /// A wrapper that does nothing wrong until [`FaultyDisk::set_plan`]; slow
    /// syncs sleep on the system clock.
    pub fn new(inner: D) -> Self {
        Self::with_clock(inner, system_clock())
    }

    /// [`FaultyDisk::new`] whose slow syncs sleep on `clock` (a simulated disk).
    pub fn with_clock(inner: D, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner,
            plan: Mutex::new(PlanState::default()),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            clock,
        }
    }

    /// Installs `plan`, restarting its operation and byte counts from zero.
    pub fn set_plan(&self, plan: FaultPlan) {
        *self.plan.lock() = PlanState {
            plan,
            ..PlanState::default()
        };
    }

    /// Removes every fault.
    pub fn heal(&self) {
        self.set_plan(FaultPlan::default());
    }

    /// Writes attempted since creation (failed ones included).
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Syncs attempted since creation (failed ones included).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Operations failed on purpose since creation.
    pub fn injected_failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The wrapped disk.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn injected(&self, e: io::Error) -> io::Error {
        self.failures.fetch_add(1, Ordering::Relaxed);
        e
    }
}

impl<D: Disk> Disk for FaultyDisk<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let (fail, tear, full) = {
            let mut p = self.plan.lock();
            p.writes += 1;
            let fail = p.plan.fail_write == Some(p.writes);
            let total = p.bytes.saturating_add(bytes.len() as u64);
            let full = p.plan.space_bytes.is_some_and(|space| total > space);
            if !fail && !full {
                p.bytes = total;
            }
            (fail, p.plan.tear_failed_write, full)
        };
        if full {
            return Err(self.injected(io::Error::from_raw_os_error(libc::ENOSPC)));
        }
        if fail {
            if tear {
                self.inner.write_at(offset, &bytes[..bytes.len() / 2])?;
            }
            return Err(self.injected(io::Error::other("injected write failure")));
        }
        self.inner.write_at(offset, bytes)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let (fail, delay) = {
            let mut p = self.plan.lock();
            p.syncs += 1;
            (p.plan.fail_sync == Some(p.syncs), p.plan.sync_delay)
        };
        if !delay.is_zero() {
            self.clock.sleep_blocking(delay);
        }
        if fail {
            return Err(self.injected(io::Error::other("injected sync failure")));
        }
        self.inner.sync_data()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::MemDisk;

    fn disk() -> FaultyDisk<MemDisk> {
        let d = FaultyDisk::new(MemDisk::new());
        d.set_len(64).unwrap();
        d
    }

    #[test]
    fn fail_write_fails_exactly_nth() {
        let d = disk();
        d.set_plan(FaultPlan {
            fail_write: Some(2),
            ..FaultPlan::default()
        });
        d.write_at(0, b"a").unwrap();
        assert!(d.write_at(1, b"b").is_err());
        d.write_at(2, b"c").unwrap();
        assert_eq!(&d.inner().snapshot()[..3], b"a\0c");
        assert_eq!((d.writes(), d.injected_failures()), (3, 1));
    }

    #[test]
    fn fail_write_torn_writes_half() {
        let d = disk();
        d.set_plan(FaultPlan {
            fail_write: Some(1),
            tear_failed_write: true,
            ..FaultPlan::default()
        });
        assert!(d.write_at(0, b"abcd").is_err());
        assert_eq!(&d.inner().snapshot()[..4], b"ab\0\0");
    }

    #[test]
    fn fail_sync_fails_exactly_nth_and_syncs_nothing() {
        let d = disk();
        d.set_plan(FaultPlan {
            fail_sync: Some(1),
            ..FaultPlan::default()
        });
        d.write_at(0, b"x").unwrap();
        assert!(d.sync_data().is_err());
        assert_eq!(d.inner().unsynced_writes(), 1);
        d.sync_data().unwrap();
        assert_eq!(d.inner().unsynced_writes(), 0);
        assert_eq!(d.syncs(), 2);
    }

    #[test]
    fn space_bytes_reports_enospc() {
        let d = disk();
        d.set_plan(FaultPlan {
            space_bytes: Some(5),
            ..FaultPlan::default()
        });
        d.write_at(0, b"abc").unwrap();
        let e = d.write_at(3, b"def").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        d.write_at(3, b"de").unwrap();
        assert!(d.write_at(5, b"f").is_err());
        d.heal();
        d.write_at(5, b"f").unwrap();
    }

    #[test]
    fn sync_data_with_a_delay_returns_only_when_its_clock_has_passed_it() {
        let clock = ramstore_clock::ManualClock::new();
        let d = Arc::new(FaultyDisk::with_clock(MemDisk::new(), clock.handle()));
        d.set_len(64).unwrap();
        d.set_plan(FaultPlan {
            sync_delay: Duration::from_millis(5),
            ..FaultPlan::default()
        });
        let syncing = std::thread::spawn({
            let d = d.clone();
            move || d.sync_data().is_ok()
        });
        assert!(clock.wait_for_sleepers(1, Duration::from_secs(10)));
        assert_eq!(
            clock.sleepers(),
            vec![clock.origin() + Duration::from_millis(5)]
        );
        clock.advance(Duration::from_millis(4));
        // 4 ms in: still waiting (a thread that returned would have left the list).
        assert_eq!(
            clock.sleepers(),
            vec![clock.origin() + Duration::from_millis(5)]
        );
        assert!(!syncing.is_finished());
        clock.advance(Duration::from_millis(1));
        assert!(syncing.join().unwrap_or(false));
        assert!(clock.sleepers().is_empty());
    }
}
