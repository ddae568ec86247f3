//! Incremental encoders for frames that carry a list: a server answers N items by
//! appending each straight into the output buffer, with no owned copy of the items
//! and no second pass; the count (and the frame length) is patched in at the end.
//!
//! Every encoder appends one frame to a caller's `Vec<u8>`. A push that fails
//! (oversize key, too many items, frame over the limit) appends nothing and leaves
//! the encoder usable; dropping an encoder without calling `finish` removes its
//! partial frame, so the buffer never holds half a frame.

use crate::codec::{put_key, put_status, put_u32, put_u64, put_u8, put_value_parts};
use crate::error::WireError;
use crate::frame::{begin_frame, end_frame, patch_u32, patch_u64};
use crate::list::sealed::Sealed;
use crate::list::{
    EnumeratedObject, MultiReadItem, MultiReadResult, MultiRemoveItem, MultiRemoveResult,
    MultiWriteItem, MultiWriteResult, PartitionTablet, RecoveryItem, ReplicaEntry, ServerListEntry,
    TabletMapEntry,
};
use crate::moved_record::{put_held_commits, put_moved_records, HeldCommitOut, MovedRpcResult};
use crate::multi_rpc_ids::put_multi_rpc_ids;
use crate::opcode::Opcode;
use crate::rules::RejectRules;
use crate::status::Status;
use crate::{FLAG_RESPONSE, HEADER_BYTES, LEN_PREFIX_BYTES, MAX_FRAME_BYTES, MAX_MULTI_OPS};

/// The shared machinery: a frame begun in `out` whose list count sits at `count_at`.
struct ListFrame<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    count_at: usize,
    count: usize,
    max_items: usize,
    finished: bool,
}

impl<'o> ListFrame<'o> {
    /// Begins a frame, writes the fixed fields that precede the count with `fixed`,
    /// then a placeholder count.
    fn begin(
        out: &'o mut Vec<u8>,
        opcode: Opcode,
        flags: u32,
        request_id: u64,
        max_items: usize,
        fixed: impl FnOnce(&mut Vec<u8>),
    ) -> Self {
        let start = begin_frame(out, opcode.code(), Status::Ok, flags, request_id);
        fixed(out);
        let count_at = out.len();
        put_u32(out, 0);
        ListFrame {
            out,
            start,
            count_at,
            count: 0,
            max_items,
            finished: false,
        }
    }

    /// Where the body (the first fixed field) starts in `out`.
    fn body_at(&self) -> usize {
        self.start + LEN_PREFIX_BYTES + HEADER_BYTES
    }

    /// Appends one item with `write`, or nothing if it fails or breaks a limit.
    fn push(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        if self.count >= self.max_items {
            return Err(WireError::TooManyItems(self.count + 1));
        }
        let item_start = self.out.len();
        let mut result = write(self.out);
        if result.is_ok() {
            let len = self.out.len() - self.start - LEN_PREFIX_BYTES;
            if len > MAX_FRAME_BYTES {
                result = Err(WireError::FrameTooLarge(len));
            }
        }
        match result {
            Ok(()) => self.count += 1,
            Err(_) => self.out.truncate(item_start),
        }
        result
    }

