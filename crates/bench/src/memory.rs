//! Scenario `memory`: memory efficiency under the changing workloads of L Table 1,
//! ramstore against one `malloc` per object (L§2, Fig. 1).
//!
//! For each workload the parent process
//! 1. replays the workload without a store (a *sizing pass*) to learn the largest
//!    number of live objects and the largest footprint of live log entries (key +
//!    value + the entry's own header and checksum, as `object_entry_len` computes it);
//! 2. runs it in a child process against ramstore, whose log gets just enough memory
//!    for those live entries to fill `--utilization` of it (default
//!    [`DEFAULT_UTILIZATION`]);
//! 3. runs it in another child process against a `HashMap<u64, Box<[u8]>>` that
//!    makes one heap allocation per object under the system allocator, and reads
//!    that child's peak RSS.
//!
//! Children keep the measurements clean: each process's peak RSS covers one store
//! only, and the allocator starts from a fresh heap.
//!
//! Both children allocate (and touch) the generator's bookkeeping before they read
//! their starting RSS, so only the store's own memory is counted.

use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};

use ramstore_log::entry::object_entry_len;

use crate::report::{self, Machine};
use crate::workload::{self, Scale, WorkloadSpec};

// One idea per file (issue 19). The children name each other and never this
// parent, so the modules form no cycle.
mod args;
mod baseline_child;
mod ramstore_child;
mod sizing;
mod summary;

pub use args::{ChildArgs, MemoryArgs};
use args::{GIB, MIB, TABLE};
pub use baseline_child::{run_baseline_child, BaselineChild};
pub use ramstore_child::{diagnostics, run_ramstore_child, RamstoreChild};
pub use sizing::{memory_for, size_workload};
use summary::{must_of, pass, print_table, workload_report, MemoryReport};

fn spawn_child(sub: &str, args: &ChildArgs) -> anyhow::Result<String> {
    // `/proc/self/exe` still names this very binary when `cargo build` has replaced
    // the file since the run started (an hour-long run on a shared work tree); the
    // path from `current_exe` would then point at a deleted file.
    let proc_exe = std::path::Path::new("/proc/self/exe");
    let exe = if proc_exe.exists() {
        proc_exe.to_path_buf()
    } else {
        std::env::current_exe().context("current_exe")?
    };
    let out = Command::new(exe)
        .arg(sub)
        .args(["--workload", &args.workload])
        .args(["--live-bytes", &args.live_bytes.to_string()])
        .args(["--alloc-bytes", &args.alloc_bytes.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(["--max-objects", &args.max_objects.to_string()])
        .args(["--memory-bytes", &args.memory_bytes.to_string()])
        .args(["--segment-bytes", &args.segment_bytes.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run {sub}"))?;
    if !out.status.success() {
        bail!("{sub} exited with {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn run(args: &MemoryArgs) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let machine = Machine::probe();
    let live_target = match (args.live_mib, args.quick) {
        (Some(m), _) => m * MIB,
        (None, true) => 64 * MIB,
        (None, false) => GIB,
    };
    // L§2: 50 GB allocated per phase for 10 GB live, i.e. 5×.
    let alloc_bytes = 5 * live_target;
    let segment_bytes = args.segment_mib.unwrap_or(if args.quick { 2 } else { 8 }) * MIB;
    let specs: Vec<&WorkloadSpec> = if args.workloads.is_empty() {
        workload::WORKLOADS.iter().collect()
    } else {
        args.workloads
            .iter()
            .map(|n| workload::find(n).with_context(|| format!("unknown workload {n}")))
            .collect::<anyhow::Result<_>>()?
    };
    eprintln!(
        "memory: live {} / allocated {} per phase, segments {}, utilisation {}, seed {}",
        report::human_bytes(live_target),
        report::human_bytes(alloc_bytes),
        report::human_bytes(segment_bytes),
        args.utilization,
        args.seed
    );

    // The report is rewritten after every workload, so a long run that is stopped
    // early still leaves its finished workloads on disk.
    let mut report = MemoryReport {
        machine,
        command: report::command_line(),
        live_target_bytes: live_target,
        alloc_bytes_per_phase: alloc_bytes,
        target_utilization: args.utilization,
        seed: args.seed,
        entry_overhead_bytes: object_entry_len(TABLE, 1, 0, 20, 100) - 120,
        workloads: Vec::new(),
        must: must_of(&[], args.utilization),
        finished: false,
        total_seconds: 0.0,
    };
    for spec in specs {
        let scale = Scale {
            live_target,
            alloc_bytes,
            seed: args.seed,
            key_bytes: None,
        };
        let t = Instant::now();
        let sizing = size_workload(spec, scale, segment_bytes);
        let memory_bytes = memory_for(&sizing, args.utilization);
        eprintln!(
            "{}: sized in {:.1}s: max {} live objects, max live entries {}, overhead {:.1} B/object -> log memory {}",
            spec.name,
            t.elapsed().as_secs_f64(),
            sizing.max_live_objects,
            report::human_bytes(sizing.max_live_entry_bytes),
            sizing.entry_overhead_avg,
            report::human_bytes(memory_bytes)
        );
        let child = ChildArgs {
            workload: spec.name.to_string(),
            live_bytes: live_target,
            alloc_bytes,
            seed: args.seed,
            max_objects: sizing.max_live_objects,
            memory_bytes,
            segment_bytes,
        };
        let t = Instant::now();
        let ram: RamstoreChild = match spawn_child("memory-ramstore", &child)
            .and_then(|s| serde_json::from_str(s.trim()).context("parse ramstore child output"))
        {
            Ok(r) => r,
            Err(e) => RamstoreChild {
                error: Some(format!("{e:#}")),
                memory_bytes,
                ..Default::default()
            },
        };
        eprintln!(
            "{}: ramstore {} in {:.1}s",
            spec.name,
            if ram.completed { "completed" } else { "FAILED" },
            t.elapsed().as_secs_f64()
        );
        let t = Instant::now();
        let base: Option<BaselineChild> = match spawn_child("memory-baseline", &child)
            .and_then(|s| serde_json::from_str(s.trim()).context("parse baseline child output"))
        {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("{}: baseline failed: {e:#}", spec.name);
                None
            }
        };
        eprintln!(
            "{}: baseline done in {:.1}s",
            spec.name,
            t.elapsed().as_secs_f64()
        );
        report
            .workloads
            .push(workload_report(spec, sizing, ram, base));
        report.must = must_of(&report.workloads, args.utilization);
        report.total_seconds = t0.elapsed().as_secs_f64();
        report::write_json(&args.json, &report)?;
    }

    print_table(&report.workloads, live_target);
    println!(
        "Must: all workloads complete at {:.0}% utilisation: {}",
        args.utilization * 100.0,
        pass(report.must.all_completed_at_target)
    );
    println!(
        "Must: total_over_live < malloc_rss_over_live on every workload: {}",
        pass(report.must.total_below_malloc_everywhere)
    );
    report.machine.finish();
    report.finished = true;
    report.total_seconds = t0.elapsed().as_secs_f64();
    report::write_json(&args.json, &report)
}
