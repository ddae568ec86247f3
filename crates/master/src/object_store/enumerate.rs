//! Enumeration of a table's objects, one hash bucket at a time, so every object
//! that exists throughout is returned exactly once while writes and cleaning go on.

use ramstore_log::LogRef;

use super::{key_hash, EnumeratedObject, ObjectStore};
use crate::error::ReadError;

/// A scan window ends once it holds this many references (a few memory latencies
/// of misses in flight, small enough that a batch cut short by `max_bytes`
/// prefetched little for nothing)...
const PREFETCH_REFS: usize = 32;
/// ...or this many buckets (sparse tables: most buckets hold other tables'
/// entries, or none).
const PREFETCH_BUCKETS: usize = 16;

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
        // References of a window of buckets, with where each bucket's run ends:
        // the whole window is prefetched before any entry is read, so the cache
        // misses on the entries (the scan's cost, K§2.3) overlap.
        let mut refs: Vec<LogRef> = Vec::with_capacity(2 * PREFETCH_REFS);
        let mut runs: Vec<(usize, usize)> = Vec::with_capacity(PREFETCH_BUCKETS);
        let (mut key_buf, mut value_buf) = (Vec::new(), Vec::new());
        // One clock read per batch: an object expiring during the batch may
        // still be listed, as Redis's SCAN may list a key that expires during it.
        let now_ms = self.now_ms();
        loop {
            refs.clear();
            runs.clear();
            let mut b = bucket;
            loop {
                index.for_each_in_bucket(b, |r| refs.push(LogRef(r)));
                runs.push((b, refs.len()));
                let (_, last) = index.bucket_hash_range(b);
                if last >= end || refs.len() >= PREFETCH_REFS || runs.len() == PREFETCH_BUCKETS {
                    break;
                }
                b += 1;
            }
            for &r in &refs {
                log.prefetch_entry(r);
            }
            let mut from = 0;
            for &(b, to) in &runs {
                for &r in &refs[from..to] {
                    let Ok(view) = log.object(r) else { continue };
                    // An expired object is absent (lazy expiry).
                    if view.table_id() != table_id || view.is_expired(now_ms) {
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
                    // The walk may pass entries of other buckets (an overflow
                    // bucket unlinked and reused by another chain while the walk
                    // stood in it, `ramstore_index` docs); they are returned with
                    // their own bucket, or the batch would hold them twice.
                    if hash < cursor || hash > end || index.bucket_of(hash) != b {
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
                from = to;
                let (_, last) = index.bucket_hash_range(b);
                if last >= end {
                    return Ok(end.checked_add(1));
                }
                if bytes >= max_bytes {
                    return Ok(Some(last + 1));
                }
            }
            // `runs` is never empty: the inner loop pushes before it breaks.
            bucket = runs[runs.len() - 1].0 + 1;
        }
    }
}
