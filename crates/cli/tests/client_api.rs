//! Every operation of the Rust client against real processes: a coordinator and two
//! storage servers on 127.0.0.1, each its own `ramstore` process.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::Cluster;
use ramstore_client::{
    key_hash, BlockingClient, ClientError, ClientOptions, MultiRemoveOp, MultiWriteOp, RejectRules,
    TabletInfo,
};

/// Hashes below this are in the first tablet of a span-2 table, the rest in the
/// second (the coordinator splits the hash space into equal ranges).
const HALF: u64 = 1 << 63;

/// `n` keys, about half of them in each tablet of a span-2 table.
fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .collect()
}

/// A key whose hash lies in `[lo, hi]`.
fn key_in(prefix: &str, lo: u64, hi: u64) -> Vec<u8> {
    (0..)
        .map(|i| format!("{prefix}-{i}").into_bytes())
        .find(|k| (lo..=hi).contains(&key_hash(k)))
        .expect("some key hashes into the range")
}

/// The tablets of `table`, sorted by start hash.
fn tablets_of(client: &BlockingClient, table: u64) -> Vec<TabletInfo> {
    let mut t: Vec<_> = client
        .tablet_map()
        .expect("tablet map")
        .into_iter()
        .filter(|t| t.table_id == table)
        .collect();
    t.sort_by_key(|t| t.start_hash);
    t
}

/// The server id owning `key` of `table`.
fn owner(tablets: &[TabletInfo], key: &[u8]) -> u64 {
    let h = key_hash(key);
    tablets
        .iter()
        .find(|t| (t.start_hash..=t.end_hash).contains(&h))
        .map(|t| t.server_id)
        .expect("a tablet covers every hash")
}

