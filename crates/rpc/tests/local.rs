//! The in-process transport behaves like TCP where callers can tell: a call that
//! gives up at its deadline leaves the server's handler running to its end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, LocalTransport, RpcError, Service, Transport};

/// A service whose every request takes 50 ms of async work and then records
/// that it finished.
#[derive(Default)]
struct SlowService {
    finished: AtomicBool,
}

impl Service for SlowService {
    fn handle(&self, _frame: &[u8], _out: &mut Vec<u8>) -> Handled {
        Handled::Slow
    }

    fn handle_slow(self: Arc<Self>, _frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.finished.store(true, Ordering::SeqCst);
            b"done".to_vec()
        })
    }
}

// Regression (session 28): the handler ran inside the caller's future, so a
// caller's timeout cancelled it halfway — in a master, its inline replication
// round, which then never ran again (found by the simulator, `crates/sim`).
#[tokio::test]
async fn call_that_times_out_leaves_the_handler_running() {
    let transport = LocalTransport::new();
    let service = Arc::new(SlowService::default());
    transport.register("s", service.clone());
    let answer = transport
        .call("s", b"work".to_vec(), Duration::from_millis(5))
        .await;
    assert_eq!(answer, Err(RpcError::DeadlineExceeded));
    assert!(!service.finished.load(Ordering::SeqCst));
    for _ in 0..200 {
        if service.finished.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the handler was cancelled with its caller");
}

#[tokio::test]
async fn call_within_its_deadline_gets_the_answer() {
    let transport = LocalTransport::new();
    transport.register("s", Arc::new(SlowService::default()));
    let answer = transport
        .call("s", b"work".to_vec(), Duration::from_secs(5))
        .await
        .expect("answered");
    assert_eq!(&answer[..], b"done");
}
