//! The RIFL identity of a mutating RPC (Lee et al., SOSP'15, §3–4; R§10.3): which
//! client lease sent it, its sequence number under that lease, and the lowest
//! sequence number whose result the client still needs (every RPC below it has
//! been answered, so the master may forget their completion records).
//!
//! It travels as an optional trailer of Write, Remove and Increment: absent means
//! the at-least-once behaviour of clients that predate RIFL, so old frames keep
//! their meaning.
//!
//! ```text
//! rpc id trailer   lease_id u64 | seq u64 | first_incomplete u64   (24 bytes)
//! ```

use crate::codec::{put_u64, Reader};
use crate::error::WireError;

/// Bytes of the trailer on the wire.
pub const RPC_ID_BYTES: usize = 24;

/// (lease, sequence, acknowledged window) of one exactly-once RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RpcId {
    /// The client lease the RPC is sent under; never 0 (0 is "no lease").
    pub lease_id: u64,
    /// The RPC's sequence number under the lease, from 1.
    pub seq: u64,
    /// Every RPC of this lease with a lower sequence number has its answer
    /// (RIFL §4 "garbage collection"); at most `seq`.
    pub first_incomplete: u64,
}

impl RpcId {
    /// Checks the fields' rules: a nonzero lease, a sequence from 1, and a window
    /// that does not start after the RPC itself.
    pub fn validate(&self) -> Result<(), WireError> {
        if self.lease_id == 0 {
            return Err(WireError::Malformed("rpc id: lease id 0"));
        }
        if self.seq == 0 {
            return Err(WireError::Malformed("rpc id: sequence number 0"));
        }
        if self.first_incomplete > self.seq {
            return Err(WireError::Malformed(
                "rpc id: first incomplete sequence number above the rpc's own",
            ));
        }
        Ok(())
    }
}

/// Reads the optional trailer: nothing left is `None`.
pub(crate) fn optional_rpc_id(r: &mut Reader<'_>) -> Result<Option<RpcId>, WireError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    let id = RpcId {
        lease_id: r.u64()?,
        seq: r.u64()?,
        first_incomplete: r.u64()?,
    };
    id.validate()?;
    Ok(Some(id))
}

/// Appends `id` as [`optional_rpc_id`] reads it.
pub(crate) fn put_optional_rpc_id(out: &mut Vec<u8>, id: &Option<RpcId>) -> Result<(), WireError> {
    if let Some(id) = id {
        id.validate()?;
        put_u64(out, id.lease_id);
        put_u64(out, id.seq);
        put_u64(out, id.first_incomplete);
    }
    Ok(())
}
