//! Waiting for several RPCs at once without spawning tasks (so the requests may
//! borrow the caller's data) and without an extra dependency: [`join_all`] polls
//! every unfinished future whenever the task wakes. Fan-out is one future per
//! server, so polling them all is cheap.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Runs `futures` concurrently; their outputs, in the order given.
pub(crate) fn join_all<F: Future + Unpin>(futures: Vec<F>) -> JoinAll<F> {
    let left = futures.len();
    JoinAll {
        outputs: futures.iter().map(|_| None).collect(),
        futures: futures.into_iter().map(Some).collect(),
        left,
    }
}

pub(crate) struct JoinAll<F: Future> {
    futures: Vec<Option<F>>,
    outputs: Vec<Option<F::Output>>,
    left: usize,
}

// Nothing inside is ever pinned in place: the futures are `Unpin` and polled through
// `Pin::new`, and the outputs are plain values.
impl<F: Future> Unpin for JoinAll<F> {}

impl<F: Future + Unpin> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        for (slot, output) in this.futures.iter_mut().zip(this.outputs.iter_mut()) {
            if let Some(f) = slot {
                if let Poll::Ready(v) = Pin::new(f).poll(cx) {
                    *output = Some(v);
                    *slot = None;
                    this.left -= 1;
                }
            }
        }
        if this.left == 0 {
            Poll::Ready(
                std::mem::take(&mut this.outputs)
                    .into_iter()
                    .flatten()
                    .collect(),
            )
        } else {
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    type Boxed = Pin<Box<dyn Future<Output = u64> + Send>>;

    #[tokio::test]
    async fn outputs_come_back_in_order_and_run_concurrently() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let futures: Vec<Boxed> = (0..4u64)
            .map(|i| {
                let (in_flight, most) = (in_flight.clone(), most.clone());
                Box::pin(async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Later futures finish first.
                    tokio::time::sleep(Duration::from_millis(40 - 10 * i)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    i
                }) as Boxed
            })
            .collect();
        assert_eq!(join_all(futures).await, vec![0, 1, 2, 3]);
        assert_eq!(most.load(Ordering::SeqCst), 4);
        assert!(join_all(Vec::<Boxed>::new()).await.is_empty());
    }
}
