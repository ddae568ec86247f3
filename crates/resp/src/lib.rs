//! ramstore's Redis protocol front end: a RESP2/RESP3 listener inside a storage
//! server that answers Redis string commands with ramstore object operations.
//!
//! * [`protocol`]: RESP framing — a parser for multibulk and inline commands with a
//!   limit on every length ([`MAX_BULK_BYTES`], [`MAX_ARGS`], [`MAX_COMMAND_BYTES`],
//!   [`MAX_INLINE_BYTES`]) and an encoder for RESP2 and RESP3 replies.
//! * [`commands`]: the command set (GET, SET, MGET, INCR, SCAN, INFO, HELLO, …, and
//!   the extensions `RS.GETV`/`RS.CAS`), each as ramstore operations on table
//!   `db{n}` (SELECT n; created on first use).
//! * [`backend`]: where operations run — on the local master, in-process, when it
//!   owns the key; otherwise forwarded through the client library (one extra hop).
//! * [`server`]: the listener and the per-connection loop.
//!
//! Invariants:
//! * A write is acknowledged exactly when a native write would be: local writes go
//!   through the storage service's own request path, whose reply waits until the
//!   write is on all R backups; forwarded writes return only once the owning master
//!   acknowledged them the same way.
//! * Replies leave in command order. Commands of a pipeline run in order too: each
//!   is applied before the next starts; only the wait for durability overlaps.
//! * Bad input never panics: malformed framing answers `-ERR Protocol error: …` and
//!   closes the connection (as Redis does); an unknown command or a bad argument
//!   count answers an error and the connection stays open.
//!
//! Thread-safety: [`Shared`] (and the [`Backend`] in it) is shared by every
//! connection; each connection's state ([`commands::Connection`]) belongs to the
//! task serving it.

pub mod backend;
pub mod commands;
pub mod glob;
pub mod protocol;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;

pub use backend::{Backend, LocalMaster, StoreError};
pub use protocol::{ProtocolError, MAX_ARGS, MAX_BULK_BYTES, MAX_COMMAND_BYTES, MAX_INLINE_BYTES};
pub use server::{serve, RespConfig, Shared};

/// Binds `listen` and serves RESP there on a new task; returns the bound address
/// and the task (abort it to stop listening).
pub async fn start(
    listen: &str,
    backend: Backend,
    mut config: RespConfig,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    config.port = addr.port();
    let shared = Arc::new(Shared::new(backend, config));
    Ok((addr, tokio::spawn(serve(listener, shared))))
}
