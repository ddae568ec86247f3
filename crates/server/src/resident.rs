//! The resident split of a storage server (issue 17): how much of the process's
//! resident memory is the log, the hash table, and everything else.
//!
//! The log (the seglet pool, L§5.1) and the hash table (R§4.1) are each mapped once
//! at start-up and faulted in as they are used; what they hold resident is asked of
//! the kernel page by page (`mincore`, via [`ObjectStore::resident`]), so the split
//! is exact rather than an estimate from counters. The process's resident set and
//! its peak are `VmRSS` and `VmHWM` of `/proc/self/status`. *Other* is the process
//! minus the log and the hash table: the binary and its libraries, thread stacks,
//! the runtime, connection buffers, the cleaner's work lists — what
//! docs/design-notes.md "Memory outside the log" bounds.
//!
//! Where the kernel cannot be asked (not Linux), the parts are unknown, never
//! guessed; nothing here panics. The parts are read one after another while the
//! server runs, so a page faulted in between two reads lands in *other*; *other*
//! is clamped at zero rather than going negative.
//!
//! Cost: one read of `/proc/self/status` and about one system call per 16 MiB of
//! log and hash table; no lock. Only statistics requests pay it.

use std::fmt::Write as _;

use ramstore_master::{ObjectStore, StoreResident};

/// The process's resident memory, from `/proc/self/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    /// `VmRSS`: bytes resident now.
    pub resident_bytes: u64,
    /// `VmHWM`: the most bytes ever resident (`None` if the line is missing).
    pub peak_resident_bytes: Option<u64>,
}

impl ProcessMemory {
    /// This process's resident memory, or `None` where `/proc/self/status` cannot
    /// be read or parsed.
    pub fn read() -> Option<ProcessMemory> {
        parse_proc_status(&std::fs::read_to_string("/proc/self/status").ok()?)
    }
}

/// `VmRSS` and `VmHWM` out of the text of a `/proc/PID/status` file (values in kB,
/// which the kernel means as KiB). `None` without a well-formed `VmRSS` line.
pub fn parse_proc_status(text: &str) -> Option<ProcessMemory> {
    let kib = |field: &str| {
        text.lines().find_map(|l| {
            let value = l.strip_prefix(field)?.strip_prefix(':')?;
            let mut words = value.split_whitespace();
            let n: u64 = words.next()?.parse().ok()?;
            match words.next() {
                Some("kB") => n.checked_mul(1024),
                _ => None,
            }
        })
    };
    Some(ProcessMemory {
        resident_bytes: kib("VmRSS")?,
        peak_resident_bytes: kib("VmHWM"),
    })
}

/// A server's resident memory by part. `None`: unknown on this platform.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResidentSplit {
    /// The whole process (`VmRSS`).
    pub process: Option<u64>,
    /// The most the process ever held (`VmHWM`).
    pub peak: Option<u64>,
    /// The seglet pool's resident pages.
    pub log: Option<u64>,
    /// The hash table's: touched main buckets, locks, overflow chunks.
    pub hash_table: Option<u64>,
    /// The process minus the log and the hash table, at least 0; unknown if any
    /// of the three is.
    pub other: Option<u64>,
}

impl ResidentSplit {
    /// The split of `process` given the store's parts.
    pub fn of(process: Option<ProcessMemory>, store: StoreResident) -> ResidentSplit {
        let log = store.log.map(|b| b as u64);
        let hash_table = store.hash_table.map(|b| b as u64);
        let other = match (process, log, hash_table) {
            (Some(p), Some(l), Some(h)) => {
                Some(p.resident_bytes.saturating_sub(l.saturating_add(h)))
            }
            _ => None,
        };
        ResidentSplit {
            process: process.map(|p| p.resident_bytes),
            peak: process.and_then(|p| p.peak_resident_bytes),
            log,
            hash_table,
            other,
        }
    }

