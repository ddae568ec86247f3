//! The client against an in-process fake cluster (see `common/mod.rs`): every
//! operation, routing and fan-out across masters, and the retries that mask tablet
//! moves, RETRY, NO_SPACE, SERVER_NOT_UP and dead servers.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{FakeCluster, Inject, COORDINATOR};
use ramstore_client::{
    key_hash, BlockingClient, Client, ClientError, ClientOptions, MultiRemoveOp, MultiWriteOp,
    RejectRules,
};
use ramstore_wire::{Opcode, RpcId, Status};

fn options() -> ClientOptions {
    ClientOptions {
        rpc_deadline: Duration::from_millis(200),
        operation_deadline: Duration::from_secs(5),
        ..ClientOptions::new(COORDINATOR)
    }
}

fn short_options() -> ClientOptions {
    ClientOptions {
        rpc_deadline: Duration::from_millis(50),
        operation_deadline: Duration::from_millis(300),
        ..ClientOptions::new(COORDINATOR)
    }
}

async fn client(cluster: &FakeCluster, options: ClientOptions) -> Client {
    Client::with_transport(options, Arc::new(cluster.transport.clone()))
        .await
        .expect("connects")
}

fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("key-{i}").into_bytes()).collect()
}

#[tokio::test]
async fn single_object_operations_round_trip() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 2).await.unwrap();
    assert_eq!(c.create_table("t", 2).await.unwrap(), t, "idempotent");
    assert_eq!(c.get_table_id("t").await.unwrap(), t);
    assert_eq!(
        c.get_table_id("nope").await,
        Err(ClientError::TableDoesntExist)
    );

    // Write, read, overwrite.
    let v1 = c.write(t, b"alice", b"30").await.unwrap();
    assert_eq!(c.read(t, b"alice").await.unwrap(), (b"30".to_vec(), v1));
    let v2 = c.write(t, b"alice", b"31").await.unwrap();
    assert!(v2 > v1);
    assert_eq!(c.read(t, b"bob").await, Err(ClientError::ObjectDoesntExist));

    // Conditional operations.
    assert_eq!(
        c.write_with_rules(t, b"alice", b"x", &RejectRules::version_must_equal(v1))
            .await,
        Err(ClientError::WrongVersion { current: v2 })
    );
    let v3 = c
        .write_with_rules(t, b"alice", b"32", &RejectRules::version_must_equal(v2))
        .await
        .unwrap();
    assert_eq!(
        c.write_with_rules(t, b"alice", b"x", &RejectRules::must_not_exist())
            .await,
        Err(ClientError::ObjectExists)
    );
    assert_eq!(
        c.write_with_rules(t, b"bob", b"x", &RejectRules::must_exist())
            .await,
        Err(ClientError::ObjectDoesntExist)
    );
    assert_eq!(
        c.read_with_rules(t, b"alice", &RejectRules::version_must_be_at_most(v2))
            .await,
        Err(ClientError::WrongVersion { current: v3 })
    );
    assert_eq!(
        c.read_with_rules(t, b"alice", &RejectRules::version_must_equal(v3))
            .await
            .unwrap(),
        (b"32".to_vec(), v3)
    );

    // Remove.
    assert_eq!(
        c.remove_with_rules(t, b"alice", &RejectRules::version_must_equal(v2))
            .await,
        Err(ClientError::WrongVersion { current: v3 })
    );
    assert_eq!(c.remove(t, b"alice").await.unwrap(), Some(v3));
    assert_eq!(c.remove(t, b"alice").await.unwrap(), None);
    assert_eq!(
        c.remove_with_rules(t, b"alice", &RejectRules::must_exist())
            .await,
        Err(ClientError::ObjectDoesntExist)
    );

    // Increments.
    let (n, iv1) = c.increment_i64(t, b"hits", 5).await.unwrap();
    assert_eq!(n, 5);
    let (n, iv2) = c.increment_i64(t, b"hits", -7).await.unwrap();
    assert_eq!(n, -2);
    assert!(iv2 > iv1);
    assert_eq!(
        c.read(t, b"hits").await.unwrap(),
        ((-2i64).to_le_bytes().to_vec(), iv2)
    );
    assert_eq!(
        c.increment_i64(t, b"hits", i64::MAX).await.unwrap().0,
        i64::MAX - 2
    );
    assert_eq!(
        c.increment_i64(t, b"hits", 3).await,
        Err(ClientError::Overflow)
    );
    assert_eq!(c.increment_f64(t, b"f", 1.5).await.unwrap().0, 1.5);
    assert_eq!(c.increment_f64(t, b"f", -0.25).await.unwrap().0, 1.25);
    c.write(t, b"text", b"hello").await.unwrap();
    assert_eq!(
        c.increment_i64(t, b"text", 1).await,
        Err(ClientError::NotNumeric)
    );

    // Limits are checked before sending.
    let huge_key = vec![0u8; 70_000];
    assert!(matches!(
        c.write(t, &huge_key, b"v").await,
        Err(ClientError::TooLarge(_))
    ));
    let huge_value = vec![0u8; 1024 * 1024 + 1];
    assert!(matches!(
        c.write(t, b"k", &huge_value).await,
        Err(ClientError::TooLarge(_))
    ));

    // An id no table has.
    assert_eq!(
        c.read(t + 100, b"k").await,
        Err(ClientError::TableDoesntExist)
    );

    // Tablet map, split, stats, ping.
    let map = c.tablet_map().await.unwrap();
    assert_eq!(map.iter().filter(|x| x.table_id == t).count(), 2);
    c.split_tablet("t", 12345).await.unwrap();
    let map = c.tablet_map().await.unwrap();
    assert_eq!(map.iter().filter(|x| x.table_id == t).count(), 3);
    assert!(map
        .iter()
        .any(|x| x.table_id == t && x.start_hash == 12345 && x.end_hash > 12345));
    assert_eq!(c.tablet_map_version(), cluster.map_version());
    let stats = c.server_stats("master-1").await.unwrap();
    assert!(stats.starts_with("objects="), "{stats}");
    let reply = c.ping("master-2").await.unwrap();
    assert_eq!(reply.server_id, 2);
    assert!(matches!(
        c.ping("nowhere").await,
        Err(ClientError::DeadlineExceeded { .. })
    ));

    // Drop.
    c.drop_table("t").await.unwrap();
    assert_eq!(c.drop_table("t").await, Err(ClientError::TableDoesntExist));
    assert_eq!(c.read(t, b"hits").await, Err(ClientError::TableDoesntExist));
    assert_eq!(
        c.write(t, b"hits", b"1").await,
        Err(ClientError::TableDoesntExist)
    );
}

