//! Issue 17, bounded memory: a real `ramstore server` (64 MiB of log, DRAM only,
//! the Redis port on) churned the way L Table 1's W2 does it — fresh 16-byte keys,
//! 100-byte values replaced by 130-byte ones and back, each new key SET and the old
//! one DELeted, five times the log's memory written — reports its resident memory
//! split (Redis `INFO memory`) so that
//! - the parts add up to the process's resident set, which matches what the kernel
//!   says of the process (`/proc/PID/status`);
//! - the log holds at least the live objects and at most its memory, the hash table
//!   its main buckets;
//! - everything else stays under the bound docs/design-notes.md "Memory outside the
//!   log" states for this configuration ([`other_bound`]), and does not grow with
//!   what was written (the churn's second half adds nothing beyond slack).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{free_port, Cluster};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The server's log memory (`--memory`).
const MEMORY: u64 = 64 * MIB;
/// Live key + value bytes kept during the churn: half the log.
const LIVE_BYTES: u64 = MEMORY / 2;
/// Bytes of objects the churn writes in all: five times the log.
const WRITTEN_BYTES: u64 = 5 * MEMORY;
/// Commands sent before their replies are read (as `ramstore-bench resp-replay`).
const PIPELINE: usize = 512;

/// The bound on a storage server's resident memory outside the log and the hash
/// table, as docs/design-notes.md "Memory outside the log" states it, for a server
/// with `memory` bytes of log, no replicas, no backup, `resp` Redis connections
/// running small commands and `native` native connections between requests.
fn other_bound(memory: u64, resp: u64, native: u64) -> u64 {
    // Binary and libraries, thread stacks, the runtime and the allocator's small
    // blocks, with the default threads.
    const ALLOWANCE: u64 = 16 * MIB;
    // The log's own bookkeeping: at most 320 bytes per 64 KiB seglet.
    let log_metadata = memory / 200;
    // One combined pass: a 32-byte work-list entry per live entry of its victims,
    // whole victims within `combined_work_list_entries` (memory / 4096, at least
    // 64 Ki; a larger first victim is cleaned without a list), and the tombstone
    // moves it has not yet told the lists, 1,024 of 40 bytes at most.
    let work_list = (memory / 4096).max(64 * KIB);
    let cleaner = work_list * 32 + 1024 * 40;
    // A Redis connection running small commands (replies ≤ 1 MiB): a 128 KiB read
    // buffer, replies written out at 1 MiB (≤ 1 MiB + one reply), a kept 64 KiB
    // value buffer; a native one between requests: 64 KiB to read and a kept reply
    // buffer of at most 256 KiB. No large request: nothing from the budgets.
    let connections = resp * (128 * KIB + 2 * MIB + 64 * KIB) + native * (64 + 256) * KIB;
    ALLOWANCE + log_metadata + cleaner + connections
}

/// One RESP connection that sends commands in pipelined batches.
struct Resp {
    stream: TcpStream,
    replies: BufReader<TcpStream>,
    batch: Vec<u8>,
    expected: Vec<&'static str>,
}

impl Resp {
    fn connect(port: u16) -> Resp {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to RESP");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        let replies = BufReader::new(stream.try_clone().expect("clone stream"));
        Resp {
            stream,
            replies,
            batch: Vec::new(),
            expected: Vec::new(),
        }
    }

    /// Queues one command whose reply must be the line `reply`; sends the batch
    /// and checks its replies once it is [`PIPELINE`] long.
    fn queue(&mut self, args: &[&[u8]], reply: &'static str) {
        self.batch
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.batch
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.batch.extend_from_slice(a);
            self.batch.extend_from_slice(b"\r\n");
        }
        self.expected.push(reply);
        if self.expected.len() == PIPELINE {
            self.flush();
        }
    }

    /// Sends what is queued and checks every reply.
    fn flush(&mut self) {
        self.stream.write_all(&self.batch).expect("send batch");
        self.batch.clear();
        let mut line = String::new();
        for want in self.expected.drain(..) {
            line.clear();
            self.replies.read_line(&mut line).expect("a reply");
            assert_eq!(line.trim_end(), want, "the server refused a command");
        }
    }

    /// `INFO memory` as field → value.
    fn info_memory(&mut self) -> Vec<(String, String)> {
        self.flush();
        self.stream
            .write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
            .expect("send INFO");
        let mut header = String::new();
        self.replies.read_line(&mut header).expect("INFO reply");
        let len: usize = header
            .trim_end()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("INFO answers a bulk string: {header:?}"));
        let mut body = vec![0; len + 2];
        self.replies.read_exact(&mut body).expect("INFO body");
        String::from_utf8_lossy(&body[..len])
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// The resident split as `INFO memory` gives it, in bytes.
#[derive(Debug, Clone, Copy)]
struct Split {
    rss: u64,
    peak: u64,
    log: u64,
    hash: u64,
    other: u64,
    live: u64,
}

