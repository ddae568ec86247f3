//! The coordinator's external storage: a small, durable key-value store (R§9).
//!
//! RAMCloud's coordinator keeps its metadata in memory and writes every change to a
//! fault-tolerant key-value store (ZooKeeper or LogCabin) before acting on it, so a
//! new coordinator can rebuild its state after a crash (R§9). [`ExternalStorage`] is
//! that interface. Implementations here: [`crate::FileStorage`] (one directory on
//! local disk, for `ramstore dev` and single-coordinator clusters) and
//! [`MemoryStorage`] (tests) and [`crate::EtcdStorage`] (an etcd cluster, for
//! standby coordinators, [`crate::election`]). The trait is object-safe so the
//! coordinator can hold any of them as `Arc<dyn ExternalStorage>`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use parking_lot::Mutex;

/// The longest key any implementation accepts, in bytes. Small enough that
/// [`crate::FileStorage`] can turn every key into a file name (see the assertion
/// there), and the same for every implementation so that they are interchangeable.
pub const MAX_KEY_BYTES: usize = 80;

/// Why a storage operation failed. A failed `put` or `delete` may or may not have
/// reached the disk; the caller must treat the stored value as unknown until its next
/// successful write (the coordinator never applies a change whose write failed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The operating system refused an operation on `path`.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What was being done ("write", "fsync", "rename", …).
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A stored value (or a file in the storage directory) could not be parsed. This is
    /// never papered over with an empty value: silently starting from an empty state
    /// would make the coordinator forget tables and reuse server ids.
    #[error("stored value {key:?} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    /// Another coordinator holds the storage; two writers would overwrite each other's
    /// state.
    #[error(
        "storage {} is in use by another coordinator{}",
        .path.display(),
        holder_text(.holder_pid)
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The process id the holder wrote into the lock file, if readable.
        holder_pid: Option<u32>,
    },
    /// The storage service (etcd) failed or did not answer within its timeout. As
    /// for every failed write, the value is unknown until the next successful one.
    #[error("{op}{}: {reason}", key_text(.key))]
    Backend {
        /// What was being done ("get", "put", "connect", …).
        op: &'static str,
        /// The key concerned (empty if none).
        key: String,
        reason: String,
    },
    /// This coordinator is no longer the leader (R§9: its lease expired or another
    /// coordinator took over), so its writes are refused; it must stop acting as
    /// coordinator.
    #[error("this coordinator is no longer the leader: {reason}")]
    NotLeader { reason: String },
    /// The key is empty or longer than [`MAX_KEY_BYTES`].
    #[error("invalid storage key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
}

fn key_text(key: &str) -> String {
    if key.is_empty() {
        String::new()
    } else {
        format!(" {key:?}")
    }
}

fn holder_text(pid: &Option<u32>) -> String {
    match pid {
        Some(pid) => format!(" (process {pid})"),
        None => String::new(),
    }
}

/// A durable key-value store for coordinator metadata (R§9).
///
/// Keys are non-empty UTF-8 strings of at most [`MAX_KEY_BYTES`] bytes; values are
/// opaque bytes. Implementations are `Send + Sync`; each call is atomic with respect
/// to the others on the same key.
pub trait ExternalStorage: Send + Sync {
    /// The value stored under `key`, or `None` if there is none. A value that cannot
    /// be read back intact is an error ([`StorageError::Corrupt`]), never `None`.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError>;

    /// Stores `value` under `key`, replacing any old value atomically: a reader (or a
    /// coordinator restarted after a crash) sees either the old or the new value,
    /// never a mix. The value is durable when this returns `Ok`.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError>;

    /// Removes `key`; removing an absent key succeeds. Durable when it returns `Ok`.
    fn delete(&self, key: &str) -> Result<(), StorageError>;

    /// Every (key, value) whose key starts with `prefix`, sorted by key.
    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError>;
}

/// Checks the key rules shared by every implementation.
pub(crate) fn validate_key(key: &str) -> Result<(), StorageError> {
    let reason = if key.is_empty() {
        "keys must not be empty"
    } else if key.len() > MAX_KEY_BYTES {
        "keys are limited to MAX_KEY_BYTES (80) bytes"
    } else {
        return Ok(());
    };
    Err(StorageError::InvalidKey {
        key: key.to_owned(),
        reason,
    })
}

/// External storage in this process's memory: nothing survives the process, so it
/// is for tests (and for a coordinator that is allowed to forget everything).
/// Sharing one `Arc<MemoryStorage>` between two coordinators simulates a restart.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    entries: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStorage {
    pub fn new() -> Self {
        Self::default()
    }
}

impl ExternalStorage for MemoryStorage {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        validate_key(key)?;
        Ok(self.entries.lock().get(key).cloned())
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        validate_key(key)?;
        self.entries.lock().insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        validate_key(key)?;
        self.entries.lock().remove(key);
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        Ok(self
            .entries
            .lock()
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_storage_round_trip() {
        let s = MemoryStorage::new();
        assert_eq!(s.get("a").unwrap(), None);
        s.put("a/1", b"one").unwrap();
        s.put("a/2", b"two").unwrap();
        s.put("b", b"bee").unwrap();
        assert_eq!(s.get("a/1").unwrap().as_deref(), Some(&b"one"[..]));
        let listed = s.list("a/").unwrap();
        assert_eq!(
            listed,
            vec![
                ("a/1".to_owned(), b"one".to_vec()),
                ("a/2".to_owned(), b"two".to_vec())
            ]
        );
        s.delete("a/1").unwrap();
        s.delete("a/1").unwrap();
        assert_eq!(s.list("").unwrap().len(), 2);
    }

    #[test]
    fn validate_key_rejects_empty_and_long() {
        assert!(matches!(
            validate_key(""),
            Err(StorageError::InvalidKey { .. })
        ));
        assert!(validate_key(&"k".repeat(MAX_KEY_BYTES)).is_ok());
        assert!(matches!(
            validate_key(&"k".repeat(MAX_KEY_BYTES + 1)),
            Err(StorageError::InvalidKey { .. })
        ));
    }
}
