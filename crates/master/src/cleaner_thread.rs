//! The background cleaner: threads that run cleaning passes whenever the balancer
//! asks for them, concurrently with reads and writes (L§6).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use ramstore_clock::Clock;

/// What a cleaner thread drives (the object store implements it; the thread needs
/// nothing else of the store, so this module does not depend on it).
pub(crate) trait Cleanable: Send + Sync + 'static {
    /// Runs one cleaning pass if the balancer wants one; whether it changed
    /// anything.
    fn clean_once(&self) -> bool;
    /// Whether the balancer wants cleaning now.
    fn wants_cleaning(&self) -> bool;
    /// The thread slept `ns` although cleaning was wanted (no pass it could start
    /// made progress): counted so benchmarks can tell an idle cleaner from a
    /// busy one.
    fn idled(&self, ns: u64);
}

/// How long a cleaner sleeps before it asks the balancer again while the balancer
/// wants cleaning but the last pass could not make progress.
pub const CLEANER_POLL_INTERVAL_MS: u64 = 2;
/// How long a cleaner sleeps when the balancer wants no cleaning. Writers wake it
/// sooner: at every new head (`ObjectStore` watches the head) and when memory runs
/// out; an idle server then costs no wake-ups (a waking thread costs tens of µs on a
/// virtual machine, and shares the CPUs with the request path).
pub const CLEANER_IDLE_INTERVAL_MS: u64 = 100;

struct Signal {
    stop: AtomicBool,
    lock: Mutex<bool>,
    cond: Condvar,
}

/// Handle to the running cleaner threads; stops them on `stop`.
pub(crate) struct CleanerThread {
    signal: Arc<Signal>,
    threads: Vec<JoinHandle<()>>,
}

impl CleanerThread {
    /// Starts `threads` cleaner threads that pace themselves on `clock`.
    pub fn start<C: Cleanable>(store: Arc<C>, threads: usize, clock: Arc<dyn Clock>) -> Self {
        let signal = Arc::new(Signal {
            stop: AtomicBool::new(false),
            lock: Mutex::new(false),
            cond: Condvar::new(),
        });
        let threads = (0..threads)
            .map(|i| {
                let store = store.clone();
                let signal = signal.clone();
                let clock = clock.clone();
                std::thread::Builder::new()
                    .name(format!("ramstore-cleaner-{i}"))
                    .spawn(move || run(&*store, &signal, &clock))
                    // Thread creation fails only when the process is out of resources
                    // at start-up; there is nothing sensible to continue with.
                    .expect("spawn cleaner thread")
            })
            .collect();
        Self { signal, threads }
    }

    /// Asks the cleaner to look at the log now (a writer ran out of space).
    pub fn wake(&self) {
        let mut woken = self.signal.lock.lock();
        *woken = true;
        self.signal.cond.notify_all();
    }

    pub fn stop(mut self) {
        self.signal.stop.store(true, Ordering::SeqCst);
        self.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run(store: &impl Cleanable, signal: &Signal, clock: &Arc<dyn Clock>) {
    while !signal.stop.load(Ordering::SeqCst) {
        // Keep cleaning while passes help; a pass that changes nothing means the
        // log is as clean as it can get for now, so wait.
        if store.clean_once() {
            continue;
        }
        let wanted = store.wants_cleaning();
        let interval_ms = if wanted {
            CLEANER_POLL_INTERVAL_MS
        } else {
            CLEANER_IDLE_INTERVAL_MS
        };
        let began = clock.now();
        let mut woken = signal.lock.lock();
        if !*woken {
            // `wake` notifies with the lock held, as a clock's slices need.
            clock.wait_for(&signal.cond, &mut woken, Duration::from_millis(interval_ms));
        }
        *woken = false;
        drop(woken);
        if wanted {
            let slept = clock.now().saturating_duration_since(began);
            store.idled(u64::try_from(slept.as_nanos()).unwrap_or(u64::MAX));
        }
    }
}
