//! A client that crashes mid-commit (Lee et al. SOSP'15 §6.4; issue 21): real
//! processes, 3 servers with a short `--tx-recovery-timeout-ms`, a bank of
//! accounts spread over all three, transfers running as transactions, and
//! `ramstore tx` clients that prepare a transfer and exit before deciding
//! (the test-only `RAMSTORE_TEST_EXIT_AFTER_PREPARE=1`). Their locks are
//! released by the transaction recovery manager within a bound, and the bank's
//! total holds in every snapshot (a read-only transaction over every account)
//! and at the end.
//!
//! The transfers run while the crashed client's locks wait for the recovery
//! manager; they pause while a snapshot is taken. A 24-object read-only
//! transaction racing a writer that never backs off is starved under
//! optimistic concurrency (any transfer between its reads and its commit
//! aborts it) — on a slow 2-core machine every attempt lost (CI, stop 33).

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{ramstore_bin, Cluster};
use ramstore_client::{BlockingClient, ClientError, TabletInfo};
use ramstore_wire::key_hash;

const ACCOUNTS: usize = 24;
const START: i64 = 100;
const TIMEOUT_MS: &str = "1000";
/// How long a crashed client's locks may stay held: the first op's holder acts
/// within 1.25 timeouts, the others within 4.25; the rest is slack for a loaded
/// machine (and for the probe losing races with the transfers).
const RELEASE_BOUND: Duration = Duration::from_secs(30);

fn account(i: usize) -> Vec<u8> {
    format!("acct-{i:03}").into_bytes()
}

fn owner(map: &[TabletInfo], table: u64, key: &[u8]) -> u64 {
    let h = key_hash(key);
    map.iter()
        .find(|t| t.table_id == table && (t.start_hash..=t.end_hash).contains(&h))
        .expect("a tablet owns every key")
        .server_id
}

fn balance(v: Option<Vec<u8>>) -> i64 {
    let text = String::from_utf8(v.expect("every account exists")).expect("utf-8");
    text.parse().expect("a decimal balance")
}

/// The sum of every account, read in one transaction that commits (so the
/// reads are one consistent snapshot); retried while locks abort it.
fn snapshot(client: &BlockingClient, table: u64) -> i64 {
    client
        .run_transaction(1_000, |tx| {
            let mut sum = 0;
            for i in 0..ACCOUNTS {
                sum += balance(tx.read(table, &account(i))?);
            }
            Ok(sum)
        })
        .expect("a snapshot commits once no lock is held")
}

/// Moves `amount` from `from` to `to` in one transaction.
fn transfer(client: &BlockingClient, table: u64, from: usize, to: usize, amount: i64) {
    let result: Result<(), ClientError> = client.run_transaction(200, |tx| {
        let a = balance(tx.read(table, &account(from))?);
        let b = balance(tx.read(table, &account(to))?);
        tx.write(table, &account(from), (a - amount).to_string().as_bytes())?;
        tx.write(table, &account(to), (b + amount).to_string().as_bytes())?;
        Ok(())
    });
    // An abort after every attempt applied nothing; any other error is a bug.
    match result {
        Ok(()) | Err(ClientError::Aborted) => {}
        Err(e) => panic!("transfer {from} -> {to}: {e}"),
    }
}

/// A `ramstore tx` transfer that prepares and exits before its decision.
fn crashed_transfer(cluster: &Cluster, from: &[u8], to: &[u8]) {
    let script = format!(
        "incr bank {} -7\nincr bank {} 7\n",
        String::from_utf8_lossy(from),
        String::from_utf8_lossy(to)
    );
    let mut child = Command::new(ramstore_bin())
        .arg("tx")
        .args(["--coordinator", cluster.addr(), "--timeout", "20"])
        .env_remove("RAMSTORE_COORDINATOR")
        .env("RAMSTORE_TEST_EXIT_AFTER_PREPARE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ramstore tx starts");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .expect("script written");
    let out = child.wait_with_output().expect("ramstore tx ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the client stopped before deciding");
    assert!(
        stderr.contains("abandoned after the prepares"),
        "the test hook ran: {stderr}"
    );
}