#[tokio::test]
async fn a_warm_map_costs_one_call_per_operation() {
    let cluster = FakeCluster::new(1);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    c.write(t, b"k", b"v").await.unwrap(); // warms the map
    let maps = cluster.map_requests();
    let m = &cluster.masters[0];
    let (reads, writes) = (m.requests(Opcode::Read), m.requests(Opcode::Write));
    for _ in 0..10 {
        c.write(t, b"k", b"v").await.unwrap();
        c.read(t, b"k").await.unwrap();
    }
    assert_eq!(m.requests(Opcode::Read), reads + 10);
    assert_eq!(m.requests(Opcode::Write), writes + 10);
    assert_eq!(cluster.map_requests(), maps);
}

#[tokio::test]
async fn multi_ops_go_to_every_master_in_parallel_and_keep_the_callers_order() {
    let cluster = FakeCluster::new(3);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 3).await.unwrap();
    let keys = keys(60);
    let owners: HashSet<usize> = keys.iter().map(|k| cluster.owner_of(t, k)).collect();
    assert_eq!(owners.len(), 3, "the keys spread over all masters");
    for m in &cluster.masters {
        m.set_slow_multi(30);
    }

    let values: Vec<Vec<u8>> = (0..keys.len())
        .map(|i| format!("v{i}").into_bytes())
        .collect();
    let ops: Vec<MultiWriteOp> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| MultiWriteOp::new(t, k, v))
        .collect();
    let versions: Vec<u64> = c
        .multi_write(&ops)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for m in &cluster.masters {
        assert_eq!(m.requests(Opcode::MultiWrite), 1, "one request per master");
    }
    assert_eq!(
        cluster.masters[0].max_in_flight(),
        3,
        "the three requests were in flight together"
    );
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(
            c.read(t, k).await.unwrap(),
            (values[i].clone(), versions[i])
        );
    }

    // Reads in the caller's order, with a missing object and a missing table.
    let mut items: Vec<(u64, &[u8])> = keys.iter().rev().map(|k| (t, k.as_slice())).collect();
    items.insert(7, (t, b"missing"));
    items.push((t + 50, b"no-table"));
    let results = c.multi_read(&items).await;
    assert_eq!(results.len(), items.len());
    for (i, (item, result)) in items.iter().zip(&results).enumerate() {
        if item.1 == b"missing" {
            assert_eq!(result, &Err(ClientError::ObjectDoesntExist));
        } else if item.0 != t {
            assert_eq!(result, &Err(ClientError::TableDoesntExist));
        } else {
            let k = keys.iter().position(|k| k == item.1).unwrap();
            assert_eq!(result, &Ok((values[k].clone(), versions[k])), "item {i}");
        }
    }

    // A failed condition affects only its item.
    let ops = [
        MultiWriteOp::new(t, &keys[0], b"new"),
        MultiWriteOp::new(t, &keys[1], b"new").with_rules(RejectRules::must_not_exist()),
        MultiWriteOp::new(t, &keys[2], b"new")
            .with_rules(RejectRules::version_must_equal(versions[2] + 1000)),
    ];
    let r = c.multi_write(&ops).await;
    assert!(r[0].is_ok());
    assert_eq!(r[1], Err(ClientError::ObjectExists));
    assert_eq!(
        r[2],
        Err(ClientError::WrongVersion {
            current: versions[2]
        })
    );

    // Removes.
    let removes: Vec<MultiRemoveOp> = keys[3..]
        .iter()
        .map(|k| MultiRemoveOp::new(t, k))
        .chain([MultiRemoveOp::new(t, b"missing")])
        .collect();
    let r = c.multi_remove(&removes).await;
    for (i, v) in r[..keys.len() - 3].iter().enumerate() {
        assert_eq!(v, &Ok(Some(versions[i + 3])));
    }
    assert_eq!(r.last(), Some(&Ok(None)));
    let total: usize = cluster.masters.iter().map(|m| m.object_count()).sum();
    assert_eq!(total, 3);
    assert!(c.multi_read(&[]).await.is_empty());
}

