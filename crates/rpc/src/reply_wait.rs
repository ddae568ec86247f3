//! Waiting for a reply by polling before sleeping: the client side of
//! [`crate::poller`].
//!
//! Why: a caller that awaits a reply lets its runtime sleep in `epoll_wait`, and
//! on this VM a halted vCPU takes tens of µs to wake (docs/benchmarks.md,
//! "Durable-write latency"; ../DEPENDENCIES: a loopback round trip is 13.5 µs
//! between busy CPUs, 52.7 µs between idle ones). A short read is answered
//! before the caller's core halts, a durable write (three round trips behind
//! it) is not: the write pays a wake-up the read does not, on top of its
//! replication. RAMCloud's clients poll for their replies (R§5.1); here the
//! poll is bounded by a window after which the caller sleeps as before, so a
//! slow reply costs at most `window` of CPU.
//!
//! How: while the reply is not in, the waiting task yields; tokio runs the I/O
//! driver without blocking before polling a task that yielded, so the
//! connection's reader task picks the reply up as soon as it lands and
//! completes the wait at once. On a current-thread runtime (one thread per
//! client, `ramstore bench`'s default) this keeps the caller's own thread busy;
//! on a multi-thread runtime the reply may be read by another worker, which the
//! yielding worker does not stop from sleeping.
//!
//! Thread-safety: a free function over one future; nothing shared.

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use ramstore_clock::Clock;

/// Longest reply-polling window accepted ([`crate::TcpTransport::with_reply_poll`]):
/// beyond this a waiting caller is simply busy.
pub const MAX_REPLY_POLL_US: u64 = 10_000;

/// Awaits `reply`, polling for it for up to `window` (measured on `clock`)
/// before letting the thread sleep; a zero window awaits it plainly.
pub async fn await_polling<F: Future>(reply: F, window: Duration, clock: &dyn Clock) -> F::Output {
    let mut reply = std::pin::pin!(reply);
    if window.is_zero() {
        return reply.await;
    }
    let start = clock.now();
    loop {
        let ready = std::future::poll_fn(|cx| match reply.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Some(out)),
            Poll::Pending => Poll::Ready(None),
        })
        .await;
        if let Some(out) = ready {
            return out;
        }
        if clock.now().duration_since(start) >= window {
            return reply.await;
        }
        // Lets the runtime poll its I/O driver with a zero timeout: where the
        // reply is read (see the module documentation).
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use ramstore_clock::{system_clock, ManualClock};
    use tokio::sync::oneshot;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime builds")
    }

    /// A reply that another task sends while the caller polls is returned.
    #[test]
    fn await_polling_returns_a_reply_sent_while_polling() {
        runtime().block_on(async {
            let (tx, rx) = oneshot::channel::<u32>();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                let _ = tx.send(7);
            });
            let clock = system_clock();
            let out = await_polling(rx, Duration::from_millis(100), clock.as_ref()).await;
            assert_eq!(out.ok(), Some(7));
        });
    }

    /// Once the window has passed the caller waits plainly, and still gets a
    /// reply that comes later (here after the clock moved past the window).
    #[test]
    fn await_polling_waits_plainly_after_the_window() {
        runtime().block_on(async {
            let clock = Arc::new(ManualClock::new());
            let handle = clock.handle();
            let (tx, rx) = oneshot::channel::<u32>();
            let advancer = clock.clone();
            let sender = tokio::spawn(async move {
                // Past the window before any reply: the caller stops polling.
                advancer.advance(Duration::from_millis(5));
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                let _ = tx.send(9);
            });
            let out = await_polling(rx, Duration::from_millis(1), handle.as_ref()).await;
            assert_eq!(out.ok(), Some(9));
            sender.await.expect("the sender task finishes");
        });
    }

    /// A zero window never polls: the future is simply awaited.
    #[test]
    fn await_polling_with_zero_window_awaits_plainly() {
        runtime().block_on(async {
            let clock = system_clock();
            let out = await_polling(async { 3 }, Duration::ZERO, clock.as_ref()).await;
            assert_eq!(out, 3);
        });
    }
}
