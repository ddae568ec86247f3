//! The RIFL ids of a multi-operation's ops (Lee et al., SOSP'15 §4; issue 21):
//! RIFL treats each object's op separately, so each op of a MultiWrite or
//! MultiRemove has its own sequence number under the client's lease, and its
//! completion record is written with its object, moves with it in a migration,
//! and answers its retry — also when the client regroups the ops of a retried
//! multi-op onto other masters (each op keeps its number, not its position).
//!
//! They travel as an optional trailer after the items: absent means the
//! at-least-once behaviour of clients that predate it, so old frames keep
//! their meaning.
//!
//! ```text
//! multi-op rpc ids trailer   lease_id u64 | first_incomplete u64 | count × seq u64
//!                            (count: the request's item count; seqs strictly
//!                            increasing, so each op's is distinct)
//! ```

use crate::codec::{put_u64, Reader};
use crate::error::WireError;
use crate::rpc_id::RpcId;

/// The rpc ids of a multi-op's items, borrowed from its frame: item `i` is RPC
/// `(lease_id, seq(i), first_incomplete)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiRpcIds<'a> {
    lease_id: u64,
    first_incomplete: u64,
    /// `count × u64 LE`, validated when decoded.
    seqs: &'a [u8],
}

impl<'a> MultiRpcIds<'a> {
    /// Number of ops (the request's item count).
    pub fn len(&self) -> usize {
        self.seqs.len() / 8
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    /// The lease every op is sent under.
    pub fn lease_id(&self) -> u64 {
        self.lease_id
    }

    /// The rpc id of item `i`, if there is one.
    pub fn get(&self, i: usize) -> Option<RpcId> {
        let bytes = self.seqs.get(i * 8..i * 8 + 8)?;
        let mut seq = [0u8; 8];
        seq.copy_from_slice(bytes);
        Some(RpcId {
            lease_id: self.lease_id,
            seq: u64::from_le_bytes(seq),
            first_incomplete: self.first_incomplete,
        })
    }

    /// Every item's rpc id, in item order.
    pub fn iter(&self) -> impl Iterator<Item = RpcId> + 'a {
        let (lease_id, first_incomplete) = (self.lease_id, self.first_incomplete);
        self.seqs.chunks_exact(8).map(move |c| {
            let mut seq = [0u8; 8];
            seq.copy_from_slice(c);
            RpcId {
                lease_id,
                seq: u64::from_le_bytes(seq),
                first_incomplete,
            }
        })
    }
}

/// Checks the rules of the ids of `count` items: a nonzero lease, sequence
/// numbers from 1, strictly increasing, none below the acknowledged window.
fn validate(
    lease_id: u64,
    first_incomplete: u64,
    seqs: impl IntoIterator<Item = u64>,
) -> Result<(), WireError> {
    let mut prev = 0;
    for seq in seqs {
        RpcId {
            lease_id,
            seq,
            first_incomplete,
        }
        .validate()?;
        if seq <= prev {
            return Err(WireError::Malformed(
                "multi-op rpc ids: sequence numbers not strictly increasing",
            ));
        }
        prev = seq;
    }
    if prev == 0 {
        return Err(WireError::Malformed("multi-op rpc ids of no items"));
    }
    Ok(())
}

/// Reads the optional trailer of a multi-op of `count` items: nothing left is
/// `None`; otherwise exactly one id per item.
pub(crate) fn optional_multi_rpc_ids<'a>(
    r: &mut Reader<'a>,
    count: usize,
) -> Result<Option<MultiRpcIds<'a>>, WireError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    let lease_id = r.u64()?;
    let first_incomplete = r.u64()?;
    let seqs = r.take(count.checked_mul(8).ok_or(WireError::Truncated)?)?;
    let ids = MultiRpcIds {
        lease_id,
        first_incomplete,
        seqs,
    };
    validate(lease_id, first_incomplete, ids.iter().map(|id| id.seq))?;
    Ok(Some(ids))
}

/// Appends the trailer of ops numbered `seqs` (one per item, in item order)
/// under `lease_id`, as [`optional_multi_rpc_ids`] reads it.
pub(crate) fn put_multi_rpc_ids(
    out: &mut Vec<u8>,
    lease_id: u64,
    first_incomplete: u64,
    seqs: &[u64],
) -> Result<(), WireError> {
    validate(lease_id, first_incomplete, seqs.iter().copied())?;
    put_u64(out, lease_id);
    put_u64(out, first_incomplete);
    for &seq in seqs {
        put_u64(out, seq);
    }
    Ok(())
}

/// Appends `ids` again (re-encoding a decoded request).
pub(crate) fn put_optional_multi_rpc_ids(out: &mut Vec<u8>, ids: &Option<MultiRpcIds<'_>>) {
    if let Some(ids) = ids {
        put_u64(out, ids.lease_id);
        put_u64(out, ids.first_incomplete);
        out.extend_from_slice(ids.seqs);
    }
}
