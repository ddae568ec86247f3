//! ramstore's Redis protocol front end: a RESP2/RESP3 listener inside a storage
//! server that answers Redis string commands with ramstore object operations.
//!
//! * [`protocol`]: RESP framing — a parser for multibulk and inline commands with a
//!   limit on every length ([`MAX_BULK_BYTES`], [`MAX_ARGS`], [`MAX_COMMAND_BYTES`],
//!   [`MAX_INLINE_BYTES`]) and an encoder for RESP2 and RESP3 replies.
//! * [`cmd`]: the command set (GET, SET, MGET, INCR, SCAN, INFO, HELLO, …, and
//!   the extensions `RS.GETV`/`RS.CAS`): one table of names, arities and flags
//!   ([`cmd::COMMANDS`]), a parser from a frame's arguments to a typed
//!   [`cmd::Command`] that borrows them, and one file per command family running
//!   each as ramstore operations on table `db{n}` (SELECT n; created on first
//!   use).
//! * [`backend`]: where operations run — on the local master, in-process and
//!   without the native wire format, when it owns the key; otherwise forwarded
//!   through the client library (one extra hop).
//! * [`server`]: the listener and the per-connection loop.
//! * [`poller`]: keeps an event loop polling its sockets for a moment after the
//!   last read instead of sleeping at once (`ramstore_rpc::poller`, re-exported:
//!   the native RPC server reports to the same kind of poller).
//!
//! Invariants:
//! * A write is acknowledged exactly when a native write would be: local writes go
//!   to the master directly ([`backend::LocalObjects`]) behind the guards and with
//!   the replication wait of its native request path, so the reply waits until the
//!   write is on all R backups; forwarded writes return only once the owning master
//!   acknowledged them the same way.
//! * Replies leave in command order. Commands of a pipeline run in order too: each
//!   is applied before the next starts; only the wait for durability overlaps.
//! * Bad input never panics: malformed framing answers `-ERR Protocol error: …` and
//!   closes the connection (as Redis does); an unknown command or a bad argument
//!   count answers an error and the connection stays open.
//!
//! Time: the connection time limits, INFO's uptime and the NO_SPACE retry sleeps
//! run on a `ramstore_clock::Clock` — [`RespConfig::clock`] for the listener, the
//! forwarding client's (`ClientOptions::clock`) for the backend. The one
//! exception is the [`poller`]'s window, which bounds how long a core spins and
//! is real CPU time by design (a simulation turns it off: `poll_before_sleep_us`
//! 0).
//!
//! Thread-safety: [`start`] serves from dedicated event-loop threads, each a
//! single-threaded runtime, or from the caller's own single-threaded runtime; [`Shared`] (and the [`Backend`] in it) is shared by
//! every connection on every loop (`Send + Sync`); each connection's state
//! ([`cmd::Connection`]) belongs to the task serving it. The local service is
//! called from those threads; replication waits it hands back are driven by the
//! server's own runtime and wake the loop when done.

pub mod backend;
pub mod cmd;
pub mod glob;
pub mod long_double;
pub mod protocol;
pub use ramstore_rpc::poller;
pub mod server;
pub mod shared;
pub mod sink;

use std::net::SocketAddr;
use std::sync::Arc;

pub use backend::{Backend, LocalMaster, StoreError};
pub use poller::{Poller, DEFAULT_POLL_BEFORE_SLEEP_US, MAX_POLL_BEFORE_SLEEP_US};
pub use protocol::{ProtocolError, MAX_ARGS, MAX_BULK_BYTES, MAX_COMMAND_BYTES, MAX_INLINE_BYTES};
pub use server::serve;
pub use shared::{RespConfig, RespStats, Shared};

/// Binds `listen` and serves RESP there from [`RespConfig::threads`] dedicated
/// threads, each running its own single-threaded event loop (as Redis does with
/// one): a connection's reads, commands and writes all happen on one thread, with
/// no hand-off between runtime workers, which on small machines costs more than
/// the command itself. Replication waits and forwarded requests are served by the
/// server's own runtime and only *wake* these loops.
///
/// With `threads` 0 and a caller on a current-thread runtime, RESP is served on
/// the caller's runtime instead, by tasks of its one thread (`ramstore dev`):
/// then the whole durable write — command, log append, replication RPCs, the
/// backups' work when they live in the same process, acknowledgements, reply —
/// runs on one thread that polls rather than sleeps between its steps, with
/// [`RespConfig::loop_poller`] if the loop has one. (On a multi-threaded caller,
/// 0 counts as 1.)
///
/// Returns the bound address and a task on the caller's runtime standing for the
/// listener: aborting (or dropping) it stops the event loops.
pub async fn start(
    listen: &str,
    backend: Backend,
    mut config: RespConfig,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = std::net::TcpListener::bind(listen)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    config.port = addr.port();
    let on_caller = config.threads == 0
        && tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::CurrentThread;
    let threads = config.threads.clamp(1, MAX_THREADS);
    let shared = Arc::new(Shared::new(backend, config));
    if on_caller {
        // One event loop for everything (`ramstore dev`): the client's command,
        // the master's replication and the backups' answers run on one thread
        // with no hand-off, and the poller keeps it polling through the wait.
        // The loop's own poller if it has one (its owner runs it; the native
        // ports report to it too), else one of our own.
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (poller, polling) = match shared.config.loop_poller.clone() {
            Some(poller) => (poller, None),
            None => {
                let poller = Arc::new(Poller::sharing_runtime(shared.config.poll_before_sleep_us));
                let polling = poller.spawn();
                (poller, Some(polling))
            }
        };
        let task = tokio::spawn(async move {
            // Our own poller stops with the listener's task.
            struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);
            impl Drop for AbortOnDrop {
                fn drop(&mut self) {
                    if let Some(task) = &self.0 {
                        task.abort();
                    }
                }
            }
            let _polling = AbortOnDrop(polling);
            serve(listener, shared, poller).await;
        });
        return Ok((addr, task));
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    for i in 0..threads {
        let listener = listener.try_clone()?;
        let shared = shared.clone();
        let mut stop = stop_rx.clone();
        let poller = Arc::new(Poller::new(shared.config.poll_before_sleep_us));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("resp-{i}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!(error = %e, "RESP event loop cannot listen");
                            return;
                        }
                    };
                    // Dropped with the runtime when the loop ends.
                    tokio::spawn({
                        let poller = poller.clone();
                        async move { poller.run().await }
                    });
                    tokio::select! {
                        () = serve(listener, shared, poller) => {}
                        _ = stop.wait_for(|stopped| *stopped) => {}
                    }
                });
            })?;
    }
    // Stops the loops when the task is aborted or dropped with the runtime.
    struct StopOnDrop(tokio::sync::watch::Sender<bool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(true);
        }
    }
    let guard = StopOnDrop(stop_tx);
    // The connections' time limits are enforced from the server's runtime, off
    // the event loops.
    let conns = shared.conns.clone();
    let task = tokio::spawn(async move {
        let _guard = guard;
        conns.run_sweeper().await;
    });
    Ok((addr, task))
}

/// Most RESP event-loop threads one listener may have.
pub const MAX_THREADS: usize = 64;
