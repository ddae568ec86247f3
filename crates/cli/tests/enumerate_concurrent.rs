//! Enumeration under concurrent writes, removes, log cleaning and tablet splits,
//! against real processes: objects that exist unchanged for the whole enumeration
//! appear exactly once; objects inserted or removed meanwhile may or may not appear,
//! but no key ever appears twice.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::Cluster;
use ramstore_client::{BlockingClient, ClientError, MultiWriteOp};

/// Log memory per server: small, so that the churn below makes the cleaner run.
const MEMORY: &str = "32MiB";
const STABLE: usize = 3000;
const UPDATED: usize = 100;
const CHURN_KEYS: u64 = 300;
const WRITERS: u64 = 3;

fn stable_key(i: usize) -> Vec<u8> {
    format!("stable-{i}").into_bytes()
}

fn stable_value(i: usize) -> Vec<u8> {
    format!("s{i}-").repeat(1 + i % 40).into_bytes()
}

/// A cluster of two small servers with table `t` (two tablets), the stable and
/// updated objects written: returns the cluster, the table id and the stable
/// objects' versions.
fn setup() -> (Cluster, u64, Vec<u64>) {
    let mut cluster = Cluster::start(0);
    for _ in 0..2 {
        cluster.add_server_with("127.0.0.1:0", &["--memory", MEMORY]);
    }
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let keys: Vec<Vec<u8>> = (0..STABLE).map(stable_key).collect();
    let values: Vec<Vec<u8>> = (0..STABLE).map(stable_value).collect();
    let ops: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| MultiWriteOp::new(t, k, v))
        .collect();
    let versions = c
        .multi_write(&ops)
        .into_iter()
        .map(|r| r.expect("stable write"))
        .collect();
    for i in 0..UPDATED {
        c.write(t, format!("updated-{i}").as_bytes(), b"updated-0")
            .unwrap();
    }
    (cluster, t, versions)
}

/// Writer threads: each inserts, overwrites and removes its own churn keys (values
/// of 100 bytes to 4 KiB, so the logs fill and get cleaned), and overwrites the
/// "updated" keys (which are never removed). Every operation must succeed.
struct Churn {
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
    handles: Vec<thread::JoinHandle<Result<(), String>>>,
}

