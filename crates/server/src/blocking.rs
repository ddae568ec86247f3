//! Where a server's blocking work runs (docs/design.md §7): tokio's blocking pool in
//! production, or inline on the calling task in a deterministic simulation
//! (`crates/sim`), where a second OS thread would make the interleaving depend on
//! the OS scheduler.
//!
//! The work handed here is CPU or disk work that may take milliseconds (a slow
//! path request, a recovery replay step, bucketing a crashed master's replicas,
//! freeing replicas): on the pool it keeps the async threads free; inline it runs
//! to completion before the caller's task goes on, which in a single-threaded
//! simulation is exactly one step of the schedule.
//!
//! Background work ([`Blocking::run_background`]: a migration's bulk pulls on
//! the source, applying them on the target) runs on a small pool of threads of
//! their own at a low OS priority (`nice` [`BACKGROUND_NICE`]), so a client
//! request that needs a core takes it from them at once (K§2.3: migration runs
//! at lower priority than client requests, and never blocks the source's
//! foreground work). On a machine with idle cores they run at full speed.

/// How blocking work runs. Default: tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Blocking {
    /// `tokio::task::spawn_blocking` (production).
    #[default]
    Pool,
    /// On the calling task, at once (simulation: no threads).
    Inline,
}

/// The OS priority (`nice`) of background threads: the lowest, so they take
/// only CPU time no normal-priority thread wants.
pub const BACKGROUND_NICE: i32 = 19;

/// The blocking work panicked (or its runtime shut down) before it finished.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("blocking work did not finish: {0}")]
pub struct BlockingFailed(pub String);

impl Blocking {
    /// Runs `job` and returns its result.
    pub async fn run<T, F>(self, job: F) -> Result<T, BlockingFailed>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self {
            Blocking::Pool => tokio::task::spawn_blocking(job)
                .await
                .map_err(|e| BlockingFailed(e.to_string())),
            Blocking::Inline => Ok(job()),
        }
    }

    /// Runs `job` at background priority and returns its result: on the
    /// background pool ([`BACKGROUND_NICE`]), or inline in a simulation.
    pub async fn run_background<T, F>(self, job: F) -> Result<T, BlockingFailed>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self {
            Blocking::Pool => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                background::submit(Box::new(move || {
                    // The caller may have given up waiting; the result is dropped.
                    let _ = tx.send(job());
                }))?;
                rx.await
                    .map_err(|_| BlockingFailed("a background job panicked".to_string()))
            }
            Blocking::Inline => Ok(job()),
        }
    }

    /// Starts `job` without waiting for it: on the pool when a runtime is
    /// running (inline otherwise, as before the seam), inline when
    /// [`Blocking::Inline`].
    pub fn spawn<F>(self, job: F)
    where
        F: FnOnce() + Send + 'static,
    {
        match (self, tokio::runtime::Handle::try_current()) {
            (Blocking::Pool, Ok(runtime)) => {
                runtime.spawn_blocking(job);
            }
            _ => job(),
        }
    }
}

/// The background pool: as many threads as cores, started on first use, each
/// lowering its own priority once; jobs are taken in submission order.
mod background {
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::{Arc, Mutex, OnceLock};

    use super::{BlockingFailed, BACKGROUND_NICE};

    pub(super) type Job = Box<dyn FnOnce() + Send + 'static>;

    static POOL: OnceLock<Sender<Job>> = OnceLock::new();

    pub(super) fn submit(job: Job) -> Result<(), BlockingFailed> {
        POOL.get_or_init(start)
            .send(job)
            .map_err(|_| BlockingFailed("the background pool has stopped".to_string()))
    }

    fn start() -> Sender<Job> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads {
            let rx = rx.clone();
            // A thread that cannot start leaves the others; with none, jobs
            // wait in the channel and their callers see the pool stopped only
            // if every receiver is gone.
            let _ = std::thread::Builder::new()
                .name(format!("ramstore-bg-{i}"))
                .spawn(move || worker(&rx));
        }
        tx
    }

    fn worker(rx: &Mutex<Receiver<Job>>) {
        lower_priority();
        loop {
            let job = {
                let rx = rx.lock().unwrap_or_else(|e| e.into_inner());
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                }
            };
            // A panicking job must not take the thread with it: its caller sees
            // the dropped result channel instead.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }

    /// Lowers the calling thread's priority (Linux: `setpriority` on a thread
    /// id affects that thread only). Failing leaves it at normal priority.
    fn lower_priority() {
        #[cfg(target_os = "linux")]
        // SAFETY: plain syscalls on the calling thread's own id.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            if libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE) != 0 {
                tracing::debug!("could not lower a background thread's priority");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn run_returns_the_result_on_the_pool_and_inline() {
        assert_eq!(Blocking::Pool.run(|| 6 * 7).await, Ok(42));
        assert_eq!(Blocking::Inline.run(|| 6 * 7).await, Ok(42));
    }

    #[tokio::test]
    async fn run_background_returns_the_result_on_a_low_priority_thread() {
        let nice = Blocking::Pool
            .run_background(|| {
                // SAFETY: plain syscalls on the calling thread's own id.
                #[cfg(target_os = "linux")]
                unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                    *libc::__errno_location() = 0;
                    libc::getpriority(libc::PRIO_PROCESS, tid)
                }
                #[cfg(not(target_os = "linux"))]
                BACKGROUND_NICE
            })
            .await;
        assert_eq!(nice, Ok(BACKGROUND_NICE));
        assert_eq!(Blocking::Inline.run_background(|| 6 * 7).await, Ok(42));
    }

    #[tokio::test]
    async fn run_background_reports_a_panicking_job_and_keeps_serving() {
        let failed = Blocking::Pool
            .run_background(|| -> u32 { panic!("a job that panics") })
            .await;
        assert!(failed.is_err());
        assert_eq!(Blocking::Pool.run_background(|| 6 * 7).await, Ok(42));
    }

    #[test]
    fn spawn_inline_runs_before_returning() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        Blocking::Inline.spawn(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