#[tokio::test]
async fn unknown_tablet_refreshes_the_map_then_succeeds() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    let v = c.write(t, b"k", b"v").await.unwrap();
    let from = cluster.owner_of(t, b"k");
    let to = 1 - from;
    let maps = cluster.map_requests();

    cluster.move_tablet(t, key_hash(b"k"), to);
    assert_eq!(c.read(t, b"k").await.unwrap(), (b"v".to_vec(), v));
    assert_eq!(cluster.map_requests(), maps + 1, "one refresh");
    assert_eq!(cluster.masters[from].requests(Opcode::Read), 1);
    assert_eq!(cluster.masters[to].requests(Opcode::Read), 1);
    assert_eq!(c.tablet_map_version(), cluster.map_version());

    // And writes follow the tablet too.
    cluster.move_tablet(t, key_hash(b"k"), from);
    assert!(c.write(t, b"k", b"w").await.unwrap() > v);
    assert_eq!(cluster.map_requests(), maps + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_refreshes_are_coalesced() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    c.write(t, b"k", b"v").await.unwrap();
    let to = 1 - cluster.owner_of(t, b"k");
    cluster.move_tablet(t, key_hash(b"k"), to);
    cluster.set_slow_map(50);
    let maps = cluster.map_requests();

    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.read(t, b"k").await })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap().unwrap().0, b"v");
    }
    assert_eq!(cluster.map_requests(), maps + 1, "one GetTabletMap for all");
}

