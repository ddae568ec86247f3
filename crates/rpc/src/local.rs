//! An in-process transport: calls services directly (like RAMCloud's BindTransport),
//! so clusters of services can be tested without sockets.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ramstore_clock::{system_clock, Clock};

use crate::server::{Handled, Service};
use crate::transport::{CallFuture, RpcError, Transport};

/// A registered service's entry point: runs one request frame to its response.
pub type Dispatch = Arc<dyn Fn(Vec<u8>) -> CallFuture<'static> + Send + Sync>;

/// A [`Transport`] that delivers frames to services registered by address.
#[derive(Clone)]
pub struct LocalTransport {
    services: Arc<parking_lot::RwLock<HashMap<String, Dispatch>>>,
    /// The clock call deadlines run on.
    clock: Arc<dyn Clock>,
}

impl Default for LocalTransport {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalTransport {
    /// A transport whose deadlines run on the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// A transport whose deadlines run on `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            services: Arc::default(),
            clock,
        }
    }

    /// Makes `service` reachable at `addr` (replacing any earlier one).
    pub fn register<S: Service>(&self, addr: &str, service: Arc<S>) {
        let dispatch: Dispatch = Arc::new(move |frame: Vec<u8>| {
            let service = service.clone();
            Box::pin(async move {
                let mut out = Vec::new();
                let response = match service.handle(&frame, &mut out) {
                    Handled::Done => out,
                    Handled::Slow => service.handle_slow(frame).await,
                    Handled::Deferred(answer) => answer.await,
                };
                Ok(Bytes::from(response))
            }) as CallFuture<'static>
        });
        self.services.write().insert(addr.to_string(), dispatch);
    }

    /// The service registered at `addr`: for a transport that adds its own
    /// delivery rules (delays, losses, partitions) on top of this registry, as the
    /// cluster simulator's network does (`crates/sim`).
    pub fn dispatch(&self, addr: &str) -> Option<Dispatch> {
        self.services.read().get(addr).cloned()
    }

    /// Makes `addr` unreachable (a crashed server).
    pub fn unregister(&self, addr: &str) {
        self.services.write().remove(addr);
    }
}

impl Transport for LocalTransport {
    fn call<'a>(&'a self, addr: &'a str, frame: Vec<u8>, deadline: Duration) -> CallFuture<'a> {
        let dispatch = self.dispatch(addr);
        Box::pin(async move {
            let dispatch = dispatch.ok_or_else(|| RpcError::NoSuchService(addr.to_string()))?;
            // The handler runs on a task of its own, as on a TCP server's
            // connection task: a caller that gives up at its deadline must not
            // cancel the server's work halfway (a master's inline replication
            // round, cancelled so, never ran again — found by the simulator).
            let handler = tokio::spawn(dispatch(frame));
            match self.clock.timeout(deadline, handler).await {
                Ok(Ok(answer)) => answer,
                // The handler panicked: the connection would have closed.
                Ok(Err(_)) => Err(RpcError::ConnectionClosed(addr.to_string())),
                Err(_) => Err(RpcError::DeadlineExceeded),
            }
        })
    }
}
