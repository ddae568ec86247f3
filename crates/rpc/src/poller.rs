//! Poll before sleeping: after a connection of an event loop has read requests,
//! the loop keeps polling its sockets for a short window instead of going to
//! sleep in `epoll_wait` as soon as it runs out of work.
//!
//! Why: on a small machine the client and the server share the cores, and a
//! loop that sleeps between every round of requests pays a wake-up (a context
//! switch, and the kernel's work to put the thread back on a core; on this VM an
//! idle vCPU is halted and takes tens of µs to wake) per round. Under 50
//! connections ramstore's Redis loop slept about four times as often as Redis's
//! for the same requests (docs/benchmarks.md, issue 7, "Experiment (14:45)").
//! RAMCloud's servers poll rather than sleep (R§5.1), and its idle workers poll
//! for 10 ms before they block (R§5.3); this is the same idea with a shorter
//! bound, so an idle server costs nothing.
//!
//! How: a task on the loop's runtime ([`Poller::run`]) yields over and over while
//! requests keep arriving. A yielding task makes tokio's single-threaded
//! scheduler poll its I/O driver with a zero timeout before running the task
//! again, so a request that arrives meanwhile is read at once — unlike a spin in
//! a park hook, which would leave it waiting until the spin ends (that variant
//! was measured and dropped: it doubled `-c 1` latency). Once no connection has
//! read anything for the window, the task waits for the next activity and the
//! loop sleeps in `epoll_wait` as before.
//!
//! Who reports: the Redis front end's connections (`ramstore_resp`) and, when
//! served with [`crate::serve_with_poller`], the native RPC server's connections
//! call [`Poller::activity`] after every read; a reply that waits for
//! replication (a RESP reply queued behind a write, a native
//! [`crate::Handled::Deferred`] answer) is a *durability wait* from
//! [`Poller::durability_wait_started`] until its answer is known.
//!
//! A loop of its own does not poll while any of its replies waits for
//! replication: the reply is then woken by another thread, not by a socket, and
//! a polling loop would take the core the replication path (and, in `ramstore
//! dev`, the backups) needs — measured: R=2 SET at `-c 50` lost about 15% with
//! polling. The end of the last wait counts as activity: its reply goes out at
//! once and the client's next request follows within a round trip. A loop that
//! *shares* its runtime with the servers it replicates to
//! ([`Poller::sharing_runtime`]: `ramstore dev`'s one event loop, one poller for
//! every server's native port and the Redis port) keeps polling through those
//! waits: there the replication path runs on the same thread, and polling is
//! what reads the backups' requests and acknowledgements at once. Every
//! connection on that loop — clients', and the servers' BackupWrites to each
//! other — reports to the one poller, so replication traffic keeps it polling
//! too (docs/design-notes.md, "Polling before sleeping").
//!
//! Thread-safety: one [`Poller`] belongs to one event loop; its connections (on
//! the same thread) call [`Poller::activity`]. The read counter is updated with a
//! plain load and store for that reason (a lost update from a misuse across
//! threads only shifts the window); the durability-wait counter uses atomic
//! read-modify-writes, so it stays exact even then (a lost decrement would stop
//! a loop of its own from ever polling again). A disabled poller (window 0)
//! touches no shared state at all, so one may be shared by any number of
//! threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// The default polling window (`--resp-poll-us`, `ramstore dev --poll-us`):
/// longer than a client on the same machine takes to answer a reply with its
/// next request (tens of µs on loopback), short enough that a server with a
/// request every few milliseconds polls for a few percent of a core.
pub const DEFAULT_POLL_BEFORE_SLEEP_US: u64 = 50;

/// Longest polling window accepted: beyond this the loop is simply busy.
pub const MAX_POLL_BEFORE_SLEEP_US: u64 = 10_000;

/// A gap this long between two rounds of polling (the loop ran other tasks, or
/// the thread was off its core) makes the poller ask the kernel whether the
/// thread was preempted: one `getrusage` only after such gaps, none per round.
const PREEMPTION_CHECK_GAP: Duration = Duration::from_micros(50);

/// How long a poller whose thread was preempted while polling leaves off
/// polling: the core is wanted by other threads, so polling would only hold it
/// and leave requests waiting for the scheduler (see the module documentation).
pub const PREEMPTED_BACKOFF: Duration = Duration::from_millis(10);