impl Churn {
    fn start(cluster: &Cluster, t: u64) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let handles = (0..WRITERS)
            .map(|w| {
                let c = cluster.client();
                let (stop, ops) = (stop.clone(), ops.clone());
                thread::spawn(move || {
                    let mut x = 0x243f_6a88_85a3_08d3u64 ^ w;
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        n += 1;
                        let key = format!("churn-{w}-{}", x % CHURN_KEYS);
                        let result = if x.is_multiple_of(3) {
                            c.remove(t, key.as_bytes()).map(drop)
                        } else {
                            let len = 100 + (x >> 20) as usize % 4000;
                            c.write(t, key.as_bytes(), &vec![b'c'; len]).map(drop)
                        };
                        result.map_err(|e| format!("{key}: {e}"))?;
                        if n.is_multiple_of(4) {
                            let key = format!("updated-{}", (x >> 8) % UPDATED as u64);
                            c.write(t, key.as_bytes(), format!("updated-{n}").as_bytes())
                                .map_err(|e| format!("{key}: {e}"))?;
                        }
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        Churn { stop, ops, handles }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            h.join()
                .expect("writer thread")
                .unwrap_or_else(|e| panic!("a concurrent write failed: {e}"));
        }
        self.ops.load(Ordering::Relaxed)
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Cleaner passes (compactions + combined passes) a server reports.
fn cleaner_passes(c: &BlockingClient, addr: &str) -> u64 {
    let stats = c.server_stats(addr).expect("server stats");
    ["compactions", "combined_passes"]
        .iter()
        .map(|k| {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// One enumeration of `t`, checked: no key twice, every stable object exactly once
/// with its value and version, every updated key (never removed) exactly once with
/// one of the values written to it. Returns how many churn keys it saw.
fn check_enumeration(c: &BlockingClient, t: u64, versions: &[u64]) -> usize {
    let mut seen: HashMap<Vec<u8>, (Vec<u8>, u64)> = HashMap::new();
    for object in c.enumerate(t) {
        let o = object.unwrap_or_else(|e| panic!("enumeration failed: {e}"));
        let key = o.key.clone();
        if let Some(first) = seen.insert(o.key, (o.value, o.version)) {
            panic!(
                "{:?} enumerated twice (versions {} and {})",
                String::from_utf8_lossy(&key),
                first.1,
                o.version
            );
        }
    }
    for (i, version) in versions.iter().enumerate() {
        let got = seen
            .get(&stable_key(i))
            .unwrap_or_else(|| panic!("stable-{i} missing from the enumeration"));
        assert_eq!(got, &(stable_value(i), *version), "stable-{i}");
    }
    for i in 0..UPDATED {
        let (value, _) = seen
            .get(format!("updated-{i}").as_bytes())
            .unwrap_or_else(|| panic!("updated-{i} (always present) missing"));
        assert!(value.starts_with(b"updated-"), "updated-{i}: {value:?}");
    }
    let churn = seen.keys().filter(|k| k.starts_with(b"churn-")).count();
    assert_eq!(
        seen.len(),
        STABLE + UPDATED + churn,
        "only keys that were written"
    );
    churn
}

/// Enumerations running while three writers insert, overwrite and remove objects
/// on both servers and the servers' cleaners relocate objects: every enumeration
/// returns each stable object exactly once (with its value and version) and each
/// always-present key exactly once, and never any key twice.
#[test]
fn enumeration_under_concurrent_writes_returns_stable_objects_once() {
    let (cluster, t, versions) = setup();
    let c = cluster.client();
    let churn = Churn::start(&cluster, t);
    // Let the logs fill until both cleaners have run, so cleaning goes on during
    // the enumerations below.
    for server in &cluster.servers {
        common::wait_until(
            "the cleaner to run under the write load",
            Duration::from_secs(40),
            || (cleaner_passes(&c, &server.addr) > 0).then_some(()),
        );
    }
    // Enumerate until each cleaner has made more passes while enumerations ran
    // (at least five enumerations, at most 20 s).
    let passes = |c: &BlockingClient| -> Vec<u64> {
        cluster
            .servers
            .iter()
            .map(|s| cleaner_passes(c, &s.addr))
            .collect()
    };
    let start = passes(&c);
    let started = std::time::Instant::now();
    let mut churn_seen = 0;
    let mut rounds = 0;
    loop {
        churn_seen += check_enumeration(&c, t, &versions);
        rounds += 1;
        let cleaned = passes(&c)
            .iter()
            .zip(&start)
            .all(|(now, then)| now >= &(then + 2));
        if rounds >= 5 && (cleaned || started.elapsed() > Duration::from_secs(20)) {
            break;
        }
    }
    let ops = churn.finish();
    eprintln!(
        "{rounds} enumerations, {ops} concurrent writes, {churn_seen} churn keys enumerated, \
         cleaner passes {start:?} -> {:?}",
        passes(&c)
    );
    assert!(ops > 0);
    assert!(
        churn_seen > 0,
        "concurrently written keys were enumerated too"
    );
    check_enumeration(&c, t, &versions);
}

/// Enumerations running while the table's tablets are split again and again (and
/// objects are written and removed): the enumerating client's map goes stale
/// mid-way, yet every stable object still appears exactly once and no key twice.
#[test]
fn enumeration_during_tablet_splits_returns_stable_objects_once() {
    let (cluster, t, versions) = setup();
    let c = cluster.client();
    let churn = Churn::start(&cluster, t);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let splitter = {
        let c = cluster.client();
        let (stop, done) = (stop.clone(), done.clone());
        thread::spawn(move || -> Result<u64, ClientError> {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                c.split_tablet("t", x)?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok(done.load(Ordering::Relaxed))
        })
    };
    // At least five enumerations, and until a good number of splits happened
    // while they ran.
    let mut rounds = 0;
    while rounds < 5 || (done.load(Ordering::Relaxed) < 30 && rounds < 50) {
        check_enumeration(&c, t, &versions);
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let splits = splitter.join().expect("splitter").expect("splits succeed");
    assert!(splits > 0);
    let ops = churn.finish();
    eprintln!("{rounds} enumerations, {splits} splits, {ops} concurrent writes");
    let tablets = c
        .tablet_map()
        .unwrap()
        .into_iter()
        .filter(|x| x.table_id == t)
        .count();
    assert_eq!(tablets, 2 + splits as usize, "every split made a tablet");
    check_enumeration(&c, t, &versions);
}