    /// Measures this process with `store` as its log and hash table. The store is
    /// asked first, so pages faulted in meanwhile count as the process's (and
    /// land in *other*) rather than making the parts exceed the whole.
    pub fn measure(store: &ObjectStore) -> ResidentSplit {
        let parts = store.resident();
        ResidentSplit::of(ProcessMemory::read(), parts)
    }

    /// The GetServerStats lines (`ramstore status`, Redis `INFO memory`): bytes, or
    /// `unknown`.
    pub fn stats_lines(&self, line: &mut impl FnMut(&str, String)) {
        let text = |v: Option<u64>| v.map_or_else(|| "unknown".to_string(), |b| b.to_string());
        line("resident_bytes", text(self.process));
        line("resident_peak_bytes", text(self.peak));
        line("log_resident_bytes", text(self.log));
        line("hash_table_resident_bytes", text(self.hash_table));
        line("other_resident_bytes", text(self.other));
    }

    /// Appends the Prometheus gauges; an unknown part has no sample.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP ramstore_process_resident_bytes Resident memory of the server process (VmRSS).\n\
             # TYPE ramstore_process_resident_bytes gauge"
        );
        if let Some(b) = self.process {
            let _ = writeln!(out, "ramstore_process_resident_bytes {b}");
        }
        let _ = writeln!(
            out,
            "# HELP ramstore_process_resident_peak_bytes Most memory the server process ever held resident (VmHWM).\n\
             # TYPE ramstore_process_resident_peak_bytes gauge"
        );
        if let Some(b) = self.peak {
            let _ = writeln!(out, "ramstore_process_resident_peak_bytes {b}");
        }
        let _ = writeln!(
            out,
            "# HELP ramstore_resident_bytes Resident memory of the server process by part: the log, the hash table, everything else.\n\
             # TYPE ramstore_resident_bytes gauge"
        );
        for (part, value) in [
            ("log", self.log),
            ("hash_table", self.hash_table),
            ("other", self.other),
        ] {
            if let Some(b) = value {
                let _ = writeln!(out, "ramstore_resident_bytes{{part=\"{part}\"}} {b}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tramstore\nVmPeak:\t  900000 kB\nVmHWM:\t  201000 kB\n\
                          VmRSS:\t  197000 kB\nRssAnon:\t  190000 kB\nThreads:\t9\n";

    fn process(resident: u64, peak: u64) -> Option<ProcessMemory> {
        Some(ProcessMemory {
            resident_bytes: resident,
            peak_resident_bytes: Some(peak),
        })
    }

    #[test]
    fn parse_proc_status_reads_vmrss_and_vmhwm_in_kib() {
        assert_eq!(
            parse_proc_status(STATUS),
            Some(ProcessMemory {
                resident_bytes: 197_000 * 1024,
                peak_resident_bytes: Some(201_000 * 1024),
            })
        );
    }

    #[test]
    fn parse_proc_status_without_vmrss_is_none_and_without_vmhwm_has_no_peak() {
        assert_eq!(parse_proc_status("Name:\tx\nVmHWM:\t5 kB\n"), None);
        assert_eq!(parse_proc_status(""), None);
        assert_eq!(
            parse_proc_status("VmRSS:\t5 kB\n"),
            Some(ProcessMemory {
                resident_bytes: 5120,
                peak_resident_bytes: None,
            })
        );
    }

    /// Garbled lines are unknown, never a panic or a wrong number.
    #[test]
    fn parse_proc_status_rejects_garbled_values() {
        for bad in [
            "VmRSS:\tlots kB\n",
            "VmRSS:\t5\n",
            "VmRSS:\t5 MB\n",
            "VmRSS:\t-5 kB\n",
            "VmRSS:\t18446744073709551615 kB\n",
            "VmRSSx:\t5 kB\n",
        ] {
            assert_eq!(parse_proc_status(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn of_other_is_process_minus_log_and_hash_table() {
        let split = ResidentSplit::of(
            process(200 << 20, 210 << 20),
            StoreResident {
                log: Some(160 << 20),
                hash_table: Some(24 << 20),
            },
        );
        assert_eq!(
            split,
            ResidentSplit {
                process: Some(200 << 20),
                peak: Some(210 << 20),
                log: Some(160 << 20),
                hash_table: Some(24 << 20),
                other: Some(16 << 20),
            }
        );
    }

    /// A page faulted in between the reads could make the parts exceed the whole:
    /// other is then 0, not a wrapped-around number.
    #[test]
    fn of_other_saturates_at_zero() {
        let split = ResidentSplit::of(
            process(100, 100),
            StoreResident {
                log: Some(90),
                hash_table: Some(20),
            },
        );
        assert_eq!(split.other, Some(0));
        let huge = ResidentSplit::of(
            process(100, 100),
            StoreResident {
                log: Some(usize::MAX),
                hash_table: Some(usize::MAX),
            },
        );
        assert_eq!(huge.other, Some(0));
    }

    #[test]
    fn of_any_unknown_part_makes_other_unknown() {
        let parts = StoreResident {
            log: Some(1),
            hash_table: Some(1),
        };
        assert_eq!(ResidentSplit::of(None, parts).other, None);
        let no_log = StoreResident { log: None, ..parts };
        let split = ResidentSplit::of(process(10, 10), no_log);
        assert_eq!((split.process, split.other), (Some(10), None));
        let no_hash = StoreResident {
            hash_table: None,
            ..parts
        };
        assert_eq!(ResidentSplit::of(process(10, 10), no_hash).other, None);
    }

    #[test]
    fn stats_lines_give_bytes_or_unknown() {
        let mut lines = Vec::new();
        let split = ResidentSplit {
            process: Some(5),
            peak: None,
            log: Some(3),
            hash_table: Some(1),
            other: Some(1),
        };
        split.stats_lines(&mut |k, v| lines.push(format!("{k}={v}")));
        assert_eq!(
            lines,
            [
                "resident_bytes=5",
                "resident_peak_bytes=unknown",
                "log_resident_bytes=3",
                "hash_table_resident_bytes=1",
                "other_resident_bytes=1",
            ]
        );
    }

    #[test]
    fn render_has_a_sample_per_known_part() {
        let mut out = String::new();
        ResidentSplit {
            process: Some(5),
            peak: Some(6),
            log: Some(3),
            hash_table: None,
            other: None,
        }
        .render(&mut out);
        assert!(
            out.contains("\nramstore_process_resident_bytes 5\n"),
            "{out}"
        );
        assert!(
            out.contains("\nramstore_process_resident_peak_bytes 6\n"),
            "{out}"
        );
        assert!(
            out.contains("\nramstore_resident_bytes{part=\"log\"} 3\n"),
            "{out}"
        );
        assert!(!out.contains("part=\"hash_table\"}"), "{out}");
        assert!(!out.contains("part=\"other\"}"), "{out}");
    }

    /// On Linux this process's own split is known and adds up: the test's store is
    /// small and its pool is partly written.
    #[test]
    fn measure_adds_up_on_linux() {
        let mut config = ramstore_master::StoreConfig::new(8 << 20);
        config.cleaner = ramstore_master::CleanerMode::Manual;
        let store = ObjectStore::new(config).expect("store");
        let split = ResidentSplit::measure(&store);
        if !cfg!(target_os = "linux") {
            assert_eq!(split.other, None);
            return;
        }
        let (process, log, hash, other) = (
            split.process.expect("VmRSS"),
            split.log.expect("log"),
            split.hash_table.expect("hash table"),
            split.other.expect("other"),
        );
        assert!(split.peak.expect("VmHWM") >= process);
        assert!(log <= 8 << 20, "{split:?}");
        assert!(log + hash <= process, "{split:?}");
        assert_eq!(log + hash + other, process);
    }
}