/// Keeps one event loop polling while its connections are active; see the
/// module documentation.
#[derive(Debug)]
pub struct Poller {
    window: Duration,
    /// Rounds of reads connections have made; the poller watches it change.
    reads: AtomicU64,
    /// Whether [`Poller::run`] is polling (otherwise it waits on `wake`).
    polling: AtomicBool,
    /// Replies of this loop's connections waiting for replication.
    durability_waits: AtomicU64,
    /// Whether to keep polling while replies wait for replication (the loop
    /// shares the runtime that drives replication; see the module doc).
    poll_during_waits: bool,
    wake: Notify,
    /// The calling thread's involuntary context switches so far (`None` where
    /// the kernel does not say); a field so that tests can stand in for it.
    preemptions: fn() -> Option<u64>,
    /// Times polling was cut short because the thread was preempted.
    backoffs: AtomicU64,
}

impl Poller {
    /// A poller that polls for `window_us` µs after the last activity (capped at
    /// [`MAX_POLL_BEFORE_SLEEP_US`]); 0 turns polling off.
    pub fn new(window_us: u64) -> Self {
        Self {
            window: Duration::from_micros(window_us.min(MAX_POLL_BEFORE_SLEEP_US)),
            reads: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            durability_waits: AtomicU64::new(0),
            poll_during_waits: false,
            wake: Notify::new(),
            preemptions: thread_preemptions,
            backoffs: AtomicU64::new(0),
        }
    }

    /// A poller for a loop that shares the runtime its replication runs on
    /// (one thread serves clients, the master's replication and, in `ramstore
    /// dev`, the backups): it keeps polling while replies wait for replication,
    /// since their acknowledgements arrive on this very loop. `ramstore dev`
    /// gives one to every server's native port and to the Redis port.
    pub fn sharing_runtime(window_us: u64) -> Self {
        Self {
            poll_during_waits: true,
            ..Self::new(window_us)
        }
    }

    /// Whether this poller polls at all.
    pub fn enabled(&self) -> bool {
        !self.window.is_zero()
    }

    /// Called by a connection each time it read requests from its socket.
    #[inline]
    pub fn activity(&self) {
        if !self.enabled() {
            return;
        }
        // One thread only (see the module documentation): a load and a store
        // are enough, no read-modify-write is needed.
        self.reads.store(
            self.reads.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Relaxed,
        );
        if !self.polling.load(Ordering::Relaxed) && !self.waiting_for_durability() {
            self.polling.store(true, Ordering::Relaxed);
            // Stores a permit if `run` is between rounds, so no activity is missed.
            self.wake.notify_one();
        }
    }

