//! Lists of items inside a body (multi-operations, enumeration results, server lists,
//! tablet maps), decoded zero-copy: a [`List`] is the validated bytes of its items plus
//! their count, and iterating it parses each item again from those bytes.
//!
//! Validation happens once, when the frame is decoded, so iteration cannot fail; and
//! because every field decodes strictly, the bytes of a list are the one encoding of
//! its items (re-encoding a decoded list copies the bytes).

use std::fmt;
use std::marker::PhantomData;

use crate::codec::{
    len_usize, put_bool, put_failure_domain, put_key, put_rules, put_status, put_string, put_u32,
    put_u64, put_u8, put_value, Reader,
};
use crate::error::WireError;
use crate::fields::{ServerStatus, Services};
use crate::rules::{RejectRules, RULES_BYTES};
use crate::status::Status;
use crate::MAX_MULTI_OPS;

pub(crate) mod sealed {
    use super::*;

    /// How one item of a list is laid out. Sealed: the set of list layouts is the
    /// wire format, which only this crate defines.
    pub trait Sealed<'a>: Sized {
        /// The fewest bytes one item can take (all variable parts empty); lets a
        /// decoder reject an impossible count before walking the items.
        const MIN_BYTES: usize;
        /// The most items a list of this kind may hold.
        const MAX_ITEMS: usize;
        fn read(r: &mut Reader<'a>) -> Result<Self, WireError>;
        fn write(&self, out: &mut Vec<u8>) -> Result<(), WireError>;
    }
}

/// An item type that can appear in a [`List`].
pub trait ListItem<'a>: sealed::Sealed<'a> {}

/// A validated, borrowed list of `T` items: `u32 LE count` on the wire, then the
/// items back to back. Cheap to copy; iterate with [`List::iter`].
pub struct List<'a, T> {
    count: u32,
    bytes: &'a [u8],
    item: PhantomData<fn() -> T>,
}

impl<'a, T: ListItem<'a>> List<'a, T> {
    /// Reads the count and validates every item; the reader ends after the list.
    pub(crate) fn read(r: &mut Reader<'a>) -> Result<Self, WireError> {
        let count = r.u32()?;
        let n = len_usize(count);
        if n > T::MAX_ITEMS {
            return Err(WireError::TooManyItems(n));
        }
        // Each item takes at least MIN_BYTES, so a count the remaining bytes cannot
        // hold is rejected without walking them (bounds the work per frame byte).
        if n.saturating_mul(T::MIN_BYTES) > r.remaining() {
            return Err(WireError::Truncated);
        }
        let start = r.rest();
        for _ in 0..n {
            T::read(r)?;
        }
        let used = start.len() - r.remaining();
        Ok(List {
            count,
            bytes: start.get(..used).ok_or(WireError::Truncated)?,
            item: PhantomData,
        })
    }

    /// A list of no items.
    pub fn empty() -> Self {
        List {
            count: 0,
            bytes: &[],
            item: PhantomData,
        }
    }

    /// Appends the list in its wire form (count, then the items' bytes).
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        put_u32(out, self.count);
        out.extend_from_slice(self.bytes);
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        len_usize(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The items, in wire order.
    pub fn iter(&self) -> ListIter<'a, T> {
        ListIter {
            reader: Reader::new(self.bytes),
            left: self.len(),
            item: PhantomData,
        }
    }

    /// The encoded items (without the count), borrowed from the frame.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl<'a, T: ListItem<'a>> IntoIterator for List<'a, T> {
    type Item = T;
    type IntoIter = ListIter<'a, T>;

    fn into_iter(self) -> ListIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: ListItem<'a>> IntoIterator for &List<'a, T> {
    type Item = T;
    type IntoIter = ListIter<'a, T>;

    fn into_iter(self) -> ListIter<'a, T> {
        self.iter()
    }
}

// Manual impls: deriving would demand `T: Clone` etc., which the item's phantom use
// does not need.
impl<T> Clone for List<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for List<'_, T> {}

/// Lists are equal when their encodings are: each list has exactly one encoding.
impl<T> PartialEq for List<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.bytes == other.bytes
    }
}

impl<T> Eq for List<'_, T> {}

impl<'a, T: ListItem<'a> + fmt::Debug> fmt::Debug for List<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Iterator over the items of a [`List`].
pub struct ListIter<'a, T> {
    reader: Reader<'a>,
    left: usize,
    item: PhantomData<fn() -> T>,
}