/// A `key=value` field of a stats text.
fn stat(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

/// Every object of `table` as key → (value, version), failing on duplicates.
fn enumerate_all(client: &BlockingClient, table: u64) -> HashMap<Vec<u8>, (Vec<u8>, u64)> {
    let mut all = HashMap::new();
    for object in client.enumerate(table) {
        let o = object.expect("enumeration succeeds");
        let key = o.key.clone();
        assert!(
            all.insert(o.key, (o.value, o.version)).is_none(),
            "{:?} enumerated twice",
            String::from_utf8_lossy(&key)
        );
    }
    all
}

/// Tables: create (idempotent, two tablets on two different servers), look up,
/// drop (also as seen by a client whose map still has the table), re-create under a
/// new id, and the coordinator's refusals (bad name, span over the limit).
#[test]
fn tables_create_get_drop_span_two() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("users", 2).unwrap();
    assert_eq!(c.create_table("users", 2).unwrap(), t, "idempotent by name");
    assert_eq!(c.create_table("users", 7).unwrap(), t, "whatever the span");
    assert_eq!(c.get_table_id("users").unwrap(), t);

    let tablets = tablets_of(&c, t);
    assert_eq!(tablets.len(), 2, "{tablets:?}");
    assert_eq!(tablets[0].start_hash, 0);
    assert_eq!(tablets[0].end_hash + 1, tablets[1].start_hash);
    assert_eq!(tablets[1].end_hash, u64::MAX);
    let owners: HashSet<u64> = tablets.iter().map(|t| t.server_id).collect();
    let servers: HashSet<u64> = cluster.servers.iter().map(|s| s.id).collect();
    assert_eq!(owners, servers, "one tablet on each server");
    for tablet in &tablets {
        let server = cluster
            .servers
            .iter()
            .find(|s| s.id == tablet.server_id)
            .expect("owner is one of ours");
        assert_eq!(tablet.address, server.addr);
    }

    c.write(t, b"alice", b"30").unwrap();
    let stale = cluster.client(); // its map has the table
    assert_eq!(stale.read(t, b"alice").unwrap().0, b"30");

    c.drop_table("users").unwrap();
    assert_eq!(c.get_table_id("users"), Err(ClientError::TableDoesntExist));
    assert_eq!(c.drop_table("users"), Err(ClientError::TableDoesntExist));
    assert_eq!(c.read(t, b"alice"), Err(ClientError::TableDoesntExist));
    let started = Instant::now();
    assert_eq!(
        stale.read(t, b"alice"),
        Err(ClientError::TableDoesntExist),
        "a stale map leads to a refresh, not to a retry until the deadline"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(tablets_of(&c, t).is_empty());

    let t2 = c.create_table("users", 2).unwrap();
    assert!(t2 > t, "table ids are never reused ({t2} after {t})");
    assert_eq!(c.read(t2, b"alice"), Err(ClientError::ObjectDoesntExist));

    assert!(matches!(
        c.create_table("", 1),
        Err(ClientError::InvalidRequest(m)) if m.contains("name")
    ));
    assert!(matches!(
        c.create_table(&"n".repeat(256), 1),
        Err(ClientError::InvalidRequest(_))
    ));
    assert!(matches!(
        c.create_table("wide", 1025),
        Err(ClientError::InvalidRequest(m)) if m.contains("span")
    ));
    assert_eq!(c.get_table_id("wide"), Err(ClientError::TableDoesntExist));
}

/// Single objects: write, read, overwrite (versions grow), remove (returns the
/// removed version; a second remove finds nothing), empty and binary keys and
/// values, and objects landing on both servers.
#[test]
fn objects_read_write_remove_round_trip() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();

    assert_eq!(c.read(t, b"alice"), Err(ClientError::ObjectDoesntExist));
    let v1 = c.write(t, b"alice", b"30").unwrap();
    assert_eq!(c.read(t, b"alice").unwrap(), (b"30".to_vec(), v1));
    let v2 = c.write(t, b"alice", b"31").unwrap();
    assert!(v2 > v1);
    assert_eq!(c.read(t, b"alice").unwrap(), (b"31".to_vec(), v2));
    assert_eq!(c.remove(t, b"alice").unwrap(), Some(v2));
    assert_eq!(c.read(t, b"alice"), Err(ClientError::ObjectDoesntExist));
    assert_eq!(c.remove(t, b"alice").unwrap(), None);
    let v3 = c.write(t, b"alice", b"32").unwrap();
    assert!(
        v3 > v2,
        "a re-created object's version is above the removed one's"
    );

    let binary_key = [0u8, 255, 10, 13, 0];
    let binary_value: Vec<u8> = (0..=255).collect();
    let v = c.write(t, &binary_key, &binary_value).unwrap();
    assert_eq!(c.read(t, &binary_key).unwrap(), (binary_value, v));
    let v = c.write(t, b"empty", b"").unwrap();
    assert_eq!(c.read(t, b"empty").unwrap(), (Vec::new(), v));
    let v = c.write(t, b"", b"empty key").unwrap();
    assert_eq!(c.read(t, b"").unwrap(), (b"empty key".to_vec(), v));

    // Objects on both masters, each readable through the same client.
    let low = key_in("low", 0, HALF - 1);
    let high = key_in("high", HALF, u64::MAX);
    let vl = c.write(t, &low, b"L").unwrap();
    let vh = c.write(t, &high, b"H").unwrap();
    assert_eq!(c.read(t, &low).unwrap(), (b"L".to_vec(), vl));
    assert_eq!(c.read(t, &high).unwrap(), (b"H".to_vec(), vh));
    let tablets = tablets_of(&c, t);
    assert_ne!(owner(&tablets, &low), owner(&tablets, &high));
    for server in &cluster.servers {
        let stats = c.server_stats(&server.addr).unwrap();
        let objects: u64 = stat(&stats, "objects").unwrap().parse().unwrap();
        assert!(objects >= 1, "server {} holds objects: {stats}", server.id);
    }
}