impl Split {
    fn read(conn: &mut Resp) -> Split {
        let info = conn.info_memory();
        let get = |field: &str| -> u64 {
            info.iter()
                .find(|(k, _)| k == field)
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or_else(|| panic!("no number {field} in INFO memory: {info:?}"))
        };
        Split {
            rss: get("used_memory_rss"),
            peak: get("ramstore_resident_peak_bytes"),
            log: get("ramstore_log_resident_bytes"),
            hash: get("ramstore_hash_table_resident_bytes"),
            other: get("ramstore_other_resident_bytes"),
            live: get("ramstore_live_object_bytes"),
        }
    }
}

/// `VmRSS` of process `pid`, as the kernel tells this test.
fn vm_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmRSS")
        * KIB
}

/// The 16-byte key of object `i`.
fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(format!("{i:016x}").as_bytes());
    k
}

#[test]
fn memory_split_after_w2_churn_adds_up_and_other_stays_under_its_bound() {
    if !cfg!(target_os = "linux") {
        // The split needs /proc and mincore; elsewhere INFO leaves it out.
        return;
    }
    let mut cluster = Cluster::start(0);
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let memory = format!("{}MiB", MEMORY / MIB);
    cluster.add_server_with(
        "127.0.0.1:0",
        &[
            "--memory",
            &memory,
            "--replicas",
            "0",
            "--resp-listen",
            &listen,
        ],
    );
    let pid = cluster.servers[0].proc.pid();
    let mut conn = Resp::connect(port);
    let start = Split::read(&mut conn);

    // W2: fill with 100-byte values, then replace every object by a fresh key with
    // a 130-byte value (then 100 again, …), deleting the old one.
    let small = vec![b'a'; 100];
    let large = vec![b'b'; 130];
    let objects = LIVE_BYTES / (16 + 100);
    let mut next = 0u64;
    for _ in 0..objects {
        conn.queue(&[b"SET", &key(next), &small], "+OK");
        next += 1;
    }
    let mut written = objects * (16 + 100);
    let mut round = 0;
    let mut halfway = None;
    while written < WRITTEN_BYTES {
        round += 1;
        let value = if round % 2 == 1 { &large } else { &small };
        let first_old = next - objects;
        for old in first_old..first_old + objects {
            conn.queue(&[b"SET", &key(next), value], "+OK");
            conn.queue(&[b"DEL", &key(old)], ":1");
            next += 1;
        }
        written += objects * (16 + value.len() as u64);
        if halfway.is_none() && written >= WRITTEN_BYTES / 2 {
            halfway = Some(Split::read(&mut conn));
        }
    }
    let halfway = halfway.expect("measured halfway");
    let end = Split::read(&mut conn);
    let kernel_rss = vm_rss(pid);
    let report =
        format!("start {start:?}\nhalfway {halfway:?}\nend {end:?}\nkernel VmRSS {kernel_rss}");

    for s in [start, halfway, end] {
        assert_eq!(
            s.log + s.hash + s.other,
            s.rss,
            "the parts add up\n{report}"
        );
        assert!(s.other > 0, "other is not clamped at 0\n{report}");
        assert!(s.peak >= s.rss, "{report}");
        assert!(s.log <= MEMORY, "{report}");
    }
    // The kernel's own figure, read just after: the same process, within what a
    // cleaning pass's work list can change meanwhile.
    assert!(
        end.rss.abs_diff(kernel_rss) <= 16 * MIB,
        "INFO's used_memory_rss is the server's VmRSS\n{report}"
    );
    // The live objects are written in the log, so their pages are resident; the
    // hash table's ≈ 102 Ki main buckets (64 MiB / 640, 6.4 MiB) are all reached
    // by 280 k random keys, plus their locks and the few overflow buckets chains
    // needed.
    assert!(
        end.log >= end.live && end.live >= LIVE_BYTES / 2,
        "{report}"
    );
    assert!(
        (6 * MIB..=6 * MIB + 512 * KIB + 128 * KIB + 3 * MIB).contains(&end.hash),
        "{report}"
    );
    // The bound, with this test's connection and the few the cluster opens (the
    // coordinator's, at most 8).
    let bound = other_bound(MEMORY, 1, 8);
    for s in [start, halfway, end] {
        assert!(
            s.other <= bound,
            "other {} MiB over its bound {} MiB\n{report}",
            s.other / MIB,
            bound / MIB
        );
    }
    // And it does not grow with what is written: the second half of the churn adds
    // no more than slack (a cleaning pass's work list in flight).
    assert!(
        end.other <= halfway.other + 8 * MIB,
        "other grew from {} to {} MiB in the second half of the churn\n{report}",
        halfway.other / MIB,
        end.other / MIB
    );
    eprintln!("{report}");
}
