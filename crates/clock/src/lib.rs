//! ramstore's time and randomness seams (DESIGN §7).
//!
//! Job: every reading of time, every wait and every random choice in ramstore's
//! library crates goes through a [`Clock`] or an [`Rng`] that the component was
//! given when it was built — never a global — so a whole cluster can later run in
//! one process on simulated time and seeded randomness. Network and disk have
//! their own seams (`ramstore_rpc::Transport`, `ramstore_backup::Disk`); with
//! these two, every effect a component has goes through a seam.
//!
//! - [`Clock`]: monotonic time ([`Clock::now`]), wall time ([`Clock::wall`]),
//!   async sleeps ([`Clock::sleep_until`]) and thread waits
//!   ([`Clock::block_until`]). The helpers on `dyn Clock` build the rest on
//!   them: [`sleep`](trait.Clock.html#method.sleep),
//!   [`timeout`](trait.Clock.html#method.timeout),
//!   [`timeout_at`](trait.Clock.html#method.timeout_at),
//!   [`elapsed`](trait.Clock.html#method.elapsed),
//!   [`sleep_blocking`](trait.Clock.html#method.sleep_blocking) and
//!   [`wait_until`](trait.Clock.html#method.wait_until) (a condvar wait with a
//!   deadline); [`interval`] builds a ticker.
//! - [`SystemClock`]: the OS clock and tokio's timers. It is the only code in the
//!   library crates that reads real time or arms a real timer.
//! - [`ManualClock`]: time that moves only when a test says so
//!   ([`ManualClock::advance`]); it lists who is waiting and until when
//!   ([`ManualClock::sleepers`]), so a test can assert a component's timing at
//!   exact simulated instants without sleeping.
//! - [`Rng`]: 64 random bits per call through `&self`. [`SystemRng`] draws from
//!   rand's thread-local generator (as `rand::random` did); [`SeededRng`] is
//!   SplitMix64 from a seed (the same seed, the same draws in the same order).
//!   `as_rand` lends any `Rng` to rand's algorithms (shuffles, ranges, samples),
//!   and `seed_std` seeds a component's own `StdRng` from it.
//!
//! Cost (the request paths read the clock on every request): `SystemClock::now`
//! is `Instant::now` behind one dynamic call; a system sleep or timeout holds
//! tokio's timer inline ([`Sleep`] is an enum, not a box), so neither allocates
//! nor takes a lock. Other clocks box their sleep futures.
//!
//! Invariants: [`Clock::now`] never goes backwards; a [`Sleep`] until `t`
//! completes only once `now() >= t`; [`Clock::block_until`] returns `false`
//! (timed out) only once `now() >= deadline`. Instants are `std::time::Instant`s
//! whatever the clock, so components keep their types; a manual clock's instants
//! are its origin (taken from the system clock once) plus the time advanced.
//!
//! Thread-safety: every type here is `Send + Sync`; clocks and generators are
//! shared as `Arc<dyn Clock>` / `Arc<dyn Rng>`, and a manual clock may be advanced
//! from any thread.

mod clock;
mod interval;
mod manual;
mod rng;

pub use clock::{system_clock, Clock, Elapsed, Sleep, SystemClock, Timeout, FAR_FUTURE};
pub use interval::{interval, Interval};
pub use manual::ManualClock;
pub use rng::{system_rng, RandSource, Rng, SeededRng, SystemRng};
