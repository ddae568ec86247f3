//! The ramstore storage server: one master's object store behind the RPC transport
//! (R§3–5, DESIGN §2).
//!
//! A server binds its listener first, then enlists with the coordinator, then owns
//! whatever tablets the coordinator hands it (TakeTabletOwnership is idempotent) and
//! answers UNKNOWN_TABLET for every other key. Requests are served on the task that
//! read them; enumeration and tablet drops run off the fast path.
//!
//! Durability: none yet — writes live in this process's DRAM until replication to
//! backups lands (issue 4); `GetServerStats` says `durability=dram-only`.

pub mod metrics;
pub mod storage_server;
pub mod storage_service;

pub use storage_server::{start, ServerError, ServerOptions, StartedServer};
pub use storage_service::StorageService;