#[tokio::test]
async fn the_map_never_goes_backwards() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    c.tablet_map().await.unwrap();
    let version = c.tablet_map_version();
    let old_owner = c.tablet_map().await.unwrap()[0].address.clone();

    // A lagging coordinator reports an older version (with a different map).
    cluster.move_tablet(t, 0, 1 - cluster.owner_of(t, b"k"));
    cluster.report_map_version(Some(version - 1));
    let map = c.tablet_map().await.unwrap();
    assert_eq!(c.tablet_map_version(), version);
    assert_eq!(map[0].address, old_owner);

    cluster.report_map_version(None);
    let map = c.tablet_map().await.unwrap();
    assert!(c.tablet_map_version() > version);
    assert_ne!(map[0].address, old_owner);
}

#[tokio::test]
async fn multi_ops_retry_moved_and_retried_items() {
    let cluster = FakeCluster::new(3);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 3).await.unwrap();
    let keys = keys(30);
    let ops: Vec<MultiWriteOp> = keys.iter().map(|k| MultiWriteOp::new(t, k, k)).collect();
    let versions: Vec<u64> = c
        .multi_write(&ops)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();

    // Move one tablet: its items come back UNKNOWN_TABLET, the rest succeed.
    let moved = cluster.owner_of(t, &keys[0]);
    cluster.move_tablet(t, key_hash(&keys[0]), (moved + 1) % 3);
    // And another master answers a few items RETRY.
    cluster.masters[(moved + 2) % 3].retry_items(2);
    let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (t, k.as_slice())).collect();
    for (i, r) in c.multi_read(&items).await.into_iter().enumerate() {
        assert_eq!(r, Ok((keys[i].clone(), versions[i])));
    }

    // Per-item RETRY on writes and removes too.
    for m in &cluster.masters {
        m.retry_items(3);
    }
    for r in c.multi_write(&ops).await {
        r.unwrap();
    }
    for m in &cluster.masters {
        m.retry_items(1);
    }
    let removes: Vec<MultiRemoveOp> = keys.iter().map(|k| MultiRemoveOp::new(t, k)).collect();
    for r in c.multi_remove(&removes).await {
        assert!(r.unwrap().is_some());
    }
}

