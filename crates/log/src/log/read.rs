//! Reading entries in place: an object's view (no copy when it lies in one seglet),
//! and the header parse a segment scan needs (R§4.1).

use super::Log;
use crate::entry::{self, EntryError, EntryHeader, ObjectLayout, MAX_HEADER_BYTES};
use crate::pool::SegletPool;
use crate::{LogRef, SEGLET_BYTES};

impl Log {
    /// Reads the first bytes of the entry at `r` (enough to parse its header).
    fn prefix<'a>(&'a self, r: LogRef, buf: &'a mut [u8; MAX_HEADER_BYTES]) -> &'a [u8] {
        let seglet = SegletPool::seglet_of(r);
        let offset = (r.0 % SEGLET_BYTES as u64) as usize;
        let tail = self.pool.seglet_tail(seglet, offset);
        if tail.len() >= MAX_HEADER_BYTES {
            // Bytes past the end of the entry may belong to a later, unpublished entry;
            // the parser reads only as far as the entry's own lengths say.
            &tail[..MAX_HEADER_BYTES]
        } else {
            let n = self.pool.copy_out(r, buf);
            &buf[..n]
        }
    }

    /// Parses the entry at `r` once for a segment scan (`entry::parse_scanned`).
    pub(crate) fn scan_entry(
        &self,
        r: LogRef,
    ) -> Result<(EntryHeader, entry::ScannedLayout), EntryError> {
        let mut buf = [0u8; MAX_HEADER_BYTES];
        entry::parse_scanned(self.prefix(r, &mut buf))
    }

    /// A hint that the entry at `r` is read soon: its first two cache lines (the
    /// header, the key and the start of a small value). A scan that walks the
    /// hash table issues it for a batch of references before reading them, so
    /// their cache misses overlap instead of following one another (K§2.3: the
    /// source's pull is bound by these misses).
    #[inline]
    pub fn prefetch_entry(&self, r: LogRef) {
        let seglet = SegletPool::seglet_of(r);
        let offset = (r.0 % SEGLET_BYTES as u64) as usize;
        self.pool.prefetch(seglet, offset);
        // The second line may lie in the next seglet: not worth a chain walk.
        self.pool.prefetch(seglet, offset + 64);
    }

    /// A view of the object entry at `r`. The caller holds an epoch pin and got `r`
    /// from the hash table (or a segment scan).
    pub fn object(&self, r: LogRef) -> Result<ObjectView<'_>, EntryError> {
        let mut buf = [0u8; MAX_HEADER_BYTES];
        let layout = entry::parse_object_layout(self.prefix(r, &mut buf))?;
        Ok(self.object_with_layout(r, layout))
    }

    /// A view of the object entry at `r` whose layout a scan already parsed.
    pub(crate) fn object_with_layout(&self, r: LogRef, layout: ObjectLayout) -> ObjectView<'_> {
        let offset = (r.0 % SEGLET_BYTES as u64) as usize;
        let contiguous = if offset + layout.total_len <= SEGLET_BYTES {
            Some(&self.pool.seglet_tail(SegletPool::seglet_of(r), offset)[..layout.total_len])
        } else {
            None
        };
        ObjectView {
            log: self,
            r,
            layout,
            contiguous,
        }
    }

    /// `r` advanced by `n` bytes along its seglet chain.
    pub(crate) fn advance(&self, r: LogRef, n: usize) -> LogRef {
        let mut seglet = SegletPool::seglet_of(r);
        let mut offset = (r.0 % SEGLET_BYTES as u64) as usize + n;
        while offset >= SEGLET_BYTES {
            match self.pool.next_seglet(seglet) {
                Some(next) => {
                    seglet = next;
                    offset -= SEGLET_BYTES;
                }
                // Only reachable with a corrupt length; the piecewise readers then
                // stop early and checksums fail.
                None => return SegletPool::log_ref(seglet, SEGLET_BYTES - 1),
            }
        }
        SegletPool::log_ref(seglet, offset)
    }
}

