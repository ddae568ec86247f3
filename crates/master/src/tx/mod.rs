//! Multi-object transactions on a participant master (Lee et al., SOSP'15 §6;
//! R§10.3): the client-driven two-phase commit's object locks ([`locks`]) and
//! the prepare / decide steps that take, apply and release them ([`prepare`]).
//!
//! First slice: locks and prepared ops live in memory only. A participant that
//! crashes between prepare and decision forgets them (design notes
//! "Transactions", "What remains").

pub mod locks;
pub mod prepare;

pub use locks::{LockTable, ObjectLocked, TxId};
pub use prepare::{Transactions, TxOpOwned};