#[tokio::test]
async fn retry_no_space_and_server_not_up_are_retried_until_success() {
    let cluster = FakeCluster::new(1);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    let m = &cluster.masters[0];

    m.inject(&[
        Inject::Retry(5),
        Inject::Status(Status::NoSpace),
        Inject::Retry(1),
        Inject::Status(Status::NoSpace),
    ]);
    let start = Instant::now();
    let v = c.write(t, b"k", b"v").await.unwrap();
    assert!(start.elapsed() >= Duration::from_millis(5), "RETRY's delay");
    assert_eq!(m.requests(Opcode::Write), 5);

    let maps = cluster.map_requests();
    m.inject(&[Inject::Status(Status::ServerNotUp)]);
    assert_eq!(c.read(t, b"k").await.unwrap(), (b"v".to_vec(), v));
    assert_eq!(m.requests(Opcode::Read), 2);
    assert_eq!(cluster.map_requests(), maps + 1, "SERVER_NOT_UP refreshes");

    // A whole multi-op answered RETRY is resent.
    m.inject(&[Inject::Retry(2)]);
    assert_eq!(
        c.multi_read(&[(t, b"k")]).await,
        vec![Ok((b"v".to_vec(), v))]
    );
    assert_eq!(m.requests(Opcode::MultiRead), 2);

    // RETRY for ever: the deadline ends it, saying why.
    let c = client(&cluster, short_options()).await;
    m.inject(&[Inject::Status(Status::NoSpace); 10_000]);
    match c.write(t, b"k", b"v").await {
        Err(ClientError::DeadlineExceeded { last_attempt, .. }) => {
            assert!(last_attempt.contains("NO_SPACE"), "{last_attempt}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_dead_master_gives_deadline_exceeded_after_the_operation_deadline() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, short_options()).await;
    let t = c.create_table("t", 2).await.unwrap();
    let keys = keys(20);
    for k in &keys {
        c.write(t, k, b"v").await.unwrap();
    }
    let dead = cluster.owner_of(t, &keys[0]);
    cluster.transport.unregister(&cluster.masters[dead].addr);

    let start = Instant::now();
    match c.read(t, &keys[0]).await {
        Err(ClientError::DeadlineExceeded {
            elapsed,
            last_attempt,
        }) => {
            assert!(elapsed >= Duration::from_millis(300));
            assert!(
                last_attempt.contains(&cluster.masters[dead].addr),
                "{last_attempt}"
            );
        }
        other => panic!("{other:?}"),
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");

    // In a multi-op only the dead master's items fail.
    let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (t, k.as_slice())).collect();
    for (k, r) in keys.iter().zip(c.multi_read(&items).await) {
        if cluster.owner_of(t, k) == dead {
            assert!(
                matches!(r, Err(ClientError::DeadlineExceeded { .. })),
                "{r:?}"
            );
        } else {
            assert_eq!(r.unwrap().0, b"v");
        }
    }

    // The coordinator moves the dead master's tablets: the client follows.
    cluster.move_tablet(t, key_hash(&keys[0]), 1 - dead);
    assert_eq!(c.read(t, &keys[0]).await.unwrap().0, b"v");
}

#[tokio::test]
async fn an_unreachable_coordinator_is_reported_clearly() {
    let transport = ramstore_rpc::LocalTransport::new();
    let err = Client::with_transport(short_options(), Arc::new(transport))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::CoordinatorUnreachable(_)));
    assert!(
        err.to_string()
            .starts_with("cannot reach coordinator at coordinator"),
        "{err}"
    );

    // A coordinator that goes away later: table operations give up at the
    // deadline and say so; object operations with a warm map still work.
    let cluster = FakeCluster::new(1);
    let c = client(&cluster, short_options()).await;
    let t = c.create_table("t", 1).await.unwrap();
    c.write(t, b"k", b"v").await.unwrap();
    cluster.transport.unregister(COORDINATOR);
    let err = c.create_table("u", 1).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot reach coordinator at coordinator"),
        "{err}"
    );
    assert_eq!(c.read(t, b"k").await.unwrap().0, b"v");
}

