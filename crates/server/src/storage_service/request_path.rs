//! The life of one request on this storage server, for both front ends: the native
//! dispatcher ([`super::native`]) and the Redis front end's direct path
//! ([`super::direct`]) each call [`StorageService::serve`] and differ only in how
//! they answer ([`FrontEnd`]). The steps, in order:
//!
//! 1. **Guards** ([`StorageService::refusal`]): a master its backups fenced off, a
//!    zombie (R§7.11), or one not confirmed a live member (no membership lease,
//!    design notes "Membership leases") refuses object operations before they run.
//! 2. **The store call**, which answers and returns the [`Durability`] its answer
//!    needs: the point of the log the objects it read lie at, or "the log's end"
//!    for an update. The point is a value returned by the call, never state left
//!    behind on the thread.
//! 3. **The lease again, for reads**: a freeze between the guard and the read could
//!    outlast the lease, so a read's answer is replaced by the refusal if the lease
//!    ended meanwhile. Writes need no second check: a zombie's replication is
//!    fenced by its backups (R§7.11).
//! 4. **Metrics**: the time from arrival to the answer (not counting the wait).
//! 5. **The replication wait** (R§4.2, docs/design.md §5 "Write" and "Read"): an answer
//!    that shows a state not yet on all R backups goes out only once it is
//!    ([`DurabilityWait`]); a wait that fails is answered SERVER_NOT_UP (fenced off)
//!    or RETRY (timed out).
//!
//! The step a front end cannot take is handed off: the native path hands long
//! work to its slow path ([`Step::HandOff`]), which records its own metrics.
//!
//! Thread-safety: everything here runs on the task that read the request; the
//! deferred answer of step 5 runs on its own task. Nothing here allocates or locks
//! on a read whose objects are durable.

use std::sync::Arc;
use std::time::Instant;

use ramstore_log::ObjectView;
use ramstore_master::ReadError;
use ramstore_wire::{ErrorBody, Opcode, Status};

use super::StorageService;
use crate::metrics::Op;
use crate::replica_manager::{ReplicaManager, ReplicationError};

/// Why a fenced-off master refuses object operations.
pub(crate) const FENCED_MESSAGE: &str =
    "this master was declared crashed (its backups fence it off)";

/// The log point a request's answer must wait for before it goes out (R§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Durability {
    /// Nothing the answer shows can be lost: it goes out at once.
    #[default]
    Now,
    /// Once the log is durable up to this point (segment id, end offset): the end
    /// of the furthest object a read returned, or the log's newest point when a
    /// read found nothing — not the log's newest point in general, so a read never
    /// waits for writes made after its objects (which may not be able to replicate
    /// at all while backups are full).
    UpTo((u64, usize)),
    /// Once the log is durable up to where it stands after the call: an update,
    /// applied or refused (a refused conditional write too: its answer reflects
    /// writes that may not be durable yet).
    LogEnd,
}

impl Durability {
    /// The further of two needs, for a request that read several objects.
    pub(crate) fn max(self, other: Durability) -> Durability {
        match (self, other) {
            (Durability::LogEnd, _) | (_, Durability::LogEnd) => Durability::LogEnd,
            (Durability::UpTo(a), Durability::UpTo(b)) => Durability::UpTo(a.max(b)),
            (Durability::Now, d) | (d, Durability::Now) => d,
        }
    }
}

/// What a store call did: answered (with what its answer must wait for), or left
/// the request to another path.
pub(crate) enum Step<B> {
    Answered(B, Durability),
    /// Not carried out here: the native path's slow path takes it (long work).
    HandOff,
}