/// Conditional reads, writes and removes: each reject rule refuses exactly when it
/// should (with the current version for version rules) and lets the operation
/// through otherwise; version rules do not apply to a missing object.
#[test]
fn conditional_operations_honour_each_reject_rule() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    fn wrong<T>(current: u64) -> Result<T, ClientError> {
        Err(ClientError::WrongVersion { current })
    }

    // doesnt_exist: "object must exist".
    assert_eq!(
        c.write_with_rules(t, b"k", b"x", &RejectRules::must_exist()),
        Err(ClientError::ObjectDoesntExist)
    );
    assert_eq!(c.read(t, b"k"), Err(ClientError::ObjectDoesntExist));
    // exists: "object must not exist" (create-only).
    let v1 = c
        .write_with_rules(t, b"k", b"a", &RejectRules::must_not_exist())
        .unwrap();
    assert_eq!(
        c.write_with_rules(t, b"k", b"b", &RejectRules::must_not_exist()),
        Err(ClientError::ObjectExists)
    );
    let v2 = c
        .write_with_rules(t, b"k", b"b", &RejectRules::must_exist())
        .unwrap();
    assert!(v2 > v1);

    // version_ne_given: compare-and-swap.
    assert_eq!(
        c.write_with_rules(t, b"k", b"c", &RejectRules::version_must_equal(v1)),
        wrong(v2)
    );
    let v3 = c
        .write_with_rules(t, b"k", b"c", &RejectRules::version_must_equal(v2))
        .unwrap();
    assert_eq!(
        c.write_with_rules(t, b"nope", b"c", &RejectRules::version_must_equal(v3)),
        Err(ClientError::ObjectDoesntExist),
        "compare-and-swap also requires the object to exist"
    );

    // version_le_given.
    let le = |given| RejectRules {
        given_version: given,
        version_le_given: true,
        ..RejectRules::default()
    };
    assert_eq!(c.write_with_rules(t, b"k", b"d", &le(v3)), wrong(v3));
    assert_eq!(c.write_with_rules(t, b"k", b"d", &le(v3 + 5)), wrong(v3));
    let v4 = c.write_with_rules(t, b"k", b"d", &le(v3 - 1)).unwrap();

    // version_gt_given.
    assert_eq!(
        c.write_with_rules(t, b"k", b"e", &RejectRules::version_must_be_at_most(v4 - 1)),
        wrong(v4)
    );
    let v5 = c
        .write_with_rules(t, b"k", b"e", &RejectRules::version_must_be_at_most(v4))
        .unwrap();
    // Version rules alone do not apply to a missing object.
    c.write_with_rules(t, b"fresh", b"1", &RejectRules::version_must_be_at_most(0))
        .unwrap();
    c.write_with_rules(t, b"fresh2", b"1", &le(u64::MAX))
        .unwrap();
    assert_eq!(c.read(t, b"k").unwrap(), (b"e".to_vec(), v5));

    // The same rules on reads.
    assert_eq!(
        c.read_with_rules(t, b"k", &RejectRules::version_must_equal(v4)),
        wrong(v5)
    );
    assert_eq!(
        c.read_with_rules(t, b"k", &RejectRules::version_must_equal(v5))
            .unwrap(),
        (b"e".to_vec(), v5)
    );
    assert_eq!(
        c.read_with_rules(t, b"k", &RejectRules::must_not_exist()),
        Err(ClientError::ObjectExists)
    );
    assert_eq!(
        c.read_with_rules(t, b"gone", &RejectRules::must_exist()),
        Err(ClientError::ObjectDoesntExist)
    );

    // And on removes: a refused remove leaves the object alone.
    assert_eq!(
        c.remove_with_rules(t, b"k", &RejectRules::version_must_equal(v4)),
        wrong(v5)
    );
    assert_eq!(
        c.remove_with_rules(t, b"k", &RejectRules::must_not_exist()),
        Err(ClientError::ObjectExists)
    );
    assert_eq!(
        c.remove_with_rules(t, b"gone", &RejectRules::must_exist()),
        Err(ClientError::ObjectDoesntExist)
    );
    assert_eq!(c.read(t, b"k").unwrap(), (b"e".to_vec(), v5));
    assert_eq!(
        c.remove_with_rules(t, b"k", &RejectRules::version_must_equal(v5)),
        Ok(Some(v5))
    );
    assert_eq!(c.read(t, b"k"), Err(ClientError::ObjectDoesntExist));
}