impl<'a, T: ListItem<'a>> Iterator for ListIter<'a, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The list was validated when decoded, so this read succeeds; were it ever to
        // fail, the iteration would end early rather than panic.
        let item = T::read(&mut self.reader).ok();
        if item.is_none() {
            self.left = 0;
        }
        item
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<'a, T: ListItem<'a>> ExactSizeIterator for ListIter<'a, T> {}

macro_rules! list_item {
    ($t:ident $(<$l:lifetime>)?, min = $min:expr, max = $max:expr,
     read($r:ident) $read:block, write($s:ident, $out:ident) $write:block) => {
        impl<'a> sealed::Sealed<'a> for $t $(<$l>)? {
            const MIN_BYTES: usize = $min;
            const MAX_ITEMS: usize = $max;
            fn read($r: &mut Reader<'a>) -> Result<Self, WireError> $read
            fn write(&self, $out: &mut Vec<u8>) -> Result<(), WireError> {
                let $s = self;
                $write
            }
        }
        impl<'a> ListItem<'a> for $t $(<$l>)? {}
    };
}
pub(crate) use list_item;

/// Upper bound for lists that are not multi-operations: the frame limit bounds them
/// (through `MIN_BYTES`), not an item count.
const UNBOUNDED: usize = usize::MAX;

/// One object of a MultiRead request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiReadItem<'a> {
    pub table_id: u64,
    pub key: &'a [u8],
}

list_item!(MultiReadItem<'a>, min = 8 + 2, max = MAX_MULTI_OPS,
    read(r) {
        Ok(MultiReadItem { table_id: r.u64()?, key: r.key()? })
    },
    write(s, out) {
        put_u64(out, s.table_id);
        put_key(out, s.key)
    }
);

/// One object of a MultiWrite request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiWriteItem<'a> {
    pub table_id: u64,
    pub rules: RejectRules,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

list_item!(MultiWriteItem<'a>, min = 8 + RULES_BYTES + 2 + 4, max = MAX_MULTI_OPS,
    read(r) {
        Ok(MultiWriteItem {
            table_id: r.u64()?,
            rules: r.rules()?,
            key: r.key()?,
            value: r.value()?,
        })
    },
    write(s, out) {
        put_u64(out, s.table_id);
        put_rules(out, &s.rules);
        put_key(out, s.key)?;
        put_value(out, s.value)
    }
);

/// One object of a MultiRemove request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiRemoveItem<'a> {
    pub table_id: u64,
    pub rules: RejectRules,
    pub key: &'a [u8],
}

list_item!(MultiRemoveItem<'a>, min = 8 + RULES_BYTES + 2, max = MAX_MULTI_OPS,
    read(r) {
        Ok(MultiRemoveItem { table_id: r.u64()?, rules: r.rules()?, key: r.key()? })
    },
    write(s, out) {
        put_u64(out, s.table_id);
        put_rules(out, &s.rules);
        put_key(out, s.key)
    }
);

/// The outcome for one object of a MultiRead: `value` is empty unless `status` is OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiReadResult<'a> {
    pub status: Status,
    pub version: u64,
    pub value: &'a [u8],
}

list_item!(MultiReadResult<'a>, min = 2 + 8 + 4, max = MAX_MULTI_OPS,
    read(r) {
        let item = MultiReadResult { status: r.status()?, version: r.u64()?, value: r.value()? };
        if item.status != Status::Ok && !item.value.is_empty() {
            return Err(WireError::Malformed("a failed multi-read item carries a value"));
        }
        Ok(item)
    },
    write(s, out) {
        if s.status != Status::Ok && !s.value.is_empty() {
            return Err(WireError::Malformed("a failed multi-read item carries a value"));
        }
        put_status(out, s.status);
        put_u64(out, s.version);
        put_value(out, s.value)
    }
);

/// The outcome for one object of a MultiWrite: the new version when `status` is OK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiWriteResult {
    pub status: Status,
    pub version: u64,
}

list_item!(MultiWriteResult, min = 2 + 8, max = MAX_MULTI_OPS,
    read(r) {
        Ok(MultiWriteResult { status: r.status()?, version: r.u64()? })
    },
    write(s, out) {
        put_status(out, s.status);
        put_u64(out, s.version);
        Ok(())
    }
);