/// A published object entry in the log, possibly spanning seglets.
pub struct ObjectView<'a> {
    log: &'a Log,
    r: LogRef,
    layout: ObjectLayout,
    /// The whole entry when it lies in one seglet (the common case: no copies).
    contiguous: Option<&'a [u8]>,
}

impl<'a> ObjectView<'a> {
    pub fn table_id(&self) -> u64 {
        self.layout.table_id
    }
    pub fn version(&self) -> u64 {
        self.layout.version
    }
    pub fn birth(&self) -> u64 {
        self.layout.birth
    }
    /// Wall-clock ms since the Unix epoch from which the object reads as absent.
    pub fn expires_at(&self) -> Option<u64> {
        self.layout.expires_at
    }
    /// Whether the object has expired at wall-clock time `now_ms`: an expiry
    /// time is the first instant the object is gone (Redis: a key with 0 ms
    /// left no longer exists).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.layout.expires_at.is_some_and(|at| at <= now_ms)
    }
    pub fn key_len(&self) -> usize {
        self.layout.key_len
    }
    pub fn value_len(&self) -> usize {
        self.layout.value_len
    }
    /// All bytes of the entry, header and checksum included.
    pub fn entry_len(&self) -> usize {
        self.layout.total_len
    }
    pub fn location(&self) -> LogRef {
        self.r
    }

    fn pieces(&self, offset: usize, len: usize, mut f: impl FnMut(&[u8])) {
        match self.contiguous {
            Some(bytes) => f(&bytes[offset..offset + len]),
            None => {
                let start = self.log.advance(self.r, offset);
                self.log.pool.for_each_piece(start, len, f);
            }
        }
    }

    /// Whether the key equals `key` (compared in place).
    pub fn key_eq(&self, key: &[u8]) -> bool {
        if self.layout.key_len != key.len() {
            return false;
        }
        if let Some(bytes) = self.contiguous {
            let o = self.layout.key_offset;
            return &bytes[o..o + key.len()] == key;
        }
        let mut rest = key;
        let mut equal = true;
        self.pieces(self.layout.key_offset, key.len(), |p| {
            if equal {
                equal = rest.len() >= p.len() && &rest[..p.len()] == p;
                rest = &rest[p.len().min(rest.len())..];
            }
        });
        equal
    }

    /// The key, when it lies in one piece.
    pub fn key_slice(&self) -> Option<&'a [u8]> {
        self.contiguous
            .map(|b| &b[self.layout.key_offset..self.layout.key_offset + self.layout.key_len])
    }

    /// The value, when it lies in one piece (a pull answer encodes it from
    /// here, K§2.3).
    pub fn value_slice(&self) -> Option<&'a [u8]> {
        self.contiguous
            .map(|b| &b[self.layout.value_offset..self.layout.value_offset + self.layout.value_len])
    }

    /// Appends the key to `out`.
    pub fn copy_key(&self, out: &mut Vec<u8>) {
        self.pieces(self.layout.key_offset, self.layout.key_len, |p| {
            out.extend_from_slice(p)
        });
    }

    /// Calls `f` with the consecutive pieces of the value (scatter-gather: no copy).
    pub fn value_pieces(&self, f: impl FnMut(&[u8])) {
        self.pieces(self.layout.value_offset, self.layout.value_len, f);
    }

    /// Appends the value to `out`.
    pub fn copy_value(&self, out: &mut Vec<u8>) {
        out.reserve(self.layout.value_len);
        self.value_pieces(|p| out.extend_from_slice(p));
    }

    /// Whether the stored checksum matches the entry's bytes.
    pub fn checksum_ok(&self) -> bool {
        let body = self.layout.total_len - entry::CRC_BYTES;
        let mut crc = 0u32;
        self.pieces(0, body, |p| crc = crc32c::crc32c_append(crc, p));
        let mut stored = [0u8; 4];
        let mut at = 0;
        self.pieces(body, entry::CRC_BYTES, |p| {
            stored[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        });
        crc == u32::from_le_bytes(stored)
    }
}