/// Increments: a missing object counts as 0, i64 and f64 values add up (and are
/// stored as decimal text, as Redis stores counters), a value that is not a number
/// in decimal text is NotNumeric, and i64 overflow or a non-finite f64 is Overflow
/// (leaving the value unchanged).
#[test]
fn increments_add_up_and_refuse_non_numbers_and_overflow() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();

    let (n, v1) = c.increment_i64(t, b"hits", 5).unwrap();
    assert_eq!(n, 5);
    let (n, v2) = c.increment_i64(t, b"hits", -7).unwrap();
    assert_eq!(n, -2);
    assert!(v2 > v1);
    assert_eq!(c.read(t, b"hits").unwrap(), (b"-2".to_vec(), v2));

    let (x, _) = c.increment_f64(t, b"balance", 2.5).unwrap();
    assert_eq!(x, 2.5);
    let (x, v) = c.increment_f64(t, b"balance", -0.25).unwrap();
    assert_eq!(x, 2.25);
    assert_eq!(c.read(t, b"balance").unwrap(), (b"2.25".to_vec(), v));

    // Counters on both servers.
    for key in [key_in("c", 0, HALF - 1), key_in("c", HALF, u64::MAX)] {
        for i in 1..=10 {
            assert_eq!(c.increment_i64(t, &key, 1).unwrap().0, i);
        }
    }

    c.write(t, b"text", b"abc").unwrap();
    assert_eq!(c.increment_i64(t, b"text", 1), Err(ClientError::NotNumeric));
    assert_eq!(
        c.increment_f64(t, b"text", 1.0),
        Err(ClientError::NotNumeric)
    );
    // The 8-byte binary counters of ramstore before 0.2 are not numbers now.
    c.write(t, b"binary", &7i64.to_le_bytes()).unwrap();
    assert_eq!(
        c.increment_i64(t, b"binary", 1),
        Err(ClientError::NotNumeric)
    );
    assert_eq!(c.read(t, b"text").unwrap().0, b"abc");
    // Text written by a plain write is a counter.
    c.write(t, b"nine", b"123456789").unwrap();
    assert_eq!(c.increment_i64(t, b"nine", 1).unwrap().0, 123456790);

    c.write(t, b"max", i64::MAX.to_string().as_bytes()).unwrap();
    assert_eq!(c.increment_i64(t, b"max", 1), Err(ClientError::Overflow));
    assert_eq!(c.increment_i64(t, b"max", 0).unwrap().0, i64::MAX);
    let (m, _) = c.increment_i64(t, b"min", i64::MIN).unwrap();
    assert_eq!(m, i64::MIN);
    assert_eq!(c.increment_i64(t, b"min", -1), Err(ClientError::Overflow));

    c.increment_f64(t, b"big", f64::MAX).unwrap();
    assert_eq!(
        c.increment_f64(t, b"big", f64::MAX),
        Err(ClientError::Overflow)
    );
    assert_eq!(
        c.increment_f64(t, b"nan", f64::NAN),
        Err(ClientError::Overflow)
    );
    assert_eq!(
        c.read(t, b"big").unwrap().0,
        format!("{}", f64::MAX).into_bytes()
    );
    assert_eq!(c.read(t, b"nan"), Err(ClientError::ObjectDoesntExist));
}