    /// A connection queued a reply that waits for replication; it calls
    /// [`Poller::durability_wait_done`] once the reply is known (or dropped).
    /// A disabled poller counts nothing (see the module doc, thread-safety).
    #[inline]
    pub fn durability_wait_started(&self) {
        if !self.enabled() {
            return;
        }
        self.durability_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// The end of one [`Poller::durability_wait_started`].
    #[inline]
    pub fn durability_wait_done(&self) {
        if !self.enabled() {
            return;
        }
        // Never below zero: an unmatched end is a bug, not a reason to wrap to
        // "waiting forever".
        let n = self
            .durability_waits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .unwrap_or(0);
        debug_assert!(n > 0, "more durability waits ended than started");
        if n == 1 {
            // The reply just became known and is written now; the client's next
            // command follows within a round trip: poll for it rather than sleep
            // (without this every durable write's successor paid a wake-up).
            self.activity();
        }
    }

    /// Whether polling must pause because replies wait for replication driven
    /// by another thread.
    fn waiting_for_durability(&self) -> bool {
        !self.poll_during_waits && self.durability_waits.load(Ordering::Relaxed) > 0
    }

    /// A durability wait that ends when the returned guard is dropped — when
    /// its answer is known, or when the task awaiting it is dropped (a closed
    /// connection), so no wait is ever left counted.
    pub fn durability_wait(self: &Arc<Self>) -> DurabilityWait {
        self.durability_wait_started();
        DurabilityWait(self.clone())
    }

    /// Polls after each burst of activity until none came for the window; runs
    /// until dropped with the loop's runtime. Returns at once when disabled.
    pub async fn run(&self) {
        if !self.enabled() {
            return;
        }
        loop {
            self.wake.notified().await;
            let preempted = self.poll_until_idle().await;
            self.polling.store(false, Ordering::Relaxed);
            if preempted {
                self.backoffs.fetch_add(1, Ordering::Relaxed);
                // Activity meanwhile stores a permit: polling resumes after the
                // back-off if requests kept coming.
                tokio::time::sleep(PREEMPTED_BACKOFF).await;
            }
        }
    }

    /// Polls until no activity came for the window (false), or until the
    /// thread was preempted while polling (true).
    async fn poll_until_idle(&self) -> bool {
        let mut seen = self.reads.load(Ordering::Relaxed);
        let mut idle_since = Instant::now();
        let mut last_round = idle_since;
        let switches_before = (self.preemptions)();
        loop {
            // Tokio polls the I/O driver without blocking before running a task
            // that yielded again: this is where arriving requests are picked up.
            tokio::task::yield_now().await;
            if self.waiting_for_durability() {
                return false;
            }
            let reads = self.reads.load(Ordering::Relaxed);
            let now = Instant::now();
            // A polling thread that the kernel preempts waits for its next time
            // slice with a request possibly in its socket — far longer than the
            // wake-up polling saves, since a sleeping thread is woken ahead of
            // the busy ones. So on a loaded machine stop polling (RAMCloud polls
            // on cores of its own, R§5.1; here the cores are shared).
            if now.duration_since(last_round) >= PREEMPTION_CHECK_GAP
                && switches_before.is_some()
                && (self.preemptions)() != switches_before
            {
                return true;
            }
            last_round = now;
            if reads != seen {
                seen = reads;
                idle_since = now;
            } else if now.duration_since(idle_since) >= self.window {
                return false;
            }
        }
    }

    /// Spawns [`Poller::run`] on the current runtime (which must be the loop
    /// whose connections report to this poller). Exactly one such task per
    /// poller: its owner spawns it and aborts it when the loop stops.
    pub fn spawn(self: &Arc<Self>) -> JoinHandle<()> {
        let poller = self.clone();
        tokio::spawn(async move { poller.run().await })
    }

    /// Whether [`Poller::run`] is polling now (tests).
    pub fn is_polling(&self) -> bool {
        self.polling.load(Ordering::Relaxed)
    }

    /// Rounds of reads reported so far by [`Poller::activity`] (tests; always 0
    /// when disabled).
    pub fn activity_rounds(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Replies waiting for replication now (tests; always 0 when disabled).
    pub fn durability_waits(&self) -> u64 {
        self.durability_waits.load(Ordering::Relaxed)
    }

    /// Times polling stopped early because the loop's thread was preempted
    /// (each followed by [`PREEMPTED_BACKOFF`] without polling).
    pub fn preempted_backoffs(&self) -> u64 {
        self.backoffs.load(Ordering::Relaxed)
    }
}

/// The calling thread's involuntary context switches (`getrusage(RUSAGE_THREAD)`).
#[cfg(target_os = "linux")]
fn thread_preemptions() -> Option<u64> {
    // SAFETY: `getrusage` only writes the struct it is given, which is valid
    // for writes and zero-initialised (all-zero is a valid `rusage`).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD names the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    (rc == 0).then_some(usage.ru_nivcsw as u64)
}

/// Elsewhere the kernel does not say: the poller never backs off.
#[cfg(not(target_os = "linux"))]
fn thread_preemptions() -> Option<u64> {
    None
}

/// One durability wait of a [`Poller`], ended when dropped
/// ([`Poller::durability_wait`]).
#[derive(Debug)]
pub struct DurabilityWait(Arc<Poller>);

impl Drop for DurabilityWait {
    fn drop(&mut self) {
        self.0.durability_wait_done();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    use proptest::prelude::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds")
    }

    #[test]
    fn run_returns_at_once_when_disabled() {
        let poller = Poller::new(0);
        assert!(!poller.enabled());
        runtime().block_on(poller.run());
        poller.activity();
        assert!(!poller.is_polling());
    }

    #[test]
    fn new_caps_the_window() {
        let poller = Poller::new(u64::MAX);
        assert_eq!(
            poller.window,
            Duration::from_micros(MAX_POLL_BEFORE_SLEEP_US)
        );
    }

    #[test]
    fn activity_starts_polling_which_stops_after_the_window() {
        let rt = runtime();
        rt.block_on(async {
            let poller = Arc::new(Poller::new(2_000));
            let task = poller.spawn();
            tokio::task::yield_now().await;
            assert!(!poller.is_polling(), "no activity yet");
            poller.activity();
            assert!(poller.is_polling());
            // Activity keeps it polling past one window.
            let started = Instant::now();
            while started.elapsed() < Duration::from_millis(6) {
                poller.activity();
                tokio::task::yield_now().await;
            }
            assert!(poller.is_polling(), "stopped polling while still active");
            // Then it stops within a window or so once activity ends (generous
            // bound: the machine may be busy).
            let quiet = Instant::now();
            while poller.is_polling() {
                assert!(
                    quiet.elapsed() < Duration::from_secs(5),
                    "still polling long after the last activity"
                );
                tokio::task::yield_now().await;
            }
            // And starts again with the next activity.
            poller.activity();
            assert!(poller.is_polling());
            task.abort();
        });
    }

    #[test]
    fn durability_waits_stop_polling_and_keep_it_from_starting() {
        let rt = runtime();
        rt.block_on(async {
            let poller = Arc::new(Poller::new(MAX_POLL_BEFORE_SLEEP_US));
            let task = poller.spawn();
            poller.activity();
            assert!(poller.is_polling());
            poller.durability_wait_started();
            // The poller leaves off at its next round although reads continue.
            for _ in 0..10 {
                poller.activity();
                tokio::task::yield_now().await;
            }
            assert!(
                !poller.is_polling(),
                "polled while a reply waited for replication"
            );
            poller.activity();
            assert!(!poller.is_polling());
            poller.durability_wait_done();
            assert!(poller.is_polling(), "the end of the last wait is activity");
            task.abort();
        });
    }

    #[test]
    fn sharing_runtime_keeps_polling_through_durability_waits() {
        let rt = runtime();
        rt.block_on(async {
            let poller = Arc::new(Poller::sharing_runtime(MAX_POLL_BEFORE_SLEEP_US));
            let task = poller.spawn();
            poller.durability_wait_started();
            poller.activity();
            assert!(
                poller.is_polling(),
                "a wait kept a sharing loop from polling"
            );
            for _ in 0..10 {
                poller.activity();
                tokio::task::yield_now().await;
            }
            assert!(
                poller.is_polling(),
                "a sharing loop stopped polling while its acknowledgements were due"
            );
            poller.durability_wait_done();
            task.abort();
        });
    }

    #[test]
    fn polling_lets_sockets_be_served() {
        // While the poller spins, a connection on the same current-thread loop
        // still gets its data: the yield polls the I/O driver.
        let rt = runtime();
        rt.block_on(async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let poller = Arc::new(Poller::new(MAX_POLL_BEFORE_SLEEP_US));
            poller.spawn();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let server = tokio::spawn({
                let poller = poller.clone();
                async move {
                    let (mut s, _) = listener.accept().await.unwrap();
                    let mut buf = [0u8; 4];
                    for _ in 0..100 {
                        s.read_exact(&mut buf).await.unwrap();
                        poller.activity();
                        s.write_all(&buf).await.unwrap();
                    }
                }
            });
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            for i in 0..100u32 {
                c.write_all(&i.to_le_bytes()).await.unwrap();
                let mut buf = [0u8; 4];
                c.read_exact(&mut buf).await.unwrap();
                assert_eq!(u32::from_le_bytes(buf), i);
            }
            server.await.unwrap();
        });
    }

    thread_local! {
        /// What [`fake_preemptions`] reports: each test runs on its own thread,
        /// and its current-thread runtime (the poller included) on that thread.
        static FAKE_SWITCHES: Cell<u64> = const { Cell::new(0) };
    }

    fn fake_preemptions() -> Option<u64> {
        Some(FAKE_SWITCHES.with(Cell::get))
    }

    /// A poller whose window never runs out in a test and whose view of the
    /// thread's preemptions is [`FAKE_SWITCHES`].
    fn test_poller(sharing: bool) -> Arc<Poller> {
        let base = if sharing {
            Poller::sharing_runtime(1)
        } else {
            Poller::new(1)
        };
        Arc::new(Poller {
            window: Duration::from_secs(3600),
            preemptions: fake_preemptions,
            ..base
        })
    }

    /// Keeps the loop's thread busy (off the poller) for `d`: a gap between two
    /// polling rounds, as a preemption or a long request leaves.
    fn hold_the_thread(d: Duration) {
        let started = Instant::now();
        while started.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn run_backs_off_when_the_thread_was_preempted() {
        let rt = runtime();
        rt.block_on(async {
            let poller = test_poller(true);
            let task = poller.spawn();
            poller.activity();
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert!(poller.is_polling());
            // The kernel took the core away meanwhile: the poller leaves off.
            FAKE_SWITCHES.with(|c| c.set(c.get() + 1));
            hold_the_thread(PREEMPTION_CHECK_GAP * 2);
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert_eq!(poller.preempted_backoffs(), 1);
            assert!(!poller.is_polling(), "kept polling on a contended core");
            task.abort();
        });
    }

    #[test]
    fn run_keeps_polling_through_a_gap_without_preemption() {
        let rt = runtime();
        rt.block_on(async {
            let poller = test_poller(true);
            let task = poller.spawn();
            poller.activity();
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            // A long request on the loop is no reason to stop.
            hold_the_thread(PREEMPTION_CHECK_GAP * 2);
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert_eq!(poller.preempted_backoffs(), 0);
            assert!(poller.is_polling());
            task.abort();
        });
    }

    #[test]
    fn run_polls_again_after_the_backoff_if_requests_kept_coming() {
        let rt = runtime();
        rt.block_on(async {
            let poller = test_poller(true);
            let task = poller.spawn();
            poller.activity();
            tokio::task::yield_now().await;
            FAKE_SWITCHES.with(|c| c.set(c.get() + 1));
            hold_the_thread(PREEMPTION_CHECK_GAP * 2);
            while poller.preempted_backoffs() == 0 {
                tokio::task::yield_now().await;
            }
            // Activity during the back-off: polling resumes once it is over.
            poller.activity();
            tokio::time::sleep(PREEMPTED_BACKOFF * 2).await;
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
            assert!(poller.is_polling());
            let rounds = poller.activity_rounds();
            poller.activity();
            assert_eq!(poller.activity_rounds(), rounds + 1);
            task.abort();
        });
    }

    #[test]
    fn durability_wait_ends_when_the_guard_drops() {
        let poller = Arc::new(Poller::sharing_runtime(MAX_POLL_BEFORE_SLEEP_US));
        let wait = poller.durability_wait();
        assert_eq!(poller.durability_waits(), 1);
        let rounds = poller.activity_rounds();
        drop(wait);
        assert_eq!(poller.durability_waits(), 0);
        assert_eq!(
            poller.activity_rounds(),
            rounds + 1,
            "the end of the last wait is activity"
        );
    }

    #[test]
    fn disabled_poller_counts_nothing() {
        let poller = Arc::new(Poller::new(0));
        let wait = poller.durability_wait();
        poller.activity();
        assert_eq!(poller.durability_waits(), 0);
        assert_eq!(poller.activity_rounds(), 0);
        drop(wait);
        assert_eq!(poller.durability_waits(), 0);
    }

    /// One step of the model test.
    #[derive(Debug, Clone)]
    enum Step {
        /// A connection read requests.
        Activity,
        /// A reply started waiting for replication.
        WaitStarted,
        /// The oldest outstanding wait ended (ignored when none is).
        WaitDone,
        /// The loop ran: the poller task got a few turns.
        Turns,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            Just(Step::Activity),
            Just(Step::WaitStarted),
            Just(Step::WaitDone),
            Just(Step::Turns),
        ]
    }

    proptest! {
        /// The poller against a model of its rules (window never running out,
        /// no preemption): activity starts polling unless a loop of its own has
        /// replies waiting for replication; such a wait stops polling at the
        /// poller's next turn; the end of the last wait is activity; a sharing
        /// loop ignores waits; the counters match the model's exactly.
        #[test]
        fn poller_follows_the_model(sharing in any::<bool>(), steps in proptest::collection::vec(step(), 1..60)) {
            let rt = runtime();
            rt.block_on(async {
                let poller = test_poller(sharing);
                let task = poller.spawn();
                let mut waits = Vec::new();
                let (mut polling, mut rounds) = (false, 0u64);
                let paused = |waits: &Vec<DurabilityWait>| !sharing && !waits.is_empty();
                for step in steps {
                    match step {
                        Step::Activity => {
                            poller.activity();
                            rounds += 1;
                            polling |= !paused(&waits);
                        }
                        Step::WaitStarted => waits.push(poller.durability_wait()),
                        Step::WaitDone => {
                            if !waits.is_empty() {
                                drop(waits.remove(0));
                                if waits.is_empty() {
                                    rounds += 1;
                                    polling = true;
                                }
                            }
                        }
                        Step::Turns => {
                            for _ in 0..4 {
                                tokio::task::yield_now().await;
                            }
                            if paused(&waits) {
                                polling = false;
                            }
                        }
                    }
                    prop_assert_eq!(poller.durability_waits(), waits.len() as u64);
                    prop_assert_eq!(poller.activity_rounds(), rounds);
                    prop_assert_eq!(poller.is_polling(), polling, "after {:?}", step);
                }
                task.abort();
                Ok(())
            })?;
        }
    }
}
