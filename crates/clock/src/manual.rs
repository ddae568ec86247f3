//! A clock whose time moves only when told: deterministic tests of timing logic.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::{Condvar, Mutex};

use crate::clock::later;
use crate::{Clock, Sleep, SystemClock};

/// How long a thread blocked on a manual clock waits for its own signal before it
/// looks at the clock again (real time; the clock cannot reach into the caller's
/// condvar to wake it).
const THREAD_SLICE: Duration = Duration::from_millis(1);

/// A [`Clock`] that starts at an arbitrary instant and moves only through
/// [`ManualClock::advance`] and [`ManualClock::advance_to`]. Sleeps and thread
/// waits on it end only when it is advanced past their deadlines; it lists their
/// deadlines ([`ManualClock::sleepers`]) so a test can assert what a component
/// waits for. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    origin: Instant,
    wall_origin: SystemTime,
    state: Mutex<State>,
    /// Notified when a waiter registers (see [`ManualClock::wait_for_sleepers`]).
    registered: Condvar,
}

#[derive(Debug, Default)]
struct State {
    elapsed: Duration,
    next_key: u64,
    /// Pending async sleeps, by deadline; the waker of the task that polled last.
    sleeps: BTreeMap<(Instant, u64), Waker>,
    /// Threads inside [`Clock::block_until`], by key.
    threads: BTreeMap<u64, Instant>,
}