/// Multi-read, multi-write and multi-remove of objects spread over both servers:
/// one result per item in the caller's order, each item failing or succeeding on
/// its own (missing objects, reject rules, unknown tables).
#[test]
fn multi_operations_span_both_servers() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let keys = keys("multi", 300);
    let tablets = tablets_of(&c, t);
    let owners: HashSet<u64> = keys.iter().map(|k| owner(&tablets, k)).collect();
    assert_eq!(owners.len(), 2, "the keys span both servers");

    let values: Vec<Vec<u8>> = (0..keys.len())
        .map(|i| format!("value-{i}").into_bytes())
        .collect();
    let ops: Vec<MultiWriteOp<'_>> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| MultiWriteOp::new(t, k, v))
        .collect();
    let versions: Vec<u64> = c
        .multi_write(&ops)
        .into_iter()
        .map(|r| r.expect("write succeeds"))
        .collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(c.read(t, k).unwrap(), (values[i].clone(), versions[i]));
    }

    // Reads in the caller's order, with a missing object and an unknown table mixed in.
    let mut items: Vec<(u64, &[u8])> = keys.iter().rev().map(|k| (t, k.as_slice())).collect();
    items.insert(7, (t, b"missing"));
    items.push((t + 1000, b"x"));
    let results = c.multi_read(&items);
    assert_eq!(results.len(), items.len());
    for (item, result) in items.iter().zip(&results) {
        match keys.iter().position(|k| k.as_slice() == item.1) {
            Some(i) if item.0 == t => assert_eq!(result, &Ok((values[i].clone(), versions[i]))),
            _ if item.0 == t => assert_eq!(result, &Err(ClientError::ObjectDoesntExist)),
            _ => assert_eq!(result, &Err(ClientError::TableDoesntExist)),
        }
    }

    // Conditional multi-write: create-only fails on existing objects only;
    // compare-and-swap succeeds with the right version only.
    let new_key = b"multi-new".to_vec();
    let ops = vec![
        MultiWriteOp::new(t, &keys[0], b"no").with_rules(RejectRules::must_not_exist()),
        MultiWriteOp::new(t, &new_key, b"yes").with_rules(RejectRules::must_not_exist()),
        MultiWriteOp::new(t, &keys[1], b"cas")
            .with_rules(RejectRules::version_must_equal(versions[1])),
        MultiWriteOp::new(t, &keys[2], b"cas")
            .with_rules(RejectRules::version_must_equal(versions[2] + 1000)),
        MultiWriteOp::new(t + 1000, b"x", b"y"),
    ];
    let results = c.multi_write(&ops);
    assert_eq!(results[0], Err(ClientError::ObjectExists));
    assert!(results[1].is_ok(), "{results:?}");
    assert!(results[2].as_ref().is_ok_and(|v| *v > versions[1]));
    assert_eq!(
        results[3],
        Err(ClientError::WrongVersion {
            current: versions[2]
        })
    );
    assert_eq!(results[4], Err(ClientError::TableDoesntExist));
    assert_eq!(c.read(t, &keys[0]).unwrap().0, values[0]);
    assert_eq!(c.read(t, &keys[1]).unwrap().0, b"cas");
    assert_eq!(c.read(t, &keys[2]).unwrap().0, values[2]);
    assert_eq!(c.read(t, &new_key).unwrap().0, b"yes");

    // Multi-remove: the removed versions, None for missing objects, rules per item.
    let half = &keys[3..150];
    let mut ops: Vec<MultiRemoveOp<'_>> = half.iter().map(|k| MultiRemoveOp::new(t, k)).collect();
    ops.push(MultiRemoveOp::new(t, b"missing"));
    ops.push(
        MultiRemoveOp::new(t, &keys[200]).with_rules(RejectRules::version_must_equal(1_000_000)),
    );
    let results = c.multi_remove(&ops);
    for (i, result) in results[..half.len()].iter().enumerate() {
        assert_eq!(result, &Ok(Some(versions[i + 3])));
    }
    assert_eq!(results[half.len()], Ok(None));
    assert_eq!(
        results[half.len() + 1],
        Err(ClientError::WrongVersion {
            current: versions[200]
        })
    );
    let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (t, k.as_slice())).collect();
    let results = c.multi_read(&items);
    for (i, result) in results.iter().enumerate() {
        if (3..150).contains(&i) {
            assert_eq!(result, &Err(ClientError::ObjectDoesntExist), "key {i}");
        } else {
            assert!(result.is_ok(), "key {i}: {result:?}");
        }
    }
    assert!(c.multi_read(&[]).is_empty());
    assert!(c.multi_write(&[]).is_empty());
    assert!(c.multi_remove(&[]).is_empty());
}

/// Enumeration returns every object of the table exactly once, with its value and
/// version, across both servers and over many batches; other tables' objects and
/// removed objects are not returned; an empty table enumerates to nothing.
#[test]
fn enumeration_returns_every_object_once() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let other = c.create_table("other", 2).unwrap();
    assert!(enumerate_all(&c, t).is_empty());

    // ~1 MiB in all: several 256 KiB batches per server.
    let keys = keys("e", 1000);
    let value = |i: usize| vec![(i % 251) as u8; 1000 + i % 100];
    let mut expected = HashMap::new();
    for (n, chunk) in keys.chunks(100).enumerate() {
        let values: Vec<Vec<u8>> = (0..chunk.len()).map(|i| value(n * 100 + i)).collect();
        let ops: Vec<_> = chunk
            .iter()
            .zip(&values)
            .map(|(k, v)| MultiWriteOp::new(t, k, v))
            .collect();
        for ((k, v), r) in chunk.iter().zip(&values).zip(c.multi_write(&ops)) {
            expected.insert(k.clone(), (v.clone(), r.unwrap()));
        }
    }
    c.write(other, b"e-1", b"other table").unwrap();
    c.write(t, b"removed", b"x").unwrap();
    c.remove(t, b"removed").unwrap();

    let all = enumerate_all(&c, t);
    assert_eq!(all.len(), expected.len());
    assert!(all == expected, "enumeration matches what was written");
    let others = enumerate_all(&c, other);
    assert_eq!(others.len(), 1);
    assert_eq!(others[&b"e-1".to_vec()].0, b"other table");
}

