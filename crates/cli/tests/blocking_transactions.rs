//! The blocking client's transactions (issue 21) against real servers: the same
//! guarantees as the async API (`tests/transactions.rs`) through
//! `BlockingClient::transaction` and `BlockingClient::run_transaction`.

mod common;

use std::time::Duration;

use common::Cluster;
use ramstore_client::{BlockingClient, ClientError};

fn counter(value: Option<Vec<u8>>) -> i64 {
    value.map_or(0, |v| {
        String::from_utf8(v)
            .expect("utf-8")
            .parse()
            .expect("a decimal counter")
    })
}

fn client(cluster: &Cluster) -> BlockingClient {
    BlockingClient::connect(cluster.options(Duration::from_secs(60))).expect("client connects")
}

#[test]
fn blocking_transaction_commit_applies_writes_and_removes_across_servers() {
    let cluster = Cluster::start(3);
    let c = client(&cluster);
    let table = c.create_table("t", 3).expect("table");
    c.write(table, b"gone", b"x").expect("write");
    let mut tx = c.transaction();
    for i in 0..8u8 {
        tx.write(table, &[b'k', i], &[i]).expect("buffered");
    }
    tx.remove(table, b"gone").expect("buffered");
    // The transaction sees its own buffered changes; the store does not yet.
    assert_eq!(tx.read(table, &[b'k', 3]).expect("read"), Some(vec![3]));
    assert_eq!(tx.read(table, b"gone").expect("read"), None);
    assert_eq!(c.read(table, b"gone").expect("still there").0, b"x");
    tx.commit().expect("commit");
    for i in 0..8u8 {
        assert_eq!(c.read(table, &[b'k', i]).expect("read").0, vec![i]);
    }
    assert_eq!(c.read(table, b"gone"), Err(ClientError::ObjectDoesntExist));
}

#[test]
fn blocking_transaction_commit_aborts_when_a_read_version_changed() {
    let cluster = Cluster::start(2);
    let c = client(&cluster);
    let table = c.create_table("t", 2).expect("table");
    let version = c.write(table, b"x", b"1").expect("write");
    let mut tx = c.transaction();
    assert_eq!(
        tx.read_with_version(table, b"x").expect("read"),
        (Some(b"1".to_vec()), version)
    );
    assert_eq!(
        tx.read_with_version(table, b"absent").expect("read"),
        (None, 0)
    );
    tx.write(table, b"y", b"2").expect("buffered");
    c.write(table, b"x", b"changed").expect("write");
    assert_eq!(tx.commit(), Err(ClientError::Aborted));
    assert_eq!(c.read(table, b"y"), Err(ClientError::ObjectDoesntExist));
}

#[test]
fn blocking_run_transaction_retries_aborts_so_no_increment_is_lost() {
    const THREADS: usize = 4;
    const INCREMENTS: usize = 15;
    let cluster = Cluster::start(2);
    let admin = client(&cluster);
    let table = admin.create_table("t", 2).expect("table");
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let c = client(&cluster);
            s.spawn(move || {
                for _ in 0..INCREMENTS {
                    // Two counters on (likely) different servers move together.
                    c.run_transaction(200, |tx| {
                        let a = counter(tx.read(table, b"a")?);
                        let b = counter(tx.read(table, b"b")?);
                        tx.write(table, b"a", (a + 1).to_string().as_bytes())?;
                        tx.write(table, b"b", (b - 1).to_string().as_bytes())?;
                        Ok(())
                    })
                    .expect("the increment commits within its attempts");
                }
            });
        }
    });
    let total = (THREADS * INCREMENTS) as i64;
    let a = counter(Some(admin.read(table, b"a").expect("a").0));
    let b = counter(Some(admin.read(table, b"b").expect("b").0));
    assert_eq!((a, b), (total, -total), "an increment was lost or doubled");
}

#[test]
fn blocking_run_transaction_returns_the_body_error_without_committing() {
    let cluster = Cluster::start(1);
    let c = client(&cluster);
    let table = c.create_table("t", 1).expect("table");
    let mut runs = 0;
    let r: Result<(), ClientError> = c.run_transaction(5, |tx| {
        runs += 1;
        tx.write(table, b"k", b"v")?;
        Err(ClientError::InvalidRequest("the body gave up".into()))
    });
    assert!(matches!(r, Err(ClientError::InvalidRequest(_))), "{r:?}");
    assert_eq!(runs, 1, "a body error is not retried");
    assert_eq!(c.read(table, b"k"), Err(ClientError::ObjectDoesntExist));
}

/// Regression (CI, stop 33): past the operation deadline the back-off sleeps
/// nothing, and `run_transaction` burned its remaining attempts in a tight
/// loop. It now returns the last `Aborted` once the deadline has passed.
#[test]
fn blocking_run_transaction_stops_retrying_at_the_operation_deadline() {
    const ATTEMPTS: u32 = 5_000;
    let cluster = Cluster::start(1);
    let c = BlockingClient::connect(cluster.options(Duration::from_secs(1))).expect("client");
    let other = client(&cluster);
    let table = c.create_table("t", 1).expect("table");
    let mut runs = 0u32;
    // Every attempt conflicts: another client changes what the body read.
    let r: Result<(), ClientError> = c.run_transaction(ATTEMPTS, |tx| {
        runs += 1;
        tx.read(table, b"x")?;
        other
            .write(table, b"x", &runs.to_be_bytes())
            .expect("write");
        tx.write(table, b"y", b"never")?;
        Ok(())
    });
    assert_eq!(r, Err(ClientError::Aborted));
    assert!(
        runs < ATTEMPTS,
        "stopped at the deadline, not after every attempt ({runs} runs)"
    );
    assert!(runs >= 2, "retried within the deadline ({runs} runs)");
    assert_eq!(c.read(table, b"y"), Err(ClientError::ObjectDoesntExist));
}