/// The outcome for one object of a MultiRemove: whether it existed and the removed
/// version (0 if none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiRemoveResult {
    pub status: Status,
    pub existed: bool,
    pub version: u64,
}

list_item!(MultiRemoveResult, min = 2 + 1 + 8, max = MAX_MULTI_OPS,
    read(r) {
        Ok(MultiRemoveResult {
            status: r.status()?,
            existed: r.bool("existed")?,
            version: r.u64()?,
        })
    },
    write(s, out) {
        put_status(out, s.status);
        put_bool(out, s.existed);
        put_u64(out, s.version);
        Ok(())
    }
);

/// One object returned by Enumerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnumeratedObject<'a> {
    pub version: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

list_item!(EnumeratedObject<'a>, min = 8 + 2 + 4, max = UNBOUNDED,
    read(r) {
        Ok(EnumeratedObject { version: r.u64()?, key: r.key()?, value: r.value()? })
    },
    write(s, out) {
        put_u64(out, s.version);
        put_key(out, s.key)?;
        put_value(out, s.value)
    }
);

/// One server of a ServerListUpdate: `server_id u64 | status u8 | services u32 |
/// backup_read_mbps u32 | address | failure_domain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerListEntry<'a> {
    pub server_id: u64,
    pub status: ServerStatus,
    pub services: Services,
    /// The backup's disk read speed in MB/s, as it enlisted (0: no backup).
    pub backup_read_mbps: u32,
    pub address: &'a str,
    /// The server's failure domain, at most [`crate::MAX_FAILURE_DOMAIN_BYTES`];
    /// empty: the server is its own domain.
    pub failure_domain: &'a str,
}

list_item!(ServerListEntry<'a>, min = 8 + 1 + 4 + 4 + 2 + 2, max = UNBOUNDED,
    read(r) {
        Ok(ServerListEntry {
            server_id: r.u64()?,
            status: ServerStatus::try_from(r.u8()?)?,
            services: Services::from_bits(r.u32()?)?,
            backup_read_mbps: r.u32()?,
            address: r.string()?,
            failure_domain: r.failure_domain()?,
        })
    },
    write(s, out) {
        put_u64(out, s.server_id);
        put_u8(out, s.status as u8);
        put_u32(out, s.services.bits());
        put_u32(out, s.backup_read_mbps);
        put_string(out, s.address)?;
        put_failure_domain(out, s.failure_domain)
    }
);

/// One tablet of a GetTabletMap response: the key-hash range `[start_hash, end_hash]`
/// of a table, owned by `server_id` at `address`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabletMapEntry<'a> {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub server_id: u64,
    pub address: &'a str,
}

list_item!(TabletMapEntry<'a>, min = 8 * 4 + 2, max = UNBOUNDED,
    read(r) {
        Ok(TabletMapEntry {
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
            server_id: r.u64()?,
            address: r.string()?,
        })
    },
    write(s, out) {
        put_u64(out, s.table_id);
        put_u64(out, s.start_hash);
        put_u64(out, s.end_hash);
        put_u64(out, s.server_id);
        put_string(out, s.address)
    }
);

/// One replica in a BackupGetReplicas response: a segment of the master asked
/// about, the valid bytes the backup holds, and whether the replica is closed
/// (complete) or still open (the head, or a segment being filled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaEntry {
    pub segment_id: u64,
    pub length: u32,
    pub closed: bool,
}

list_item!(ReplicaEntry, min = 8 + 4 + 1, max = UNBOUNDED,
    read(r) {
        Ok(ReplicaEntry { segment_id: r.u64()?, length: r.u32()?, closed: r.bool("closed")? })
    },
    write(s, out) {
        put_u64(out, s.segment_id);
        put_u32(out, s.length);
        put_bool(out, s.closed);
        Ok(())
    }
);

/// One tablet of a recovery partition in a BackupStartPartitioning request: the
/// backup puts the entries of `table_id` whose key hash lies in
/// `[start_hash, end_hash]` into the bucket of `partition_id` (R§7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionTablet {
    pub partition_id: u32,
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
}