/// How a front end answers. The native path appends a response frame to the
/// connection's buffer; the direct path returns a typed answer to the Redis front
/// end. [`StorageService::serve`] decides *when*; the front end decides *what*.
pub(crate) trait FrontEnd {
    /// What a store call answered (the native path: nothing more, the response
    /// frame is already in the buffer).
    type Body;
    /// What the front end gets back from [`StorageService::serve`].
    type Answer;
    /// The answer `refusal` instead of whatever the call answered so far.
    fn refuse(&mut self, refusal: ErrorBody<'static>) -> Self::Body;
    /// Whether `body` may go out only once the log is as durable as the call
    /// needs (the direct path forwards "not carried out here" answers at once).
    fn waits(&self, body: &Self::Body) -> bool;
    /// `body`, answered now.
    fn now(self, body: Self::Body) -> Self::Answer;
    /// `body`, answered once `wait` is over.
    fn later(self, body: Self::Body, wait: DurabilityWait) -> Self::Answer;
    /// The request, left to another path ([`Step::HandOff`]).
    fn hand_off(self) -> Self::Answer;
}

/// A wait until the log is durable up to a point (step 5 of the module doc).
pub(crate) struct DurabilityWait {
    manager: Arc<ReplicaManager>,
    point: (u64, usize),
}

impl DurabilityWait {
    /// Waits until the point is on all R backups; fails when the master was fenced
    /// off meanwhile or the replicas did not acknowledge in time.
    pub(crate) async fn done(self) -> Result<(), ReplicationError> {
        self.manager.wait_durable(self.point).await
    }
}

/// Whether `op` reads or changes objects (what a fenced, zombie or frozen master
/// refuses, R§7.11).
pub(crate) fn is_object_op(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Read
            | Opcode::Write
            | Opcode::Remove
            | Opcode::Increment
            | Opcode::MultiRead
            | Opcode::MultiWrite
            | Opcode::MultiRemove
            | Opcode::Enumerate
            | Opcode::Pull
            | Opcode::PriorityPull
            | Opcode::SetExpiry
            | Opcode::GetExpiry
            | Opcode::WriteExpiring
    )
}

/// Whether `op` only reads objects (checked against the lease again after it read).
fn is_read_only(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Read | Opcode::MultiRead | Opcode::Enumerate | Opcode::GetExpiry
    )
}

impl StorageService {
    /// Serves one request `op` through the steps of the module doc: `call` is the
    /// store call (step 2); everything around it is here, once, for both front
    /// ends.
    pub(crate) fn serve<F: FrontEnd>(
        &self,
        op: Opcode,
        mut front: F,
        call: impl FnOnce(&mut F) -> Step<F::Body>,
    ) -> F::Answer {
        let started = self.clock.now();
        if let Some(refusal) = self.refusal(op, started) {
            let body = front.refuse(refusal);
            self.metrics.record(Op::from(op), started.elapsed());
            return front.now(body);
        }
        let (body, durability) = match call(&mut front) {
            Step::Answered(body, durability) => (body, durability),
            Step::HandOff => return front.hand_off(),
        };
        let finished = self.clock.now();
        let body = match self.lease_lost_while_reading(op, finished) {
            Some(refusal) => front.refuse(refusal),
            None => body,
        };
        self.metrics
            .record(Op::from(op), finished.saturating_duration_since(started));
        match self.durability_wait(durability) {
            Some(wait) if front.waits(&body) => front.later(body, wait),
            _ => front.now(body),
        }
    }

