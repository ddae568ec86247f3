//! Recovery traffic by network distance (issue 22, C§2.1, §4.2): how many
//! bytes of recovery's data shuffle (buckets from backups to recovery masters,
//! R§7.4) and of replication crossed one switch or more than one, as the
//! [`Topology`] places the hosts. Counted in the simulated network (the
//! Transport seam) only while on; counting draws nothing and awaits nothing,
//! so it never changes a run.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::topology::{Hops, Topology};

/// What a counted message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// A BackupGetRecoveryData answer: one bucket of a replica (R§7.4).
    Buckets,
    /// A BackupWrite: replication (during recovery, the recovery masters'
    /// re-replication of what they replayed, R§7.6).
    Replication,
}

/// Bytes by distance: same host, one hop, more than one hop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ByDistance {
    pub local: u64,
    pub one_hop: u64,
    pub multi_hop: u64,
}

impl ByDistance {
    fn add(&mut self, hops: Hops, bytes: u64) {
        match hops {
            Hops::Local => self.local += bytes,
            Hops::One => self.one_hop += bytes,
            Hops::More => self.multi_hop += bytes,
        }
    }

    /// Every byte counted.
    pub fn total(&self) -> u64 {
        self.local + self.one_hop + self.multi_hop
    }
}

/// The meter (see the module documentation).
#[derive(Debug, Default)]
pub struct HopMeter {
    on: AtomicBool,
    topology: Mutex<Topology>,
    counts: Mutex<(ByDistance, ByDistance)>,
}

/// Host index of a simulated address's host part ("s3" → 3); `None` for the
/// coordinator and clients, whose bytes are not recovery data.
fn host_index(host: &str) -> Option<usize> {
    host.strip_prefix('s')?.parse().ok()
}

impl HopMeter {
    /// Places the hosts for counting.
    pub fn set_topology(&self, topology: Topology) {
        *self.topology.lock() = topology;
    }

    /// Starts or stops counting (counts are kept).
    pub fn set_on(&self, on: bool) {
        self.on.store(on, Ordering::Relaxed);
    }

    /// Counts `bytes` of `traffic` sent from host `from` to host `to` (host
    /// parts of addresses), if counting.
    pub fn count(&self, traffic: Traffic, from: &str, to: &str, bytes: usize) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let (Some(a), Some(b)) = (host_index(from), host_index(to)) else {
            return;
        };
        let hops = self.topology.lock().hops(a, b);
        let mut counts = self.counts.lock();
        let slot = match traffic {
            Traffic::Buckets => &mut counts.0,
            Traffic::Replication => &mut counts.1,
        };
        slot.add(hops, bytes as u64);
    }

    /// (buckets, replication) counted so far.
    pub fn counts(&self) -> (ByDistance, ByDistance) {
        *self.counts.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_sorts_bytes_by_distance_only_while_on() {
        let meter = HopMeter::default();
        meter.set_topology(Topology::tree(4, 2).expect("a tree"));
        meter.count(Traffic::Buckets, "s0", "s3", 5);
        meter.set_on(true);
        meter.count(Traffic::Buckets, "s0", "s1", 10);
        meter.count(Traffic::Buckets, "s0", "s2", 20);
        meter.count(Traffic::Replication, "s1", "s1", 7);
        meter.count(Traffic::Replication, "coord", "s1", 7);
        let (buckets, replication) = meter.counts();
        assert_eq!(
            (buckets.one_hop, buckets.multi_hop, buckets.total()),
            (10, 20, 30)
        );
        assert_eq!((replication.local, replication.total()), (7, 7));
    }
}
