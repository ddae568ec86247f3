//! What the seam costs on the request path (`cargo bench -p ramstore-clock`): ns per
//! reading of the clock and per bounded call, through `Arc<dyn Clock>` against the
//! direct calls it replaced.
//!
//! - `instant_now` / `system_clock_now`: `Instant::now()` against
//!   `SystemClock::now()` behind the trait object (a storage server reads it twice
//!   per request).
//! - `tokio_timeout_ready` / `clock_timeout_ready` (`_armed`: pending once, so the
//!   timer is armed): a ready future under
//!   `tokio::time::timeout` against the clock's `timeout` (a client call and a
//!   write's replication wait arm one); both on one current-thread runtime, so the
//!   difference is the seam's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use divan::Bencher;
use ramstore_clock::{system_clock, Clock};

fn main() {
    divan::main();
}

#[divan::bench]
fn instant_now() -> Instant {
    Instant::now()
}

#[divan::bench]
fn system_clock_now(bencher: Bencher) {
    let clock: Arc<dyn Clock> = divan::black_box(system_clock());
    bencher.bench_local(|| clock.now());
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime builds")
}

#[divan::bench]
fn tokio_timeout_ready(bencher: Bencher) {
    let rt = runtime();
    bencher.bench_local(|| {
        rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(2), async { divan::black_box(1u64) }).await
        })
    });
}

#[divan::bench]
fn clock_timeout_ready(bencher: Bencher) {
    let rt = runtime();
    let clock = system_clock();
    bencher.bench_local(|| {
        rt.block_on(async {
            clock
                .timeout(Duration::from_secs(2), async { divan::black_box(1u64) })
                .await
        })
    });
}

/// A future that is pending once (so the timer is armed), then ready.
async fn after_a_yield() -> u64 {
    tokio::task::yield_now().await;
    divan::black_box(1)
}

#[divan::bench]
fn tokio_timeout_armed(bencher: Bencher) {
    let rt = runtime();
    bencher.bench_local(|| {
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), after_a_yield()).await })
    });
}

#[divan::bench]
fn clock_timeout_armed(bencher: Bencher) {
    let rt = runtime();
    let clock = system_clock();
    bencher.bench_local(|| {
        rt.block_on(async { clock.timeout(Duration::from_secs(2), after_a_yield()).await })
    });
}
