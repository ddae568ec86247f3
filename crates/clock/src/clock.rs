//! The [`Clock`] trait, the system clock, and the sleep and timeout futures.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, MutexGuard};
use pin_project_lite::pin_project;

/// How far ahead a deadline "never" lies: durations that would overflow an
/// `Instant` (a caller's "no deadline") are cut to this, as tokio does.
pub const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// A source of time: monotonic instants, wall time, and waits that end when the
/// clock reaches a deadline (see the crate documentation).
///
/// Implementations are shared between threads and tasks (`Arc<dyn Clock>`).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current monotonic instant; never earlier than one returned before.
    fn now(&self) -> Instant;

    /// The current wall-clock time: for display and for values other processes
    /// read, never for ordering or deadlines (it may jump).
    fn wall(&self) -> SystemTime;

    /// A future that completes once [`Clock::now`] reaches `deadline` (at once if
    /// it has). Dropping it cancels the wait.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// Blocks the calling thread until this clock reaches `deadline` or `wait`
    /// reports an earlier wake-up; returns `true` for the wake-up, `false` once
    /// the deadline has passed.
    ///
    /// `wait(d)` blocks the thread for at most `d` of real time on the caller's own
    /// signal (a condvar, a plain sleep) and says whether that signal ended it.
    /// A clock whose time is not real time calls it in short slices and looks at
    /// its own time in between.
    fn block_until(&self, deadline: Instant, wait: &mut dyn FnMut(Duration) -> bool) -> bool;
}

impl dyn Clock {
    /// The instant `d` after now (cut to [`FAR_FUTURE`] where it would overflow).
    pub fn deadline_after(&self, d: Duration) -> Instant {
        later(self.now(), d)
    }

    /// Time since `since` by this clock (zero if `since` is in its future).
    pub fn elapsed(&self, since: Instant) -> Duration {
        self.now().saturating_duration_since(since)
    }

    /// A future that completes `d` from now.
    pub fn sleep(&self, d: Duration) -> Sleep {
        self.sleep_until(self.deadline_after(d))
    }

    /// Runs `future` for at most `d`: its output, or [`Elapsed`] if the clock got
    /// `d` further first (like `tokio::time::timeout`).
    pub fn timeout<F: Future>(&self, d: Duration, future: F) -> Timeout<F> {
        self.timeout_at(self.deadline_after(d), future)
    }

    /// Runs `future` until the clock reaches `deadline` (like
    /// `tokio::time::timeout_at`).
    pub fn timeout_at<F: Future>(&self, deadline: Instant, future: F) -> Timeout<F> {
        Timeout {
            future,
            sleep: self.sleep_until(deadline),
        }
    }

    /// Blocks the calling thread for `d` of this clock's time.
    pub fn sleep_blocking(&self, d: Duration) {
        let deadline = self.deadline_after(d);
        self.block_until(deadline, &mut |slice| {
            std::thread::sleep(slice);
            false
        });
    }

    /// Waits on `cond` (with `guard`'s mutex) until notified or until this clock
    /// reaches `deadline`; `true` if the deadline passed (like parking_lot's
    /// `wait_until(..).timed_out()`). As with any condvar, the caller re-checks
    /// its condition after a wake-up. Notifiers must notify with the mutex held:
    /// a clock that is not real time waits in slices, and a notification sent
    /// between two slices without the mutex would be lost.
    pub fn wait_until<T>(
        &self,
        cond: &Condvar,
        guard: &mut MutexGuard<'_, T>,
        deadline: Instant,
    ) -> bool {
        !self.block_until(deadline, &mut |slice| {
            !cond.wait_for(guard, slice).timed_out()
        })
    }

    /// [`wait_until`](trait.Clock.html#method.wait_until) `d` from now.
    pub fn wait_for<T>(&self, cond: &Condvar, guard: &mut MutexGuard<'_, T>, d: Duration) -> bool {
        let deadline = self.deadline_after(d);
        self.wait_until(cond, guard, deadline)
    }
}

/// `at + d`, or `at +` [`FAR_FUTURE`] where that would overflow.
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d.min(FAR_FUTURE))
        .or_else(|| at.checked_add(Duration::from_secs(86_400)))
        .unwrap_or(at)
}

/// The OS clock, with tokio's timers for sleeps.
/// Sleeps need a tokio runtime with time enabled, as `tokio::time::sleep` does.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// A shared [`SystemClock`]: the production default wherever a component takes a
/// clock.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep {
            inner: SleepInner::Timer {
                sleep: tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)),
            },
        }
    }

    fn block_until(&self, deadline: Instant, wait: &mut dyn FnMut(Duration) -> bool) -> bool {
        // One real wait for the whole time left: exactly what the caller did
        // before it had a clock (a condvar `wait_for`, a `thread::sleep`).
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            if wait(left) {
                return true;
            }
        }
    }
}

pin_project! {
    /// A future that completes when its clock reaches a deadline
    /// ([`Clock::sleep_until`]). The system clock's timer is held inline (no
    /// allocation); other clocks supply a boxed future.
    #[must_use = "a sleep does nothing unless awaited"]
    pub struct Sleep {
        #[pin]
        inner: SleepInner,
    }
}

pin_project! {
    #[project = SleepProj]
    enum SleepInner {
        Timer { #[pin] sleep: tokio::time::Sleep },
        Boxed { sleep: Pin<Box<dyn Future<Output = ()> + Send>> },
    }
}

impl Sleep {
    /// A sleep that completes when `future` does: how clocks other than the
    /// system clock implement [`Clock::sleep_until`].
    pub fn from_future(future: impl Future<Output = ()> + Send + 'static) -> Self {
        Self {
            inner: SleepInner::Boxed {
                sleep: Box::pin(future),
            },
        }
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep").finish_non_exhaustive()
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().inner.project() {
            SleepProj::Timer { sleep } => sleep.poll(cx),
            SleepProj::Boxed { sleep } => sleep.as_mut().poll(cx),
        }
    }
}

/// The deadline of a [`Timeout`] passed before its future finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

pin_project! {
    /// A future bounded by a deadline on a clock
    /// ([`timeout`](trait.Clock.html#method.timeout)).
    #[must_use = "a timeout does nothing unless awaited"]
    #[derive(Debug)]
    pub struct Timeout<F> {
        #[pin]
        future: F,
        #[pin]
        sleep: Sleep,
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // The future first: one that is ready at its deadline still counts (as in
        // tokio's timeout).
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        match this.sleep.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_cuts_overflowing_durations_to_the_far_future() {
        let now = SystemClock.now();
        assert_eq!(later(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(
            later(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
    }

    #[test]
    fn system_clock_now_never_goes_backwards() {
        let clock = system_clock();
        let first = clock.now();
        assert!(clock.now() >= first);
        assert!(clock.elapsed(first + Duration::from_secs(60)).is_zero());
    }

    #[tokio::test]
    async fn system_timeout_returns_a_ready_output_and_elapses_a_stuck_one() {
        let clock = system_clock();
        assert_eq!(clock.timeout(Duration::ZERO, async { 7 }).await, Ok(7));
        let stuck = std::future::pending::<()>();
        assert_eq!(
            clock.timeout(Duration::from_millis(1), stuck).await,
            Err(Elapsed)
        );
    }

    #[test]
    fn system_block_until_returns_the_wake_up_of_its_wait() {
        let clock = system_clock();
        let deadline = clock.deadline_after(Duration::from_secs(60));
        assert!(clock.block_until(deadline, &mut |_| true));
        let past = clock.now();
        assert!(!clock.block_until(past, &mut |_| panic!("no wait after the deadline")));
    }
}
