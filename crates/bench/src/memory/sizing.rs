//! The sizing pass of the `memory` scenario: a workload replayed without a store
//! to learn its largest live object count and live entry footprint, from which the
//! ramstore child's log memory is sized for `--utilization`.

use std::convert::Infallible;

use serde::Serialize;

use ramstore_log::entry::{object_entry_len, tombstone_entry_len};
use ramstore_log::SEGLET_BYTES;

use crate::workload::{Executor, Generator, LiveObj, Scale, WorkloadSpec};

use super::args::TABLE;

/// Result of the sizing pass.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sizing {
    pub max_live_objects: u64,
    /// Largest total of live object entry bytes at any time.
    pub max_live_entry_bytes: u64,
    /// Average entry overhead (entry − key − value bytes) of the live objects at that
    /// time.
    pub entry_overhead_avg: f64,
    pub writes: u64,
    pub deletes: u64,
    pub final_live_kv_bytes: u64,
}

/// The sizing pass: replays the workload, estimating each entry's length the way the
/// log will encode it (version and birth stamp grow as the run goes on).
pub(super) struct Sizer {
    pub(super) segment_bytes: u64,
    pub(super) appended: u64,
    pub(super) live_entry: u64,
    pub(super) live_kv: u64,
    pub(super) live_objects: u64,
    pub(super) max_live_entry: u64,
    pub(super) kv_at_max: u64,
    pub(super) objects_at_max: u64,
    pub(super) max_objects: u64,
}

impl Executor for Sizer {
    type Error = Infallible;

    fn write(&mut self, obj: &mut LiveObj, key: &[u8], value: &[u8]) -> Result<(), Infallible> {
        // The log stamps entries with its clock: bytes appended, in 64 KiB units.
        let birth = self.appended >> 16;
        let len = object_entry_len(TABLE, obj.version as u64, birth, key.len(), value.len());
        let overhead = len - key.len() - value.len();
        // At most 38 bytes (all varints at their longest), so it fits a byte.
        obj.aux = overhead as u8;
        self.appended += len as u64;
        self.live_entry += len as u64;
        self.live_kv += (key.len() + value.len()) as u64;
        self.live_objects += 1;
        if self.live_entry > self.max_live_entry {
            self.max_live_entry = self.live_entry;
            self.kv_at_max = self.live_kv;
            self.objects_at_max = self.live_objects;
        }
        self.max_objects = self.max_objects.max(self.live_objects);
        Ok(())
    }

    fn delete(&mut self, obj: &LiveObj, key: &[u8]) -> Result<(), Infallible> {
        let segment_id = self.appended / self.segment_bytes + 1;
        self.appended +=
            tombstone_entry_len(TABLE, obj.version as u64, segment_id, key.len()) as u64;
        self.live_entry -= obj.kv_bytes() + obj.aux as u64;
        self.live_kv -= obj.kv_bytes();
        self.live_objects -= 1;
        Ok(())
    }
}

pub fn size_workload(spec: &WorkloadSpec, scale: Scale, segment_bytes: u64) -> Sizing {
    let mut live = Vec::new();
    let mut sizer = Sizer {
        segment_bytes,
        appended: 0,
        live_entry: 0,
        live_kv: 0,
        live_objects: 0,
        max_live_entry: 0,
        kv_at_max: 0,
        objects_at_max: 0,
        max_objects: 0,
    };
    let counts = match Generator::new(spec, scale.seed, &mut live).run(spec, scale, &mut sizer) {
        Ok(c) => c,
        Err(never) => match never {},
    };
    Sizing {
        max_live_objects: sizer.max_objects,
        max_live_entry_bytes: sizer.max_live_entry,
        entry_overhead_avg: (sizer.max_live_entry - sizer.kv_at_max) as f64
            / sizer.objects_at_max.max(1) as f64,
        writes: counts.writes,
        deletes: counts.deletes,
        final_live_kv_bytes: counts.live_kv_bytes,
    }
}
/// Log memory for a workload: live entries at their largest fill `utilization` of
/// it, rounded up to whole seglets.
pub fn memory_for(sizing: &Sizing, utilization: f64) -> u64 {
    let bytes = (sizing.max_live_entry_bytes as f64 / utilization).ceil() as u64;
    bytes.div_ceil(SEGLET_BYTES as u64) * SEGLET_BYTES as u64
}

/// Bookkeeping for the generator, allocated and touched up front so it does not
/// show up as store memory in the RSS readings.
pub(super) fn prefaulted_live_vec(max_objects: u64) -> Vec<LiveObj> {
    let cap = max_objects as usize + 16;
    let mut v = Vec::with_capacity(cap);
    v.resize(cap, LiveObj::default());
    v.clear();
    v
}