/// Splitting tablets (inside each server's tablet, at an existing boundary, and
/// twice at the same hash) keeps every object readable and writable where it is,
/// and enumeration still returns every object exactly once.
#[test]
fn split_tablets_keep_reads_writes_and_enumeration_working() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let new_keys = keys("new", 100);
    let keys = keys("s", 400);
    let ops: Vec<_> = keys.iter().map(|k| MultiWriteOp::new(t, k, k)).collect();
    for r in c.multi_write(&ops) {
        r.unwrap();
    }
    let before = tablets_of(&c, t);
    let stale = cluster.client(); // keeps the two-tablet map until told otherwise

    for split in [
        1u64 << 62,
        3 << 62,
        3 << 62,
        HALF,
        0,
        (1 << 62) + 12345,
        1,
        u64::MAX,
    ] {
        c.split_tablet("t", split).unwrap();
    }
    let after = tablets_of(&c, t);
    let starts: Vec<u64> = after.iter().map(|t| t.start_hash).collect();
    assert_eq!(
        starts,
        vec![0, 1, 1 << 62, (1 << 62) + 12345, HALF, 3 << 62, u64::MAX]
    );
    for w in after.windows(2) {
        assert_eq!(w[0].end_hash + 1, w[1].start_hash, "contiguous: {after:?}");
    }
    assert_eq!(after.last().unwrap().end_hash, u64::MAX);
    // Splitting does not move data: each piece stays with the old owner.
    for piece in &after {
        let old = before
            .iter()
            .find(|o| (o.start_hash..=o.end_hash).contains(&piece.start_hash))
            .unwrap();
        assert_eq!(piece.server_id, old.server_id);
    }
    assert_eq!(
        c.split_tablet("nope", 5),
        Err(ClientError::TableDoesntExist)
    );

    for client in [&c, &stale] {
        for k in &keys {
            assert_eq!(&client.read(t, k).unwrap().0, k);
        }
    }
    for (i, k) in keys.iter().enumerate().step_by(3) {
        let client = if i % 2 == 0 { &c } else { &stale };
        client.write(t, k, b"rewritten").unwrap();
    }
    for (i, k) in keys.iter().enumerate().skip(1).step_by(7) {
        c.remove(t, k).unwrap();
        assert_eq!(c.read(t, k), Err(ClientError::ObjectDoesntExist), "key {i}");
    }
    for k in &new_keys {
        stale.write(t, k, b"new").unwrap();
    }
    let mut expected: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for (i, k) in keys.iter().enumerate() {
        if i % 7 == 1 {
            continue;
        }
        let v = if i % 3 == 0 {
            b"rewritten".to_vec()
        } else {
            k.clone()
        };
        expected.insert(k.clone(), v);
    }
    for k in new_keys {
        expected.insert(k, b"new".to_vec());
    }
    for client in [&c, &stale] {
        let all = enumerate_all(client, t);
        let got: HashMap<Vec<u8>, Vec<u8>> = all.into_iter().map(|(k, (v, _))| (k, v)).collect();
        assert_eq!(got.len(), expected.len());
        assert!(
            got == expected,
            "enumeration after splits returns everything once"
        );
    }
}