    /// Appends the optional trailer of moved completion records
    /// (`moved_record.rs`) after the list; nothing if there are none. Call it
    /// last, just before [`Self::finish`].
    fn put_records<'r>(
        &mut self,
        records: impl IntoIterator<Item = MovedRpcResult<'r>>,
    ) -> Result<(), WireError> {
        let before = self.out.len();
        put_moved_records(self.out, records)?;
        let len = self.out.len() - self.start - LEN_PREFIX_BYTES;
        if len > MAX_FRAME_BYTES {
            self.out.truncate(before);
            return Err(WireError::FrameTooLarge(len));
        }
        Ok(())
    }

    /// Appends the optional trailer of held commits (`moved_record.rs`) after
    /// the records trailer begun at `records_at`; nothing if there are none.
    fn put_held<'r>(
        &mut self,
        records_at: usize,
        held: impl IntoIterator<Item = HeldCommitOut<'r>>,
    ) -> Result<(), WireError> {
        let before = self.out.len();
        put_held_commits(self.out, records_at, held)?;
        let len = self.out.len() - self.start - LEN_PREFIX_BYTES;
        if len > MAX_FRAME_BYTES {
            self.out.truncate(before);
            return Err(WireError::FrameTooLarge(len));
        }
        Ok(())
    }

    /// Appends the rpc ids of the items pushed (`multi_rpc_ids.rs`, one seq
    /// per item) after the list, then finishes the frame.
    fn finish_with_rpc_ids(
        self,
        lease_id: u64,
        first_incomplete: u64,
        seqs: &[u64],
    ) -> Result<(), WireError> {
        if seqs.len() != self.count {
            return Err(WireError::Malformed(
                "multi-op rpc ids: not one sequence number per item",
            ));
        }
        let before = self.out.len();
        put_multi_rpc_ids(self.out, lease_id, first_incomplete, seqs)?;
        let len = self.out.len() - self.start - LEN_PREFIX_BYTES;
        if len > MAX_FRAME_BYTES {
            self.out.truncate(before);
            return Err(WireError::FrameTooLarge(len));
        }
        self.finish()
    }

    /// Patches the count and the length prefix; the frame is complete.
    fn finish(mut self) -> Result<(), WireError> {
        // Pushes stop at the frame limit, and every list's minimum item size keeps
        // the count far below u32::MAX within that limit.
        let count = u32::try_from(self.count).map_err(|_| WireError::TooManyItems(self.count))?;
        patch_u32(self.out, self.count_at, count);
        end_frame(self.out, self.start, 0)?;
        self.finished = true;
        Ok(())
    }
}

impl Drop for ListFrame<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.out.truncate(self.start);
        }
    }
}

macro_rules! encoder_common {
    ($t:ident) => {
        impl $t<'_> {
            /// Items pushed so far.
            pub fn len(&self) -> usize {
                self.0.count
            }

            pub fn is_empty(&self) -> bool {
                self.0.count == 0
            }
        }
    };
}

macro_rules! encoder_finish {
    ($t:ident) => {
        impl $t<'_> {
            /// Completes the frame (patches the count and the length prefix).
            pub fn finish(self) -> Result<(), WireError> {
                self.0.finish()
            }
        }
    };
}

/// `finish_with_rpc_ids` for a multi-op encoder (MultiWrite, MultiRemove).
macro_rules! encoder_finish_with_rpc_ids {
    ($t:ident) => {
        impl $t<'_> {
            /// Completes the frame with one exactly-once rpc id per item pushed
            /// (RIFL; `seqs[i]` is item `i`'s sequence number under `lease_id`):
            /// each item is carried out at most once, and a retry answers its first
            /// outcome. Fails if `seqs` does not hold one number per item, strictly
            /// increasing.
            pub fn finish_with_rpc_ids(
                self,
                lease_id: u64,
                first_incomplete: u64,
                seqs: &[u64],
            ) -> Result<(), WireError> {
                self.0.finish_with_rpc_ids(lease_id, first_incomplete, seqs)
            }
        }
    };
}

/// Builds a MultiRead request frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiReadRequestEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiReadRequestEncoder);
encoder_finish!(MultiReadRequestEncoder);

impl<'o> MultiReadRequestEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiRead,
            0,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    /// A PriorityPull request (K§2.3): the same items, the keys whose records a
    /// migration target needs now.
    pub fn priority_pull(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::PriorityPull,
            0,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    pub fn push(&mut self, table_id: u64, key: &[u8]) -> Result<(), WireError> {
        self.0
            .push(|out| MultiReadItem { table_id, key }.write(out))
    }
}

/// Builds a MultiWrite request frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiWriteRequestEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiWriteRequestEncoder);
encoder_finish!(MultiWriteRequestEncoder);

encoder_finish_with_rpc_ids!(MultiWriteRequestEncoder);

