//! Model-based property test of the simulated network: after any sequence of
//! registrations, crashes, cuts and heals, a call ends as a model of who is up
//! and which links are cut says.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ramstore_clock::SeededRng;
use ramstore_rpc::server::SlowFuture;
use ramstore_rpc::{Handled, RpcError, Service, Transport};
use ramstore_sim::net::SimNet;
use ramstore_sim::trace::Trace;
use ramstore_sim::SimClock;

/// Answers every frame with itself.
struct Echo;

impl Service for Echo {
    fn handle(&self, frame: &[u8], out: &mut Vec<u8>) -> Handled {
        out.extend_from_slice(frame);
        Handled::Done
    }

    fn handle_slow(self: Arc<Self>, frame: Vec<u8>) -> SlowFuture {
        Box::pin(async move { frame })
    }
}

#[derive(Debug, Clone)]
enum Step {
    Start(usize),
    Crash(usize),
    Cut(usize),
    Heal(usize),
    Call(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..3usize).prop_map(Step::Start),
        (0..3usize).prop_map(Step::Crash),
        (0..3usize).prop_map(Step::Cut),
        (0..3usize).prop_map(Step::Heal),
        (0..3usize).prop_map(Step::Call),
        (0..3usize).prop_map(Step::Call),
    ]
}

/// The model: which hosts run (with their incarnation) and which are cut off
/// from the client.
#[derive(Default)]
struct Model {
    up: [Option<u64>; 3],
    starts: [u64; 3],
    cut: BTreeSet<usize>,
}

const DEADLINE: Duration = Duration::from_millis(500);

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn call_ends_as_the_model_says(steps in proptest::collection::vec(step(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let net = SimNet::new(
                SimClock::handle(),
                SeededRng::handle(7),
                Arc::new(Trace::default()),
                false,
            );
            let client = net.client_endpoint("client-0");
            let mut model = Model::default();
            for s in steps {
                match s {
                    Step::Start(h) => {
                        if let Some(n) = model.up[h] {
                            net.crash(&format!("s{h}.{n}"));
                        }
                        model.starts[h] += 1;
                        let n = model.starts[h];
                        net.register(&format!("s{h}.{n}"), n, Arc::new(Echo));
                        model.up[h] = Some(n);
                    }
                    Step::Crash(h) => {
                        if let Some(n) = model.up[h].take() {
                            net.crash(&format!("s{h}.{n}"));
                        }
                    }
                    Step::Cut(h) => {
                        net.set_cut("client-0", &format!("s{h}"), true);
                        model.cut.insert(h);
                    }
                    Step::Heal(h) => {
                        net.set_cut("client-0", &format!("s{h}"), false);
                        model.cut.remove(&h);
                    }
                    Step::Call(h) => {
                        // The newest incarnation's address (a crashed one's if down).
                        let addr = format!("s{h}.{}", model.starts[h].max(1));
                        let started = tokio::time::Instant::now();
                        let got = client.call(&addr, vec![h as u8], DEADLINE).await;
                        let took = started.elapsed();
                        if model.cut.contains(&h) {
                            prop_assert_eq!(got, Err(RpcError::DeadlineExceeded));
                            prop_assert_eq!(took, DEADLINE);
                        } else if model.up[h].is_none() {
                            prop_assert!(
                                matches!(&got, Err(e) if e.peer_gone()),
                                "{:?}", got
                            );
                        } else {
                            prop_assert_eq!(got.as_deref(), Ok(&[h as u8][..]));
                            prop_assert!(took <= Duration::from_millis(12));
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
}
