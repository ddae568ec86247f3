//! Enumeration of a table's objects, one hash bucket at a time, so every object
//! that exists throughout is returned exactly once while writes and cleaning go on.

use ramstore_log::LogRef;

use super::{key_hash, EnumeratedObject, ObjectStore};
use crate::error::ReadError;

impl ObjectStore {
    /// Returns the next batch of objects of `table_id` in the tablet holding hash
    /// `cursor`, starting at that hash, and the cursor to continue from (`None` when
    /// the end of the key-hash space is reached; the next cursor may belong to
    /// another master). Batches end at hash-bucket boundaries after at least
    /// `max_bytes` of keys and values, so every object that exists for the whole
    /// enumeration is returned exactly once, even while writes and cleaning go on:
    /// such an object never leaves its bucket, a bucket is read whole, and entries of
    /// other buckets that the walk of a bucket may pass are skipped.
    pub fn enumerate(
        &self,
        table_id: u64,
        cursor: u64,
        max_bytes: usize,
        out: &mut Vec<EnumeratedObject>,
    ) -> Result<Option<u64>, ReadError> {
        let tablets = self.inner.shared.tablets.load();
        let tablet = tablets
            .find_serving(table_id, cursor)
            .ok_or(ReadError::UnknownTablet)?;
        self.scan(table_id, cursor, tablet.end_hash, max_bytes, out)
    }

    /// The bucket-cursor scan of [`Self::enumerate`] over `[cursor, end]`, which
    /// the caller has checked lies in a tablet it may read, into owned copies.
    pub(crate) fn scan(
        &self,
        table_id: u64,
        cursor: u64,
        end: u64,
        max_bytes: usize,
        out: &mut Vec<EnumeratedObject>,
    ) -> Result<Option<u64>, ReadError> {
        self.scan_with(table_id, cursor, end, max_bytes, |version, key, value| {
            out.push(EnumeratedObject {
                key: key.to_vec(),
                value: value.to_vec(),
                version,
            })
        })
    }

    /// The bucket-cursor scan of [`Self::enumerate`] over `[cursor, end]`, which
    /// the caller has checked lies in a tablet it may read (also a migration's
    /// pulls, K§2.3): calls `visit(version, key, value)` for each object, with
    /// key and value in place in the log (copied into a scratch buffer only when
    /// an entry straddles two seglets), so a pull answer is encoded straight
    /// from the log. Holds an epoch pin for the whole batch.
    pub(crate) fn scan_with(
        &self,
        table_id: u64,
        cursor: u64,
        end: u64,
        max_bytes: usize,
        mut visit: impl FnMut(u64, &[u8], &[u8]),
    ) -> Result<Option<u64>, ReadError> {
        let index = &self.inner.index;
        let log = &self.inner.log;
        let _pin = log.pin();
        let mut bytes = 0usize;
        let mut bucket = index.bucket_of(cursor);
        let mut refs = Vec::new();
        let (mut key_buf, mut value_buf) = (Vec::new(), Vec::new());
        loop {
            refs.clear();
            index.for_each_in_bucket(bucket, |r| refs.push(LogRef(r)));
            for &r in &refs {
                let Ok(view) = log.object(r) else { continue };
                if view.table_id() != table_id {
                    continue;
                }
                let key = match view.key_slice() {
                    Some(k) => k,
                    None => {
                        key_buf.clear();
                        view.copy_key(&mut key_buf);
                        &key_buf[..]
                    }
                };
                let hash = key_hash(key);
                // The walk may pass entries of other buckets (an overflow bucket
                // unlinked and reused by another chain while the walk stood in it,
                // `ramstore_index` docs); they are returned with their own bucket,
                // or the batch would hold them twice.
                if hash < cursor || hash > end || index.bucket_of(hash) != bucket {
                    continue;
                }
                let value = match view.value_slice() {
                    Some(v) => v,
                    None => {
                        value_buf.clear();
                        view.copy_value(&mut value_buf);
                        &value_buf[..]
                    }
                };
                bytes += key.len() + value.len();
                visit(view.version(), key, value);
            }
            let (_, last) = index.bucket_hash_range(bucket);
            if last >= end {
                return Ok(end.checked_add(1));
            }
            if bytes >= max_bytes {
                return Ok(Some(last + 1));
            }
            bucket += 1;
        }
    }
}