impl<'o> MultiWriteRequestEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiWrite,
            0,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    pub fn push(
        &mut self,
        table_id: u64,
        rules: RejectRules,
        key: &[u8],
        value: &[u8],
    ) -> Result<(), WireError> {
        self.0.push(|out| {
            MultiWriteItem {
                table_id,
                rules,
                key,
                value,
            }
            .write(out)
        })
    }
}

/// Builds a MultiRemove request frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiRemoveRequestEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiRemoveRequestEncoder);
encoder_finish!(MultiRemoveRequestEncoder);

encoder_finish_with_rpc_ids!(MultiRemoveRequestEncoder);

impl<'o> MultiRemoveRequestEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiRemove,
            0,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    pub fn push(&mut self, table_id: u64, rules: RejectRules, key: &[u8]) -> Result<(), WireError> {
        self.0.push(|out| {
            MultiRemoveItem {
                table_id,
                rules,
                key,
            }
            .write(out)
        })
    }
}

/// Builds a ServerListUpdate request frame server by server.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct ServerListUpdateEncoder<'o>(ListFrame<'o>);
encoder_common!(ServerListUpdateEncoder);
encoder_finish!(ServerListUpdateEncoder);

impl<'o> ServerListUpdateEncoder<'o> {
    pub fn new(request_id: u64, list_version: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::ServerListUpdate,
            0,
            request_id,
            usize::MAX,
            |o| put_u64(o, list_version),
        ))
    }

    /// Appends one server; fails, appending nothing, if its address or failure
    /// domain is too long.
    pub fn push(&mut self, server: &ServerListEntry<'_>) -> Result<(), WireError> {
        self.0.push(|out| server.write(out))
    }
}

/// Builds an OK MultiRead response frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiReadResponseEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiReadResponseEncoder);
encoder_finish!(MultiReadResponseEncoder);

impl<'o> MultiReadResponseEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiRead,
            FLAG_RESPONSE,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    /// An object that was read.
    pub fn push_ok(&mut self, version: u64, value: &[u8]) -> Result<(), WireError> {
        self.push_ok_parts(version, &[value])
    }

    /// An object that was read, its value given as several slices (e.g. spanning
    /// seglets of the log); they are copied once, straight into the frame.
    pub fn push_ok_parts(&mut self, version: u64, value: &[&[u8]]) -> Result<(), WireError> {
        self.0.push(|out| {
            put_status(out, Status::Ok);
            put_u64(out, version);
            put_value_parts(out, value)
        })
    }

    /// An object that could not be read (`status` ≠ OK, e.g. OBJECT_DOESNT_EXIST or
    /// UNKNOWN_TABLET); its version is sent as 0 and its value empty.
    pub fn push_error(&mut self, status: Status) -> Result<(), WireError> {
        if status == Status::Ok {
            return Err(WireError::Malformed("push_error with status OK"));
        }
        self.0.push(|out| {
            MultiReadResult {
                status,
                version: 0,
                value: &[],
            }
            .write(out)
        })
    }
}

/// Builds an OK MultiWrite response frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiWriteResponseEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiWriteResponseEncoder);
encoder_finish!(MultiWriteResponseEncoder);

impl<'o> MultiWriteResponseEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiWrite,
            FLAG_RESPONSE,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    /// The outcome of one write: on OK `version` is the new version; on
    /// WRONG_VERSION it is the object's current version; otherwise 0 by convention.
    pub fn push(&mut self, status: Status, version: u64) -> Result<(), WireError> {
        self.0
            .push(|out| MultiWriteResult { status, version }.write(out))
    }
}

/// Builds an OK MultiRemove response frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct MultiRemoveResponseEncoder<'o>(ListFrame<'o>);
encoder_common!(MultiRemoveResponseEncoder);
encoder_finish!(MultiRemoveResponseEncoder);

impl<'o> MultiRemoveResponseEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::MultiRemove,
            FLAG_RESPONSE,
            request_id,
            MAX_MULTI_OPS,
            |_| {},
        ))
    }

    /// The outcome of one remove: whether the object existed and its removed
    /// version (0 if none; the current version on WRONG_VERSION).
    pub fn push(&mut self, status: Status, existed: bool, version: u64) -> Result<(), WireError> {
        self.0.push(|out| {
            MultiRemoveResult {
                status,
                existed,
                version,
            }
            .write(out)
        })
    }
}

