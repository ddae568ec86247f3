//! The ordered event trace, folded into one hash as it happens.

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// What happened (the first byte of every traced event).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A request reached its target (`x`: frame hash).
    Deliver = 1,
    /// A request or response was lost (loss, partition).
    Drop = 2,
    /// A call found nothing at the address (a crashed node).
    Refused = 3,
    /// A response reached its caller.
    Respond = 4,
    /// A fault started or ended (`x`: the fault's code).
    Fault = 5,
    /// A client operation returned (`x`: hash of its outcome).
    Op = 6,
    /// A node started (`x`: its server id).
    Start = 7,
}

/// The running hash and count of every event, in order.
#[derive(Debug, Default)]
pub struct Trace {
    state: Mutex<(u64, u64)>,
}

impl Trace {
    /// Folds one event in: when (simulated ns), what, between whom, and a detail.
    pub fn event(&self, at_ns: u64, kind: Kind, from: &str, to: &str, x: u64) {
        let mut buf = Vec::with_capacity(32 + from.len() + to.len());
        buf.extend_from_slice(&at_ns.to_le_bytes());
        buf.push(kind as u8);
        buf.extend_from_slice(from.as_bytes());
        buf.push(0);
        buf.extend_from_slice(to.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&x.to_le_bytes());
        let mut st = self.state.lock();
        st.0 = xxh3_64_with_seed(&buf, st.0);
        st.1 += 1;
    }

    /// The hash of every event so far.
    pub fn hash(&self) -> u64 {
        self.state.lock().0
    }

    /// Events so far.
    pub fn events(&self) -> u64 {
        self.state.lock().1
    }
}

/// A short hash of bytes (frames, outcomes) for the trace.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, 0)
}
