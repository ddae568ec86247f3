//! The malloc baseline child of the `memory` scenario: one heap allocation per
//! object in a `HashMap` (L§2, Fig. 1), and its peak RSS.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::report::{self};
use crate::workload::{self, Executor, Generator, LiveObj, Scale};

use super::args::ChildArgs;
use super::sizing::prefaulted_live_vec;

/// What the malloc baseline child reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BaselineChild {
    pub writes: u64,
    pub deletes: u64,
    pub seconds: f64,
    pub live_objects: u64,
    pub live_kv_bytes: u64,
    pub rss_before: u64,
    pub peak_rss: u64,
    /// The map's capacity (set from the sizing pass, like ramstore's hash table).
    pub map_capacity: u64,
}

/// The baseline: one heap allocation (key and value together) per object.
pub(super) struct MallocExec {
    pub(super) map: HashMap<u64, Box<[u8]>>,
}

impl Executor for MallocExec {
    type Error = anyhow::Error;

    fn write(&mut self, obj: &mut LiveObj, key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        let mut bytes = Vec::with_capacity(key.len() + value.len());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(value);
        // Capacity is exact, so this does not reallocate.
        self.map.insert(obj.id as u64, bytes.into_boxed_slice());
        Ok(())
    }

    fn delete(&mut self, obj: &LiveObj, _key: &[u8]) -> anyhow::Result<()> {
        if self.map.remove(&(obj.id as u64)).is_none() {
            bail!("baseline lost object {}", obj.id);
        }
        Ok(())
    }
}

/// Hidden subcommand `memory-baseline`: one workload against the malloc baseline.
pub fn run_baseline_child(args: &ChildArgs) -> anyhow::Result<()> {
    let spec = workload::find(&args.workload).context("unknown workload")?;
    let scale = Scale {
        live_target: args.live_bytes,
        alloc_bytes: args.alloc_bytes,
        seed: args.seed,
        key_bytes: None,
    };
    let mut live = prefaulted_live_vec(args.max_objects);
    let rss_before = report::rss_bytes()?;
    // Sized up front like ramstore's hash table, so the baseline never pays for a
    // rehash (old and new table alive at once); this favours the baseline.
    let mut exec = MallocExec {
        map: HashMap::with_capacity(args.max_objects as usize),
    };
    let map_capacity = exec.map.capacity() as u64;
    let started = Instant::now();
    let counts = Generator::new(spec, scale.seed, &mut live).run(spec, scale, &mut exec)?;
    let seconds = started.elapsed().as_secs_f64();
    let peak_rss = report::peak_rss_bytes()?;
    let out = BaselineChild {
        writes: counts.writes,
        deletes: counts.deletes,
        seconds,
        live_objects: counts.live_objects,
        live_kv_bytes: counts.live_kv_bytes,
        rss_before,
        peak_rss,
        map_capacity,
    };
    // Keep the map alive until the peak has been read.
    drop(exec);
    println!("{}", serde_json::to_string(&out)?);
    Ok(())
}