/// Builds an OK Enumerate response frame object by object; `has_next` and
/// `next_cursor` are given at [`EnumerateResponseEncoder::finish`], when the scan
/// knows them.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct EnumerateResponseEncoder<'o>(ListFrame<'o>);
encoder_common!(EnumerateResponseEncoder);

impl<'o> EnumerateResponseEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self::answering(Opcode::Enumerate, request_id, out)
    }

    /// An OK Pull response (K§2.3): the same layout as an Enumerate response.
    pub fn for_pull(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self::answering(Opcode::Pull, request_id, out)
    }

    fn answering(op: Opcode, request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            op,
            FLAG_RESPONSE,
            request_id,
            usize::MAX,
            |o| {
                // Placeholders for has_next and next_cursor, patched by `finish`.
                put_u8(o, 0);
                put_u64(o, 0);
            },
        ))
    }

    pub fn push(&mut self, version: u64, key: &[u8], value: &[u8]) -> Result<(), WireError> {
        self.0.push(|out| {
            EnumeratedObject {
                version,
                key,
                value,
            }
            .write(out)
        })
    }

    /// An object whose value is given as several slices, copied once into the frame.
    pub fn push_parts(
        &mut self,
        version: u64,
        key: &[u8],
        value: &[&[u8]],
    ) -> Result<(), WireError> {
        self.0.push(|out| {
            put_u64(out, version);
            put_key(out, key)?;
            put_value_parts(out, value)
        })
    }

    /// Completes the frame: whether more objects follow and where to continue.
    pub fn finish(self, has_next: bool, next_cursor: u64) -> Result<(), WireError> {
        self.finish_with_records(has_next, next_cursor, [])
    }

    /// [`Self::finish`] for a Pull answer that carries the completion records of
    /// the hashes it covers (`moved_record.rs`; RIFL §4.3).
    pub fn finish_with_records<'r>(
        self,
        has_next: bool,
        next_cursor: u64,
        records: impl IntoIterator<Item = MovedRpcResult<'r>>,
    ) -> Result<(), WireError> {
        self.finish_with_trailers(has_next, next_cursor, records, [])
    }

    /// [`Self::finish_with_records`] that also carries the held commits naming
    /// an object of the hashes it covers (`moved_record.rs`; issue 21).
    pub fn finish_with_trailers<'r>(
        mut self,
        has_next: bool,
        next_cursor: u64,
        records: impl IntoIterator<Item = MovedRpcResult<'r>>,
        held: impl IntoIterator<Item = HeldCommitOut<'r>>,
    ) -> Result<(), WireError> {
        let records_at = self.0.out.len();
        self.0.put_records(records)?;
        self.0.put_held(records_at, held)?;
        let frame = self.0;
        let at = frame.body_at();
        if let Some(b) = frame.out.get_mut(at) {
            *b = u8::from(has_next);
        }
        patch_u64(frame.out, at + 1, next_cursor);
        frame.finish()
    }
}

/// Builds an OK PriorityPull response frame object by object (K§2.3).
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct PriorityPullResponseEncoder<'o>(ListFrame<'o>);
encoder_common!(PriorityPullResponseEncoder);
encoder_finish!(PriorityPullResponseEncoder);

impl PriorityPullResponseEncoder<'_> {
    /// Completes the frame with the completion records of the keys' hashes
    /// (`moved_record.rs`; RIFL §4.3).
    pub fn finish_with_records<'r>(
        mut self,
        records: impl IntoIterator<Item = MovedRpcResult<'r>>,
    ) -> Result<(), WireError> {
        self.0.put_records(records)?;
        self.0.finish()
    }
}

