//! Multi-object transactions across real processes (SOSP'15 §6; issue 21): a
//! bank-transfer workload over three storage servers. Concurrent clients move
//! money between accounts with transactions and read every account inside
//! transactions; the total never changes in any committed snapshot nor at the end.

mod common;

use std::time::Duration;

use common::{runtime, Cluster};
use ramstore_client::{Client, ClientError, ClientOptions};

const ACCOUNTS: u64 = 24;
const START_BALANCE: i64 = 100;
const CLIENTS: u64 = 4;
const TRANSFERS_PER_CLIENT: u64 = 40;

fn account(i: u64) -> Vec<u8> {
    format!("account-{i}").into_bytes()
}

fn balance(value: Option<Vec<u8>>) -> i64 {
    let bytes = value.expect("every account exists");
    String::from_utf8(bytes)
        .expect("utf-8")
        .parse()
        .expect("a decimal balance")
}

async fn client(cluster: &Cluster) -> Client {
    Client::connect(ClientOptions {
        operation_deadline: Duration::from_secs(60),
        ..ClientOptions::new(cluster.addr())
    })
    .await
    .expect("client connects")
}

/// The total of every account, read in one transaction that must commit (its
/// reads' versions are checked): a consistent snapshot.
async fn snapshot_total(client: &Client, table: u64) -> Result<i64, ClientError> {
    client
        .run_transaction(50, |mut tx| async move {
            let mut total = 0;
            for i in 0..ACCOUNTS {
                total += balance(tx.read(table, &account(i)).await?);
            }
            Ok((tx, total))
        })
        .await
}

#[test]
fn bank_transfers_keep_the_total_in_every_snapshot_and_at_the_end() {
    let cluster = Cluster::start(3);
    let rt = runtime();
    rt.block_on(async {
        let admin = client(&cluster).await;
        let table = admin.create_table("bank", 3).await.expect("table");
        for i in 0..ACCOUNTS {
            admin
                .write(table, &account(i), START_BALANCE.to_string().as_bytes())
                .await
                .expect("open account");
        }
        let expected = START_BALANCE * ACCOUNTS as i64;
        let mut workers = Vec::new();
        for c in 0..CLIENTS {
            let client = client(&cluster).await;
            workers.push(tokio::spawn(async move {
                let mut snapshots = Vec::new();
                for n in 0..TRANSFERS_PER_CLIENT {
                    let from = (c * 7 + n * 5) % ACCOUNTS;
                    let to = (c * 3 + n * 11 + 1) % ACCOUNTS;
                    if from == to {
                        continue;
                    }
                    let amount = 1 + (n % 9) as i64;
                    client
                        .run_transaction(100, |mut tx| async move {
                            let a = balance(tx.read(table, &account(from)).await?);
                            let b = balance(tx.read(table, &account(to)).await?);
                            tx.write(table, &account(from), (a - amount).to_string().as_bytes())?;
                            tx.write(table, &account(to), (b + amount).to_string().as_bytes())?;
                            Ok((tx, ()))
                        })
                        .await
                        .expect("transfer commits within its attempts");
                    if n % 10 == 0 {
                        snapshots.push(snapshot_total(&client, table).await.expect("snapshot"));
                    }
                }
                snapshots
            }));
        }
        for w in workers {
            for total in w.await.expect("worker") {
                assert_eq!(total, expected, "a snapshot saw money appear or vanish");
            }
        }
        // At the end, plain reads (no transaction) agree, and no lock is left.
        let mut total = 0;
        for i in 0..ACCOUNTS {
            let (value, _) = admin.read(table, &account(i)).await.expect("read");
            total += balance(Some(value.clone()));
            admin
                .write(table, &account(i), &value)
                .await
                .expect("no account is left locked");
        }
        assert_eq!(total, expected);
    });
}

#[test]
fn transaction_aborts_when_a_read_version_changed() {
    let cluster = Cluster::start(2);
    let rt = runtime();
    rt.block_on(async {
        let c = client(&cluster).await;
        let table = c.create_table("t", 2).await.expect("table");
        c.write(table, b"x", b"1").await.expect("write");
        let mut tx = c.transaction();
        assert_eq!(
            tx.read(table, b"x").await.unwrap().as_deref(),
            Some(&b"1"[..])
        );
        tx.write(table, b"y", b"2").unwrap();
        // Another writer changes what the transaction read.
        c.write(table, b"x", b"changed").await.expect("write");
        assert_eq!(tx.commit().await, Err(ClientError::Aborted));
        // Nothing of the aborted transaction was applied.
        assert_eq!(
            c.read(table, b"y").await,
            Err(ClientError::ObjectDoesntExist)
        );
    });
}

#[test]
fn transaction_commit_applies_writes_and_removes_across_servers() {
    let cluster = Cluster::start(3);
    let rt = runtime();
    rt.block_on(async {
        let c = client(&cluster).await;
        let table = c.create_table("t", 3).await.expect("table");
        c.write(table, b"gone", b"x").await.expect("write");
        let mut tx = c.transaction();
        for i in 0..10u8 {
            tx.write(table, &[b'k', i], &[i]).unwrap();
        }
        tx.remove(table, b"gone").unwrap();
        tx.commit().await.expect("commit");
        for i in 0..10u8 {
            assert_eq!(c.read(table, &[b'k', i]).await.unwrap().0, vec![i]);
        }
        assert_eq!(
            c.read(table, b"gone").await,
            Err(ClientError::ObjectDoesntExist)
        );
    });
}