/// Keys up to 65,535 bytes and values up to 1 MiB are stored; one byte more is
/// refused as TooLarge by every operation that carries it, and the cluster is fine
/// afterwards.
#[test]
fn oversize_keys_and_values_are_too_large() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("t", 2).unwrap();
    let max_key = vec![b'k'; 65_535];
    let max_value = vec![7u8; 1 << 20];
    let v = c.write(t, &max_key, &max_value).unwrap();
    assert_eq!(c.read(t, &max_key).unwrap(), (max_value.clone(), v));
    let all = enumerate_all(&c, t);
    assert_eq!(all[&max_key], (max_value.clone(), v));

    let big_key = vec![b'k'; 65_536];
    let big_value = vec![7u8; (1 << 20) + 1];
    let too_large = |r: Result<_, ClientError>| matches!(r, Err(ClientError::TooLarge(_)));
    assert!(too_large(c.write(t, &big_key, b"v").map(|_| ())));
    assert!(too_large(c.write(t, b"k", &big_value).map(|_| ())));
    assert!(too_large(c.read(t, &big_key).map(|_| ())));
    assert!(too_large(c.remove(t, &big_key).map(|_| ())));
    assert!(too_large(c.increment_i64(t, &big_key, 1).map(|_| ())));
    assert!(too_large(c.increment_f64(t, &big_key, 1.0).map(|_| ())));
    let results = c.multi_write(&[
        MultiWriteOp::new(t, b"ok", b"fine"),
        MultiWriteOp::new(t, b"k", &big_value),
        MultiWriteOp::new(t, &big_key, b"v"),
    ]);
    assert!(results[0].is_ok(), "{results:?}");
    assert!(too_large(results[1].clone().map(|_| ())), "{results:?}");
    assert!(too_large(results[2].clone().map(|_| ())), "{results:?}");
    let results = c.multi_read(&[(t, big_key.as_slice()), (t, b"ok")]);
    assert!(too_large(results[0].clone().map(|_| ())), "{results:?}");
    assert_eq!(results[1].as_ref().unwrap().0, b"fine");
    assert!(too_large(
        c.multi_remove(&[MultiRemoveOp::new(t, &big_key)])[0]
            .clone()
            .map(|_| ())
    ));
    assert_eq!(c.read(t, b"k"), Err(ClientError::ObjectDoesntExist));
    assert_eq!(c.read(t, &max_key).unwrap().1, v);
}

/// Every operation on a table that does not exist fails with TableDoesntExist
/// promptly (not by retrying until the deadline).
#[test]
fn unknown_tables_are_table_doesnt_exist() {
    let cluster = Cluster::start(2);
    let c = BlockingClient::connect(cluster.options(Duration::from_secs(5))).unwrap();
    let started = Instant::now();
    let missing = 424_242;
    let no: Result<(), ClientError> = Err(ClientError::TableDoesntExist);
    assert_eq!(c.get_table_id("nope").map(|_| ()), no);
    assert_eq!(c.drop_table("nope"), no);
    assert_eq!(c.split_tablet("nope", 1), no);
    assert_eq!(c.read(missing, b"k").map(|_| ()), no);
    assert_eq!(c.write(missing, b"k", b"v").map(|_| ()), no);
    assert_eq!(
        c.write_with_rules(missing, b"k", b"v", &RejectRules::must_exist())
            .map(|_| ()),
        no
    );
    assert_eq!(c.remove(missing, b"k").map(|_| ()), no);
    assert_eq!(c.increment_i64(missing, b"k", 1).map(|_| ()), no);
    assert_eq!(c.increment_f64(missing, b"k", 1.0).map(|_| ()), no);
    assert_eq!(c.multi_read(&[(missing, b"k")])[0].clone().map(|_| ()), no);
    assert_eq!(
        c.multi_write(&[MultiWriteOp::new(missing, b"k", b"v")])[0]
            .clone()
            .map(|_| ()),
        no
    );
    assert_eq!(
        c.multi_remove(&[MultiRemoveOp::new(missing, b"k")])[0]
            .clone()
            .map(|_| ()),
        no
    );
    let mut e = c.enumerate(missing);
    assert_eq!(e.next().map(|r| r.map(|_| ())), Some(no));
    assert!(e.next().is_none(), "an enumeration ends after its error");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "answered without waiting for the deadline ({:?})",
        started.elapsed()
    );
}