/// Whether a read-only transaction over `keys` commits (no other transaction
/// holds their locks).
fn unlocked(client: &BlockingClient, table: u64, keys: &[&[u8]]) -> bool {
    let mut tx = client.transaction();
    for k in keys {
        if tx.read(table, k).is_err() {
            return false;
        }
    }
    tx.commit().is_ok()
}

/// Lets the snapshot stop the transfers: `exclusive` raises the flag, then
/// waits for the transfer in flight (which holds the lock) to end.
#[derive(Default)]
struct Pause {
    paused: AtomicBool,
    in_flight: Mutex<()>,
}

impl Pause {
    /// Runs `transfer` unless a snapshot is under way; whether it ran.
    fn run(&self, transfer: impl FnOnce()) -> bool {
        while self.paused.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(1));
        }
        let _running = self.in_flight.lock().expect("no transfer panicked");
        let run = !self.paused.load(Ordering::Acquire);
        if run {
            transfer();
        }
        run
    }

    fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        self.paused.store(true, Ordering::Release);
        let value = {
            let _alone = self.in_flight.lock().expect("no transfer panicked");
            f()
        };
        self.paused.store(false, Ordering::Release);
        value
    }
}

#[test]
fn client_crash_mid_commit_releases_locks_and_keeps_the_bank_total() {
    let mut cluster = Cluster::start(0);
    for _ in 0..3 {
        cluster.add_server_with("127.0.0.1:0", &["--tx-recovery-timeout-ms", TIMEOUT_MS]);
    }
    let client = cluster.client();
    let table = client.create_table("bank", 3).expect("table");
    for i in 0..ACCOUNTS {
        client
            .write(table, &account(i), START.to_string().as_bytes())
            .expect("account");
    }
    let total = START * ACCOUNTS as i64;
    let map = client.tablet_map().expect("tablet map");

    // Concurrent transfers between random accounts, as the bank workload runs.
    let stop = Arc::new(AtomicBool::new(false));
    let transfers = Arc::new(AtomicU64::new(0));
    let pause = Arc::new(Pause::default());
    let worker = {
        let (stop, transfers, pause) = (stop.clone(), transfers.clone(), pause.clone());
        let client = cluster.client();
        thread::spawn(move || {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let from = n * 7 % ACCOUNTS;
                let to = (n * 13 + 5) % ACCOUNTS;
                if from != to
                    && pause.run(|| transfer(&client, table, from, to, (n % 9) as i64 + 1))
                {
                    transfers.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };

    for round in 0..4 {
        // Two accounts on different servers: a multi-server transaction.
        let from = round * 5 % ACCOUNTS;
        let to = (from + 1..from + ACCOUNTS)
            .map(|i| i % ACCOUNTS)
            .find(|&i| owner(&map, table, &account(i)) != owner(&map, table, &account(from)))
            .expect("accounts on two servers");
        let (a, b) = (account(from), account(to));
        crashed_transfer(&cluster, &a, &b);
        let crashed_at = Instant::now();
        let released = cluster.wait_until("the crashed client's locks", RELEASE_BOUND, || {
            unlocked(&client, table, &[&a, &b]).then(Instant::now)
        });
        eprintln!(
            "round {round}: locks released {:?} after the crash",
            released - crashed_at
        );
        let sum = pause.exclusive(|| snapshot(&client, table));
        assert_eq!(sum, total, "round {round}: after release");
    }

    stop.store(true, Ordering::Relaxed);
    worker.join().expect("transfers thread");
    assert!(
        transfers.load(Ordering::Relaxed) > 0,
        "transfers ran meanwhile"
    );
    assert_eq!(
        pause.exclusive(|| snapshot(&client, table)),
        total,
        "the end"
    );
    // Every account readable and the sum exact outside transactions too.
    let sum: i64 = (0..ACCOUNTS)
        .map(|i| balance(Some(client.read(table, &account(i)).expect("read").0)))
        .sum();
    assert_eq!(sum, total);
}