#[tokio::test]
async fn coordinator_list_moves_on_to_the_next_address() {
    // An active coordinator and a standby (R§9): the standby does not listen yet.
    let cluster = FakeCluster::new(2);
    let options = ClientOptions {
        rpc_deadline: Duration::from_millis(200),
        operation_deadline: Duration::from_secs(5),
        ..ClientOptions::new(format!("standby, {COORDINATOR}"))
    };
    assert_eq!(options.coordinator_addrs(), vec!["standby", COORDINATOR]);
    // Connecting skips the silent first address.
    let c = client(&cluster, options.clone()).await;
    let t = c.create_table("t", 2).await.unwrap();
    c.write(t, b"k", b"v").await.unwrap();
    // Failover: the active one dies and the standby takes over with the same state.
    cluster.transport.unregister(COORDINATOR);
    cluster
        .transport
        .register("standby", cluster.coordinator.clone());
    assert_eq!(c.create_table("u", 1).await.unwrap(), t + 1);
    assert_eq!(c.get_table_id("t").await.unwrap(), t);
    assert_eq!(c.tablet_map().await.unwrap().len(), 3);
    assert_eq!(c.read(t, b"k").await.unwrap().0, b"v");
    // With neither answering, giving up names the whole list.
    cluster.transport.unregister("standby");
    let short = ClientOptions {
        operation_deadline: Duration::from_millis(300),
        ..options
    };
    let err = Client::with_transport(short, Arc::new(cluster.transport.clone()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot reach coordinator at standby, {COORDINATOR}"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn enumeration_returns_every_object_once_across_masters() {
    let cluster = FakeCluster::new(3);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 3).await.unwrap();
    let other = c.create_table("other", 3).await.unwrap();
    c.split_tablet("t", 1 << 20).await.unwrap();
    c.split_tablet("t", u64::MAX / 2).await.unwrap();
    cluster.move_tablet(t, 1 << 20, 2);
    for m in &cluster.masters {
        m.set_enumerate_batch_bytes(100);
    }
    let keys = keys(200);
    let ops: Vec<MultiWriteOp> = keys.iter().map(|k| MultiWriteOp::new(t, k, k)).collect();
    let versions: Vec<u64> = c
        .multi_write(&ops)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    c.write(other, b"not-in-t", b"x").await.unwrap();

    let mut seen = HashSet::new();
    let mut e = c.enumerate(t);
    while let Some(object) = e.next().await {
        let object = object.unwrap();
        let i = keys.iter().position(|k| *k == object.key).unwrap();
        assert_eq!(object.value, keys[i]);
        assert_eq!(object.version, versions[i]);
        assert!(seen.insert(object.key), "returned twice");
    }
    assert_eq!(seen.len(), keys.len());
    assert!(e.next().await.is_none());
    let batches: usize = cluster
        .masters
        .iter()
        .map(|m| m.requests(Opcode::Enumerate))
        .sum();
    assert!(batches > 5, "{batches} batches");
    for m in &cluster.masters {
        assert!(m.requests(Opcode::Enumerate) > 0);
    }

    // An empty table, and one that does not exist.
    let empty = c.create_table("empty", 2).await.unwrap();
    assert!(c.enumerate(empty).next().await.is_none());
    let mut e = c.enumerate(9999);
    assert_eq!(
        e.next().await.map(|r| r.map(|o| o.key)),
        Some(Err(ClientError::TableDoesntExist))
    );
    assert!(e.next().await.is_none());
}

#[tokio::test]
async fn enumeration_follows_a_tablet_that_moves_midway() {
    let cluster = FakeCluster::new(2);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 2).await.unwrap();
    for m in &cluster.masters {
        m.set_enumerate_batch_bytes(50);
    }
    let keys = keys(50);
    for k in &keys {
        c.write(t, k, b"v").await.unwrap();
    }
    let mut e = c.enumerate(t);
    let mut seen = HashSet::new();
    let first = e.next().await.unwrap().unwrap();
    seen.insert(first.key);
    // Move the tablet at the end of the hash space to the other master.
    let from = c
        .tablet_map()
        .await
        .unwrap()
        .into_iter()
        .find(|x| x.table_id == t && x.end_hash == u64::MAX)
        .map(|x| x.server_id as usize - 1)
        .unwrap();
    let maps = cluster.map_requests();
    cluster.move_tablet(t, u64::MAX, 1 - from);
    while let Some(object) = e.next().await {
        assert!(seen.insert(object.unwrap().key), "returned twice");
    }
    assert_eq!(seen.len(), keys.len());
    assert_eq!(cluster.map_requests(), maps + 1, "the move was noticed");
}

#[test]
fn the_blocking_client_works_without_a_runtime() {
    let cluster = FakeCluster::new(2);
    let c = BlockingClient::with_transport(options(), Arc::new(cluster.transport.clone()))
        .expect("connects");
    let t = c.create_table("t", 2).unwrap();
    assert_eq!(c.get_table_id("t").unwrap(), t);
    let v = c.write(t, b"k", b"v").unwrap();
    assert_eq!(c.read(t, b"k").unwrap(), (b"v".to_vec(), v));
    assert_eq!(
        c.write_with_rules(t, b"k", b"w", &RejectRules::must_not_exist()),
        Err(ClientError::ObjectExists)
    );
    assert_eq!(c.increment_i64(t, b"n", 2).unwrap().0, 2);
    let keys = keys(20);
    let ops: Vec<MultiWriteOp> = keys.iter().map(|k| MultiWriteOp::new(t, k, k)).collect();
    assert!(c.multi_write(&ops).iter().all(Result::is_ok));
    let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (t, k.as_slice())).collect();
    for (k, r) in keys.iter().zip(c.multi_read(&items)) {
        assert_eq!(&r.unwrap().0, k);
    }
    let all: Vec<_> = c.enumerate(t).collect::<Result<_, _>>().unwrap();
    assert_eq!(all.len(), keys.len() + 2);
    let removes: Vec<MultiRemoveOp> = keys.iter().map(|k| MultiRemoveOp::new(t, k)).collect();
    assert!(c.multi_remove(&removes).iter().all(|r| r.is_ok()));
    assert_eq!(c.remove(t, b"k").unwrap(), Some(v));
    assert_eq!(c.enumerate(t).count(), 1);
    assert_eq!(c.ping("master-1").unwrap().server_id, 1);
    assert!(c.tablet_map().unwrap().len() >= 2);
    c.drop_table("t").unwrap();
    assert_eq!(c.read(t, b"n"), Err(ClientError::TableDoesntExist));
}