/// Ping and GetServerStats reach each process directly: servers answer with the id
/// they printed at start-up, the coordinator with 0; their stats identify them.
#[test]
fn ping_and_stats_identify_each_process() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    for server in &cluster.servers {
        assert_eq!(c.ping(&server.addr).unwrap().server_id, server.id);
        let stats = c.server_stats(&server.addr).unwrap();
        assert_eq!(stat(&stats, "server_id"), Some(server.id.to_string()));
        assert_eq!(stat(&stats, "durability").as_deref(), Some("dram-only"));
        assert_eq!(
            stat(&stats, "memory_bytes"),
            Some((64u64 << 20).to_string())
        );
    }
    assert_eq!(c.ping(cluster.addr()).unwrap().server_id, 0);
    let stats = c.server_stats(cluster.addr()).unwrap();
    assert_eq!(stat(&stats, "role").as_deref(), Some("coordinator"));
    for server in &cluster.servers {
        let entry = stat(&stats, &format!("server.{}", server.id)).expect("listed");
        assert!(
            entry.starts_with(&format!("{} up ", server.addr)),
            "{entry}"
        );
    }
}

/// A client pointed at a storage server instead of the coordinator is told so at
/// once (the server answers INVALID_REQUEST "this is a storage server"); it must not
/// retry that permanent refusal until the operation deadline.
#[test]
fn connect_to_a_storage_server_address_fails_fast() {
    let cluster = Cluster::start(1);
    let options = ClientOptions {
        operation_deadline: Duration::from_secs(4),
        ..ClientOptions::new(cluster.servers[0].addr.clone())
    };
    let started = Instant::now();
    let result = BlockingClient::connect(options);
    let elapsed = started.elapsed();
    let err = result.expect_err("a storage server is not a coordinator");
    assert!(
        matches!(&err, ClientError::InvalidRequest(m) if m.contains("storage server")),
        "expected InvalidRequest naming the mistake, got {err:?} after {elapsed:?}"
    );
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

/// Multi-operations beyond one frame: twelve 1 MiB values (12 MiB, more than the
/// 8 MiB frame limit) written, read back (the server answers the values past its
/// response budget RETRY and the client asks again) and enumerated; and 5,000 small
/// objects (more than the 4,096 items of one request) in one call each.
#[test]
fn multi_operations_beyond_one_frame_are_split_and_complete() {
    let cluster = Cluster::start(2);
    let c = cluster.client();
    let t = c.create_table("big", 1).unwrap();
    let many = keys("many", 5000);
    let keys = keys("mib", 12);
    let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| vec![i as u8; 1 << 20]).collect();
    let ops: Vec<_> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| MultiWriteOp::new(t, k, v))
        .collect();
    let versions: Vec<u64> = c
        .multi_write(&ops)
        .into_iter()
        .map(|r| r.expect("1 MiB write"))
        .collect();
    let items: Vec<(u64, &[u8])> = keys.iter().map(|k| (t, k.as_slice())).collect();
    for (i, r) in c.multi_read(&items).into_iter().enumerate() {
        let (value, version) = r.unwrap_or_else(|e| panic!("read {i}: {e}"));
        assert!(value == values[i], "value {i}");
        assert_eq!(version, versions[i]);
    }
    let all = enumerate_all(&c, t);
    assert_eq!(all.len(), keys.len());
    for (i, k) in keys.iter().enumerate() {
        assert!(all[k] == (values[i].clone(), versions[i]), "object {i}");
    }
    let removed = c.multi_remove(
        &keys
            .iter()
            .map(|k| MultiRemoveOp::new(t, k))
            .collect::<Vec<_>>(),
    );
    assert!(
        removed.iter().all(|r| matches!(r, Ok(Some(_)))),
        "{removed:?}"
    );

    let u = c.create_table("many", 2).unwrap();
    let ops: Vec<_> = many.iter().map(|k| MultiWriteOp::new(u, k, k)).collect();
    assert!(c.multi_write(&ops).iter().all(Result::is_ok));
    let items: Vec<(u64, &[u8])> = many.iter().map(|k| (u, k.as_slice())).collect();
    let results = c.multi_read(&items);
    assert_eq!(results.len(), many.len());
    for (k, r) in many.iter().zip(results) {
        assert_eq!(&r.unwrap().0, k);
    }
    let ops: Vec<_> = many.iter().map(|k| MultiRemoveOp::new(u, k)).collect();
    assert!(c
        .multi_remove(&ops)
        .iter()
        .all(|r| matches!(r, Ok(Some(_)))));
    assert!(enumerate_all(&c, u).is_empty());
}
