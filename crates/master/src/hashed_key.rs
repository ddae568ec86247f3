//! A key with its hash computed once (issue 21, "hash once"): a plain write
//! needs the key's hash for its lock-table shard (`tx/locks.rs`) and again for
//! its hash-table bucket and tablet (R§4.1); hashing it once per request and
//! passing the pair down saves a second pass over the key on every write.
//!
//! The fields are private, so a `HashedKey` always holds the hash of its own
//! key: no caller can pair a key with another key's hash.

use ramstore_wire::key_hash;

/// A key and its [`key_hash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedKey<'a> {
    key: &'a [u8],
    hash: u64,
}

impl<'a> HashedKey<'a> {
    /// Hashes `key`, once.
    pub fn new(key: &'a [u8]) -> Self {
        Self {
            key,
            hash: key_hash(key),
        }
    }

    /// The key's bytes.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The key's hash (`key_hash(self.key())`).
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_pairs_a_key_with_its_own_hash() {
        let k = HashedKey::new(b"alice");
        assert_eq!(k.key(), b"alice");
        assert_eq!(k.hash(), key_hash(b"alice"));
        assert_ne!(k.hash(), HashedKey::new(b"bob").hash());
    }
}