impl State {
    fn key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A clock at its origin: an instant taken from the system clock once (std
    /// offers no other way to make an `Instant`), and the wall time of that moment.
    pub fn new() -> Self {
        Self {
            shared: Arc::new(Shared {
                origin: SystemClock.now(),
                wall_origin: SystemClock.wall(),
                state: Mutex::new(State::default()),
                registered: Condvar::new(),
            }),
        }
    }

    /// This clock as the shared handle components take.
    pub fn handle(&self) -> Arc<dyn Clock> {
        Arc::new(self.clone())
    }

    /// The instant this clock started at.
    pub fn origin(&self) -> Instant {
        self.shared.origin
    }

    /// Time advanced since the origin.
    pub fn elapsed_since_origin(&self) -> Duration {
        self.shared.state.lock().elapsed
    }

    /// Moves time forward by `d` and wakes every sleep whose deadline it reached.
    pub fn advance(&self, d: Duration) {
        let to = later(self.now(), d);
        self.advance_to(to);
    }

    /// Moves time forward to `at` (nothing if `at` is not later than now) and
    /// wakes every sleep whose deadline it reached.
    pub fn advance_to(&self, at: Instant) {
        let woken: Vec<Waker> = {
            let mut st = self.shared.state.lock();
            let now = self.shared.origin + st.elapsed;
            if at > now {
                st.elapsed = at - self.shared.origin;
            }
            let now = self.shared.origin + st.elapsed;
            let pending = st.sleeps.split_off(&(now, u64::MAX));
            std::mem::replace(&mut st.sleeps, pending)
                .into_values()
                .collect()
        };
        // Woken outside the lock: a waker may run its task inline.
        for waker in woken {
            waker.wake();
        }
    }

    /// Advances to the earliest deadline anyone waits for; returns it, or `None`
    /// (and leaves time alone) if nobody waits.
    pub fn advance_to_next(&self) -> Option<Instant> {
        let next = self.sleepers().into_iter().next()?;
        self.advance_to(next);
        Some(next)
    }

    /// The deadlines of every pending sleep and blocked thread, earliest first.
    pub fn sleepers(&self) -> Vec<Instant> {
        let st = self.shared.state.lock();
        let mut all: Vec<Instant> = st.sleeps.keys().map(|(at, _)| *at).collect();
        all.extend(st.threads.values().copied());
        all.sort();
        all
    }

    /// Blocks (in real time, at most `limit`) until at least `count` sleeps or
    /// threads wait on this clock; whether they do. For tests that must know a
    /// background thread or task has reached its wait before they advance time.
    pub fn wait_for_sleepers(&self, count: usize, limit: Duration) -> bool {
        let mut st = self.shared.state.lock();
        let give_up = SystemClock.now() + limit;
        while st.sleeps.len() + st.threads.len() < count {
            if self
                .shared
                .registered
                .wait_until(&mut st, give_up)
                .timed_out()
            {
                return st.sleeps.len() + st.threads.len() >= count;
            }
        }
        true
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.shared.origin + self.shared.state.lock().elapsed
    }

    fn wall(&self) -> SystemTime {
        self.shared.wall_origin + self.shared.state.lock().elapsed
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Sleep::from_future(ManualSleep {
            shared: self.shared.clone(),
            deadline,
            key: None,
        })
    }

    fn block_until(&self, deadline: Instant, wait: &mut dyn FnMut(Duration) -> bool) -> bool {
        let key = {
            let mut st = self.shared.state.lock();
            let key = st.key();
            st.threads.insert(key, deadline);
            self.shared.registered.notify_all();
            key
        };
        let woken = loop {
            if self.now() >= deadline {
                break false;
            }
            if wait(THREAD_SLICE) {
                break true;
            }
        };
        self.shared.state.lock().threads.remove(&key);
        woken
    }
}

/// An async sleep on a [`ManualClock`]: registered with its waker while pending.
struct ManualSleep {
    shared: Arc<Shared>,
    deadline: Instant,
    key: Option<u64>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let mut st = this.shared.state.lock();
        if this.shared.origin + st.elapsed >= this.deadline {
            if let Some(key) = this.key.take() {
                st.sleeps.remove(&(this.deadline, key));
            }
            return Poll::Ready(());
        }
        let key = match this.key {
            Some(key) => key,
            None => {
                let key = st.key();
                this.key = Some(key);
                this.shared.registered.notify_all();
                key
            }
        };
        st.sleeps.insert((this.deadline, key), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.shared
                .state
                .lock()
                .sleeps
                .remove(&(self.deadline, key));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use proptest::prelude::*;

    use super::*;

    /// Counts wake-ups, so a test can poll futures by hand.
    #[derive(Default)]
    struct Flag(std::sync::atomic::AtomicUsize);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn poll(sleep: &mut Pin<Box<Sleep>>, flag: &Arc<Flag>) -> bool {
        let waker = Waker::from(flag.clone());
        sleep
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_ready()
    }

    #[test]
    fn sleep_until_completes_exactly_at_its_deadline() {
        let clock = ManualClock::new();
        let handle = clock.handle();
        let flag = Arc::new(Flag::default());
        let mut sleep = Box::pin(handle.sleep(Duration::from_millis(10)));
        assert!(!poll(&mut sleep, &flag));
        assert_eq!(
            clock.sleepers(),
            vec![clock.origin() + Duration::from_millis(10)]
        );
        clock.advance(Duration::from_millis(9));
        assert!(!poll(&mut sleep, &flag));
        assert_eq!(flag.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        clock.advance(Duration::from_millis(1));
        assert_eq!(flag.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(poll(&mut sleep, &flag));
        assert!(clock.sleepers().is_empty());
    }

    #[test]
    fn sleep_dropped_before_its_deadline_leaves_no_sleeper() {
        let clock = ManualClock::new();
        let flag = Arc::new(Flag::default());
        let mut sleep = Box::pin(clock.handle().sleep(Duration::from_secs(1)));
        assert!(!poll(&mut sleep, &flag));
        drop(sleep);
        assert!(clock.sleepers().is_empty());
    }

    #[test]
    fn advance_to_never_moves_time_backwards() {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(2));
        clock.advance_to(clock.origin() + Duration::from_secs(1));
        assert_eq!(clock.now(), clock.origin() + Duration::from_secs(2));
        assert_eq!(
            clock.wall(),
            clock.shared.wall_origin + Duration::from_secs(2)
        );
    }

    #[test]
    fn advance_to_next_jumps_to_the_earliest_sleeper() {
        let clock = ManualClock::new();
        let flag = Arc::new(Flag::default());
        let mut late = Box::pin(clock.handle().sleep(Duration::from_millis(30)));
        let mut early = Box::pin(clock.handle().sleep(Duration::from_millis(20)));
        assert!(!poll(&mut late, &flag) && !poll(&mut early, &flag));
        assert_eq!(
            clock.advance_to_next(),
            Some(clock.origin() + Duration::from_millis(20))
        );
        assert!(poll(&mut early, &flag));
        assert!(!poll(&mut late, &flag));
        assert!(clock.advance_to_next().is_some());
        assert!(poll(&mut late, &flag));
        assert_eq!(clock.advance_to_next(), None);
    }

    #[tokio::test]
    async fn timeout_elapses_only_when_the_clock_reaches_it() {
        let clock = ManualClock::new();
        let handle = clock.handle();
        let task = tokio::spawn({
            let handle = handle.clone();
            async move {
                handle
                    .timeout(Duration::from_millis(50), std::future::pending::<()>())
                    .await
            }
        });
        while clock.sleepers().is_empty() {
            tokio::task::yield_now().await;
        }
        clock.advance(Duration::from_millis(49));
        tokio::task::yield_now().await;
        assert!(!task.is_finished());
        clock.advance(Duration::from_millis(1));
        assert_eq!(task.await.ok(), Some(Err(crate::Elapsed)));
    }

    #[tokio::test]
    async fn interval_ticks_every_period_and_delays_after_a_late_tick() {
        let clock = ManualClock::new();
        let handle = clock.handle();
        let origin = clock.origin();
        let mut tick = crate::interval(&handle, Duration::from_millis(100));
        assert_eq!(tick.tick().await, origin);
        // On time: the schedule holds.
        let next = tokio::spawn(async move {
            let due = tick.tick().await;
            (due, tick)
        });
        while clock.sleepers().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(clock.sleepers(), vec![origin + Duration::from_millis(100)]);
        clock.advance(Duration::from_millis(100));
        let Ok((due, mut tick)) = next.await else {
            panic!("the tick task panicked")
        };
        assert_eq!(due, origin + Duration::from_millis(100));
        // Late by 50 ms: the next tick comes a whole period after the late one.
        clock.advance(Duration::from_millis(150));
        assert_eq!(tick.tick().await, origin + Duration::from_millis(200));
        let after = tokio::spawn(async move { tick.tick().await });
        while clock.sleepers().is_empty() {
            tokio::task::yield_now().await;
        }
        assert_eq!(clock.sleepers(), vec![origin + Duration::from_millis(350)]);
        clock.advance(Duration::from_millis(100));
        assert_eq!(after.await.ok(), Some(origin + Duration::from_millis(350)));
    }

    #[test]
    fn wait_until_on_a_condvar_times_out_only_when_advanced() {
        let clock = ManualClock::new();
        let handle = clock.handle();
        let lock = Arc::new(Mutex::new(false));
        let cond = Arc::new(Condvar::new());
        let deadline = clock.origin() + Duration::from_millis(100);
        let waiter = std::thread::spawn({
            let (lock, cond, handle) = (lock.clone(), cond.clone(), handle.clone());
            move || {
                let mut guard = lock.lock();
                let timed_out = handle.wait_until(&cond, &mut guard, deadline);
                (timed_out, handle.now())
            }
        });
        assert!(clock.wait_for_sleepers(1, Duration::from_secs(10)));
        assert_eq!(clock.sleepers(), vec![deadline]);
        clock.advance(Duration::from_millis(100));
        let Ok((timed_out, at)) = waiter.join() else {
            panic!("the waiter panicked")
        };
        assert!(timed_out);
        assert_eq!(at, deadline);
        assert!(clock.sleepers().is_empty());
    }

    #[test]
    fn wait_until_on_a_condvar_returns_early_when_notified() {
        let clock = ManualClock::new();
        let handle = clock.handle();
        let lock = Arc::new(Mutex::new(false));
        let cond = Arc::new(Condvar::new());
        let waiter = std::thread::spawn({
            let (lock, cond, handle) = (lock.clone(), cond.clone(), handle.clone());
            move || {
                let mut guard = lock.lock();
                while !*guard {
                    if handle.wait_for(&cond, &mut guard, Duration::from_secs(1)) {
                        return false;
                    }
                }
                true
            }
        });
        assert!(clock.wait_for_sleepers(1, Duration::from_secs(10)));
        // Notified under the lock, as `wait_until` asks.
        let mut ready = lock.lock();
        *ready = true;
        cond.notify_all();
        drop(ready);
        assert!(waiter.join().unwrap_or(false));
        assert_eq!(clock.now(), clock.origin());
    }

    proptest! {
        /// Model: a sleep is done exactly when the time advanced so far reaches
        /// its deadline, whatever the order of sleeps and advances.
        #[test]
        fn sleeps_complete_exactly_when_the_model_says(
            ops in prop::collection::vec((any::<bool>(), 0u64..50), 1..40)
        ) {
            let clock = ManualClock::new();
            let handle = clock.handle();
            let flag = Arc::new(Flag::default());
            let mut elapsed = 0u64;
            let mut sleeps: Vec<(u64, Pin<Box<Sleep>>)> = Vec::new();
            for (is_sleep, ms) in ops {
                if is_sleep {
                    sleeps.push((elapsed + ms, Box::pin(handle.sleep(Duration::from_millis(ms)))));
                } else {
                    elapsed += ms;
                    clock.advance(Duration::from_millis(ms));
                }
                for (deadline, sleep) in &mut sleeps {
                    prop_assert_eq!(poll(sleep, &flag), *deadline <= elapsed);
                }
                let pending = sleeps.iter().filter(|(d, _)| *d > elapsed).count();
                prop_assert_eq!(clock.sleepers().len(), pending);
            }
        }
    }
}
