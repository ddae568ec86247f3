//! Multi-object transactions on a participant master (Lee et al., SOSP'15 §6;
//! R§10.3): the client-driven two-phase commit's object locks ([`locks`]) and
//! the prepare / decide steps that take, apply and release them ([`prepare`]).
//!
//! Prepared ops are durable: a PREPARED vote follows their log records (entry
//! type 8), and a replay re-takes their locks ([`replay`]; design notes
//! "Transactions", "Durability"). A commit that other masters take part in is
//! held until they all applied it ([`held`]).

pub mod held;
pub mod locks;
pub mod prepare;
pub mod recovery;
pub mod replay;

pub use locks::{LockTable, ObjectLocked, TxId};
pub use prepare::{Transactions, TxOpOwned};
pub use recovery::{decision_of, Undecided};