impl<'o> PriorityPullResponseEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::PriorityPull,
            FLAG_RESPONSE,
            request_id,
            usize::MAX,
            |_| {},
        ))
    }

    /// An object whose value is given as several slices, copied once into the frame.
    pub fn push_parts(
        &mut self,
        version: u64,
        key: &[u8],
        value: &[&[u8]],
    ) -> Result<(), WireError> {
        self.0.push(|out| {
            put_u64(out, version);
            put_key(out, key)?;
            put_value_parts(out, value)
        })
    }
}

/// Builds an OK GetTabletMap response frame tablet by tablet.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct TabletMapEncoder<'o>(ListFrame<'o>);
encoder_common!(TabletMapEncoder);
encoder_finish!(TabletMapEncoder);

impl<'o> TabletMapEncoder<'o> {
    pub fn new(request_id: u64, map_version: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::GetTabletMap,
            FLAG_RESPONSE,
            request_id,
            usize::MAX,
            |o| put_u64(o, map_version),
        ))
    }

    pub fn push(
        &mut self,
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        server_id: u64,
        address: &str,
    ) -> Result<(), WireError> {
        self.0.push(|out| {
            TabletMapEntry {
                table_id,
                start_hash,
                end_hash,
                server_id,
                address,
            }
            .write(out)
        })
    }
}

/// Builds an OK BackupGetReplicas response frame replica by replica.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct BackupReplicasEncoder<'o>(ListFrame<'o>);
encoder_common!(BackupReplicasEncoder);
encoder_finish!(BackupReplicasEncoder);

impl<'o> BackupReplicasEncoder<'o> {
    pub fn new(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::BackupGetReplicas,
            FLAG_RESPONSE,
            request_id,
            usize::MAX,
            |_| {},
        ))
    }

    /// The same list, answering a BackupStartPartitioning request.
    pub fn for_partitioning(request_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::BackupStartPartitioning,
            FLAG_RESPONSE,
            request_id,
            usize::MAX,
            |_| {},
        ))
    }

    /// One replica: its segment id, valid bytes, and whether it is closed.
    pub fn push(&mut self, segment_id: u64, length: u32, closed: bool) -> Result<(), WireError> {
        self.0.push(|out| {
            ReplicaEntry {
                segment_id,
                length,
                closed,
            }
            .write(out)
        })
    }
}

/// Builds a BackupStartPartitioning request frame tablet by tablet.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct BackupStartPartitioningEncoder<'o>(ListFrame<'o>);
encoder_common!(BackupStartPartitioningEncoder);
encoder_finish!(BackupStartPartitioningEncoder);

impl<'o> BackupStartPartitioningEncoder<'o> {
    pub fn new(request_id: u64, master_id: u64, recovery_id: u64, out: &'o mut Vec<u8>) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::BackupStartPartitioning,
            0,
            request_id,
            usize::MAX,
            |o| {
                put_u64(o, master_id);
                put_u64(o, recovery_id);
            },
        ))
    }

    /// One tablet of partition `tablet.partition_id`.
    pub fn push(&mut self, tablet: &PartitionTablet) -> Result<(), WireError> {
        self.0.push(|out| tablet.write(out))
    }
}

/// Builds a RecoverPartition request frame item by item.
#[must_use = "an encoder discards its frame unless `finish` is called"]
pub struct RecoverPartitionEncoder<'o>(ListFrame<'o>);
encoder_common!(RecoverPartitionEncoder);
encoder_finish!(RecoverPartitionEncoder);

impl<'o> RecoverPartitionEncoder<'o> {
    pub fn new(
        request_id: u64,
        crashed_id: u64,
        recovery_id: u64,
        partition_id: u32,
        out: &'o mut Vec<u8>,
    ) -> Self {
        Self(ListFrame::begin(
            out,
            Opcode::RecoverPartition,
            0,
            request_id,
            usize::MAX,
            |o| {
                put_u64(o, crashed_id);
                put_u64(o, recovery_id);
                put_u32(o, partition_id);
            },
        ))
    }

    /// One tablet or replica source; fails, appending nothing, if an address is too
    /// long or the frame would exceed its limit.
    pub fn push(&mut self, item: &RecoveryItem<'_>) -> Result<(), WireError> {
        self.0.push(|out| item.write(out))
    }
}
