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

/// How blocking work runs. Default: tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Blocking {
    /// `tokio::task::spawn_blocking` (production).
    #[default]
    Pool,
    /// On the calling task, at once (simulation: no threads).
    Inline,
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn run_returns_the_result_on_the_pool_and_inline() {
        assert_eq!(Blocking::Pool.run(|| 6 * 7).await, Ok(42));
        assert_eq!(Blocking::Inline.run(|| 6 * 7).await, Ok(42));
    }

    #[test]
    fn spawn_inline_runs_before_returning() {
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        Blocking::Inline.spawn(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
        assert!(ran.load(std::sync::atomic::Ordering::SeqCst));
    }
}