list_item!(PartitionTablet, min = 4 + 8 + 8 + 8, max = UNBOUNDED,
    read(r) {
        let t = PartitionTablet {
            partition_id: r.u32()?,
            table_id: r.u64()?,
            start_hash: r.u64()?,
            end_hash: r.u64()?,
        };
        if t.start_hash > t.end_hash {
            return Err(WireError::Malformed("a tablet's start hash exceeds its end hash"));
        }
        Ok(t)
    },
    write(s, out) {
        put_u32(out, s.partition_id);
        put_u64(out, s.table_id);
        put_u64(out, s.start_hash);
        put_u64(out, s.end_hash);
        Ok(())
    }
);

/// One item of a RecoverPartition request: a tablet the partition covers, or a
/// replica of the crashed master's log and a backup that holds it (R§7.6).
///
/// Wire: `kind u8`, then for kind 0 (a tablet) `table_id u64 | start_hash u64 |
/// end_hash u64`; kind 2 (a tablet with a ctime) the same then `ctime u64`,
/// never 0 (a tablet without one is kind 0, so each item has one encoding);
/// kind 1 (a replica) `segment_id u64 | address (u16 len + UTF-8)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryItem<'a> {
    Tablet {
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        /// The tablet's ctime in the crashed master's log (design notes
        /// "Tablet ctime", issue 20): replay skips the tablet's entries of
        /// segments with a lower id (an earlier tenure of the range there).
        /// 0: no cutoff.
        ctime: u64,
    },
    Replica {
        segment_id: u64,
        address: &'a str,
    },
}

list_item!(RecoveryItem<'a>, min = 1 + 8 + 2, max = UNBOUNDED,
    read(r) {
        match r.u8()? {
            kind @ (0 | 2) => {
                let (table_id, start_hash, end_hash) = (r.u64()?, r.u64()?, r.u64()?);
                if start_hash > end_hash {
                    return Err(WireError::Malformed("a tablet's start hash exceeds its end hash"));
                }
                let ctime = if kind == 2 { r.u64()? } else { 0 };
                if kind == 2 && ctime == 0 {
                    return Err(WireError::Malformed("a tablet's explicit ctime is 0"));
                }
                Ok(RecoveryItem::Tablet { table_id, start_hash, end_hash, ctime })
            }
            1 => Ok(RecoveryItem::Replica { segment_id: r.u64()?, address: r.string()? }),
            _ => Err(WireError::Malformed("unknown recovery item kind")),
        }
    },
    write(s, out) {
        match *s {
            RecoveryItem::Tablet { table_id, start_hash, end_hash, ctime } => {
                put_u8(out, if ctime == 0 { 0 } else { 2 });
                put_u64(out, table_id);
                put_u64(out, start_hash);
                put_u64(out, end_hash);
                if ctime != 0 {
                    put_u64(out, ctime);
                }
                Ok(())
            }
            RecoveryItem::Replica { segment_id, address } => {
                put_u8(out, 1);
                put_u64(out, segment_id);
                put_string(out, address)
            }
        }
    }
);

/// Objects of a MultiRead request.
pub type MultiReadItems<'a> = List<'a, MultiReadItem<'a>>;
/// Objects of a MultiWrite request.
pub type MultiWriteItems<'a> = List<'a, MultiWriteItem<'a>>;
/// Objects of a MultiRemove request.
pub type MultiRemoveItems<'a> = List<'a, MultiRemoveItem<'a>>;
/// Per-object outcomes of a MultiRead response.
pub type MultiReadResults<'a> = List<'a, MultiReadResult<'a>>;
/// Per-object outcomes of a MultiWrite response.
pub type MultiWriteResults<'a> = List<'a, MultiWriteResult>;
/// Per-object outcomes of a MultiRemove response.
pub type MultiRemoveResults<'a> = List<'a, MultiRemoveResult>;
/// Objects of an Enumerate response.
pub type EnumeratedObjects<'a> = List<'a, EnumeratedObject<'a>>;
/// Servers of a ServerListUpdate request.
pub type ServerListEntries<'a> = List<'a, ServerListEntry<'a>>;
/// Tablets of a GetTabletMap response.
pub type TabletMapEntries<'a> = List<'a, TabletMapEntry<'a>>;
/// Replicas of a BackupGetReplicas or BackupStartPartitioning response.
pub type ReplicaEntries<'a> = List<'a, ReplicaEntry>;
/// Tablets of a BackupStartPartitioning request.
pub type PartitionTablets<'a> = List<'a, PartitionTablet>;
/// Tablets and replica sources of a RecoverPartition request.
pub type RecoveryItems<'a> = List<'a, RecoveryItem<'a>>;