    /// The refusal of an operation this master must not carry out now, checked
    /// before it runs (step 1): fenced off or a zombie (SERVER_NOT_UP), or not
    /// confirmed to be a live member (RETRY, [`Self::unconfirmed_refusal`]).
    pub(crate) fn refusal(&self, op: Opcode, now: Instant) -> Option<ErrorBody<'static>> {
        if !is_object_op(op) {
            return None;
        }
        if self.is_fenced_off() {
            return Some(ErrorBody::Message {
                status: Status::ServerNotUp,
                message: FENCED_MESSAGE,
            });
        }
        self.unconfirmed_refusal(now)
    }

    /// A master its backups fenced off (R§7.11: the coordinator declared it
    /// crashed) serves no object operation any more — not even a read, whose value
    /// may since have been overwritten on the master that recovered it. A zombie
    /// (R§7.11, `crate::failure_monitor`) refuses them too.
    fn is_fenced_off(&self) -> bool {
        self.is_zombie() || self.replicas.as_ref().is_some_and(|m| m.is_fenced())
    }

    /// The refusal that replaces a read's answer if the membership lease ended
    /// while it read (step 3): the lease must hold when the value was read, not
    /// only when the request arrived. The slow path asks it after an enumeration.
    pub(crate) fn lease_lost_while_reading(
        &self,
        op: Opcode,
        now: Instant,
    ) -> Option<ErrorBody<'static>> {
        if !is_read_only(op) {
            return None;
        }
        self.unconfirmed_refusal(now)
    }

    /// What an answer needing `durability` must wait for (step 5), or `None` to
    /// answer at once: always `None` for a master that does not replicate.
    pub(crate) fn durability_wait(&self, durability: Durability) -> Option<DurabilityWait> {
        let manager = self.replicas.as_ref()?;
        let point = match durability {
            Durability::Now => return None,
            Durability::UpTo(point) if manager.is_durable(point) => return None,
            Durability::UpTo(point) => point,
            Durability::LogEnd => manager.pending_sync_point()?,
        };
        Some(DurabilityWait {
            manager: manager.clone(),
            point,
        })
    }

    /// What the answer to a read that returned `view` must wait for: a read never
    /// returns an object beyond the durable point (DESIGN §1).
    pub(crate) fn read_durability(&self, view: &ObjectView<'_>) -> Durability {
        let log = self.store.log();
        if self.replicas.is_none() || log.is_read_durable(view.location()) {
            return Durability::Now;
        }
        let (segment, offset) = log.position_of(view.location());
        Durability::UpTo((segment, offset + view.entry_len()))
    }

    /// What the answer to a read that found no object must wait for: the log's
    /// newest point. The object may be absent because of a delete whose tombstone
    /// is not durable yet, and a master that crashes (or a zombie cut off from its
    /// backups) loses that delete, so answering "doesn't exist" at once would show
    /// a state that never became durable (DESIGN §1). The hash table keeps no trace
    /// of a deleted key, so the wait is for the whole log, not the tombstone's own
    /// place. Regression: the partition test's zombie probe saw a key read as
    /// absent from a cut-off master, then with its old value after recovery.
    pub(crate) fn miss_durability(&self, e: ReadError) -> Durability {
        let Some(manager) = &self.replicas else {
            return Durability::Now;
        };
        if !matches!(e, ReadError::ObjectDoesntExist) {
            return Durability::Now;
        }
        manager
            .pending_sync_point()
            .map_or(Durability::Now, Durability::UpTo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_backup::BackupClient;
    use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig};
    use ramstore_rpc::LocalTransport;

    const TABLE: u64 = 7;

    /// A master owning all of `TABLE`; with `stalled_replicas`, it replicates with
    /// R = 1 through a manager never started, so nothing becomes durable.
    fn master(stalled_replicas: bool) -> StorageService {
        let mut config = StoreConfig::new(16 << 20);
        config.segment_bytes = 128 * 1024;
        config.cleaner = CleanerMode::Manual;
        let manager = stalled_replicas.then(|| {
            let client = BackupClient::new(Arc::new(LocalTransport::new()));
            ReplicaManager::new(1, client, 1, ramstore_clock::system_clock())
        });
        if let Some(m) = &manager {
            config.replicas = m.clone();
        }
        let store = ObjectStore::new(config).expect("store");
        store.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
        let service = StorageService::new(store);
        match manager {
            Some(m) => service.with_replicas(m),
            None => service,
        }
    }

    /// A front end that reports what the path did with its answer.
    struct Probe;

    impl FrontEnd for Probe {
        type Body = Result<&'static str, Status>;
        type Answer = (&'static str, Result<&'static str, Status>);
        fn refuse(&mut self, refusal: ErrorBody<'static>) -> Self::Body {
            Err(refusal.status())
        }
        fn waits(&self, _: &Self::Body) -> bool {
            true
        }
        fn now(self, body: Self::Body) -> Self::Answer {
            ("now", body)
        }
        fn later(self, body: Self::Body, _: DurabilityWait) -> Self::Answer {
            ("later", body)
        }
        fn hand_off(self) -> Self::Answer {
            ("handed off", Ok(""))
        }
    }

    #[test]
    fn serve_refused_by_a_guard_never_runs_the_store_call() {
        let m = master(false);
        m.declare_zombie("test");
        let mut ran = false;
        let answer = m.serve(Opcode::Write, Probe, |_| {
            ran = true;
            Step::Answered(Ok("written"), Durability::LogEnd)
        });
        assert_eq!(answer, ("now", Err(Status::ServerNotUp)));
        assert!(!ran, "a zombie carried a write out");
        assert_eq!(m.metrics.count(Op::Write), 1, "a refusal is still measured");
    }

    #[test]
    fn serve_lets_a_zombie_answer_what_is_not_an_object_operation() {
        let m = master(false);
        m.declare_zombie("test");
        let answer = m.serve(Opcode::Ping, Probe, |_| {
            Step::Answered(Ok("pong"), Durability::Now)
        });
        assert_eq!(answer, ("now", Ok("pong")));
    }

    #[test]
    fn serve_hand_off_leaves_the_metrics_to_the_path_that_takes_it() {
        let m = master(false);
        let answer = m.serve(Opcode::Enumerate, Probe, |_| Step::HandOff);
        assert_eq!(answer.0, "handed off");
        assert_eq!(m.metrics.count(Op::Enumerate), 0);
    }

    #[test]
    fn serve_update_answer_waits_only_when_the_master_replicates() {
        for (stalled, expected) in [(false, "now"), (true, "later")] {
            let m = master(stalled);
            let answer = m.serve(Opcode::Write, Probe, |_| {
                m.store
                    .write(TABLE, b"k", b"v", &RejectRules::default())
                    .expect("written");
                Step::Answered(Ok("written"), Durability::LogEnd)
            });
            assert_eq!(answer, (expected, Ok("written")), "replicating: {stalled}");
            assert_eq!(m.metrics.count(Op::Write), 1);
        }
    }

    #[test]
    fn read_object_returns_the_durability_its_answer_needs() {
        let plain = master(false);
        plain
            .store
            .write(TABLE, b"k", b"v", &RejectRules::default())
            .expect("written");
        assert_eq!(plain.read_object(TABLE, b"k", |_| ()).1, Durability::Now);
        assert_eq!(plain.read_object(TABLE, b"gone", |_| ()).1, Durability::Now);

        let stalled = master(true);
        stalled
            .store
            .write(TABLE, b"k", b"v", &RejectRules::default())
            .expect("written");
        let (found, needs) = stalled.read_object(TABLE, b"k", |view| view.version());
        assert!(found.is_ok());
        assert!(matches!(needs, Durability::UpTo(_)), "{needs:?}");
        // A miss waits for the log's newest point, which is at least the object's.
        let (missed, miss_needs) = stalled.read_object(TABLE, b"gone", |_| ());
        assert_eq!(missed, Err(ReadError::ObjectDoesntExist));
        assert_eq!(miss_needs.max(needs), miss_needs);
        assert!(matches!(miss_needs, Durability::UpTo(_)), "{miss_needs:?}");
    }

    #[test]
    fn durability_max_takes_the_further_need() {
        let a = Durability::UpTo((1, 10));
        let b = Durability::UpTo((2, 0));
        assert_eq!(a.max(b), b);
        assert_eq!(b.max(a), b);
        assert_eq!(Durability::Now.max(a), a);
        assert_eq!(a.max(Durability::Now), a);
        assert_eq!(a.max(Durability::LogEnd), Durability::LogEnd);
        assert_eq!(Durability::Now.max(Durability::Now), Durability::Now);
    }

    #[test]
    fn is_object_op_covers_reads_and_updates_only() {
        assert!(is_object_op(Opcode::Read));
        assert!(is_object_op(Opcode::MultiWrite));
        assert!(is_object_op(Opcode::Enumerate));
        assert!(is_object_op(Opcode::SetExpiry));
        assert!(is_object_op(Opcode::GetExpiry));
        assert!(is_object_op(Opcode::WriteExpiring));
        assert!(!is_object_op(Opcode::Ping));
        assert!(!is_object_op(Opcode::GetServerStats));
        assert!(!is_object_op(Opcode::BackupWrite));
    }
}