#[test]
fn futures_and_handles_are_send() {
    fn send<T: Send>(_: &T) {}
    fn sync<T: Send + Sync>() {}
    sync::<Client>();
    sync::<BlockingClient>();
    let cluster = FakeCluster::new(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(client(&cluster, options()));
    let key = b"k".as_slice();
    send(&c.read(1, key));
    send(&c.write(1, key, key));
    send(&c.increment_f64(1, key, 1.0));
    send(&c.multi_read(&[(1, key)]));
    send(&c.multi_write(&[MultiWriteOp::new(1, key, key)]));
    send(&c.multi_remove(&[MultiRemoveOp::new(1, key)]));
    send(&c.create_table("t", 1));
    send(&c.tablet_map());
    send(&c.ping("master-1"));
    let mut e = c.enumerate(1);
    send(&e.next());
    send(&e);
}

/// Issue 21 (RIFL §4: each object's op is its own RPC): with exactly-once on,
/// every item of a multi-write and a multi-remove carries its own sequence
/// number, distinct from every other item's, and keeps it when a master
/// answers it RETRY and it is sent again; with exactly-once off none does.
#[tokio::test]
async fn multi_ops_keep_each_items_rpc_id_across_retries() {
    let cluster = FakeCluster::new(3);
    let c = client(&cluster, options()).await;
    let t = c.create_table("t", 3).await.unwrap();
    let keys = keys(20);
    let ops: Vec<MultiWriteOp> = keys.iter().map(|k| MultiWriteOp::new(t, k, k)).collect();
    for m in &cluster.masters {
        m.retry_items(3);
    }
    assert!(c.multi_write(&ops).await.into_iter().all(|r| r.is_ok()));
    let removes: Vec<MultiRemoveOp> = keys.iter().map(|k| MultiRemoveOp::new(t, k)).collect();
    for m in &cluster.masters {
        m.retry_items(2);
    }
    assert!(c
        .multi_remove(&removes)
        .await
        .into_iter()
        .all(|r| r.is_ok()));
    let sent: Vec<(Vec<u8>, Option<RpcId>)> =
        cluster.masters.iter().flat_map(|m| m.multi_ids()).collect();
    assert!(sent.len() > 2 * keys.len(), "some items were sent again");
    let mut seq_of: HashMap<u64, Vec<u8>> = HashMap::new();
    for (key, id) in &sent {
        let id = id.expect("every item carries an rpc id");
        // One key per sequence number, whatever the attempt.
        let owner = seq_of.entry(id.seq).or_insert_with(|| key.clone());
        assert_eq!(owner, key, "seq {} used for two keys", id.seq);
        assert!(id.first_incomplete <= id.seq);
    }
    // Each key's write and remove: two numbers per key, however many sends.
    assert_eq!(seq_of.len(), 2 * keys.len(), "one number per op");

    let off = client(
        &cluster,
        ClientOptions {
            exactly_once: false,
            ..options()
        },
    )
    .await;
    let before = cluster
        .masters
        .iter()
        .map(|m| m.multi_ids().len())
        .sum::<usize>();
    assert!(off.multi_write(&ops).await.into_iter().all(|r| r.is_ok()));
    let new: Vec<_> = cluster.masters.iter().flat_map(|m| m.multi_ids()).collect();
    assert_eq!(new.len(), before + keys.len());
    assert_eq!(
        cluster
            .masters
            .iter()
            .flat_map(|m| m.multi_ids())
            .filter(|(_, id)| id.is_none())
            .count(),
        keys.len(),
        "at-least-once items carry no id"
    );
}
