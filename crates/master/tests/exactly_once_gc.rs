//! Garbage collection of completion records by lease expiry (RIFL §4.2): the
//! lease-expiry loop's view of the store (`client_leases_to_check`, then
//! `expire_client_lease` or `client_lease_is_live`), and the memory bound it
//! keeps over a long run of many short-lived clients.

use ramstore_master::rifl::{DEFAULT_EXPIRED_PER_SHARD, MAX_UNVERIFIED};
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};
use ramstore_wire::RpcId;

const TABLE: u64 = 1;
/// Shards of the completion-record table (`rifl::unacked`).
const SHARDS: usize = 16;

fn store(expired_per_shard: usize) -> ObjectStore {
    let mut cfg = StoreConfig::new(64 << 20);
    cfg.segment_bytes = 1 << 20;
    cfg.cleaner = CleanerMode::Manual;
    cfg.expired_leases_per_shard = expired_per_shard;
    let s = ObjectStore::new(cfg).expect("store");
    s.add_tablet(TABLE, 0, u64::MAX).expect("tablet");
    s
}

fn id(lease_id: u64, seq: u64) -> RpcId {
    RpcId {
        lease_id,
        seq,
        first_incomplete: 1,
    }
}

#[test]
fn client_leases_to_check_names_only_leases_idle_for_a_whole_round() {
    let s = store(DEFAULT_EXPIRED_PER_SHARD);
    let rules = RejectRules::default();
    s.write_once(TABLE, b"a", b"1", &rules, id(1, 1))
        .expect("write");
    s.write_once(TABLE, b"b", b"1", &rules, id(2, 1))
        .expect("write");
    assert!(
        s.client_leases_to_check().is_empty(),
        "both were used in this round"
    );
    s.write_once(TABLE, b"a", b"2", &rules, id(1, 2))
        .expect("write");
    assert_eq!(
        s.client_leases_to_check(),
        vec![2],
        "lease 1 was used since the last round"
    );
    let mut both = s.client_leases_to_check();
    both.sort_unstable();
    assert_eq!(both, vec![1, 2]);
}

#[test]
fn client_lease_is_live_keeps_the_records() {
    let s = store(DEFAULT_EXPIRED_PER_SHARD);
    let rules = RejectRules::default();
    let first = s
        .increment_i64_once(TABLE, b"c", 1, &rules, id(3, 1))
        .expect("increment");
    s.client_leases_to_check();
    assert_eq!(s.client_leases_to_check(), vec![3]);
    s.client_lease_is_live(3);
    assert_eq!(s.rpc_records(), 1);
    assert_eq!(
        s.increment_i64_once(TABLE, b"c", 1, &rules, id(3, 1)),
        Ok(first),
        "a live lease's retry still gets its first answer"
    );
}

/// The memory bound of issue 21: 10,000 clients, each with its own lease and
/// three exactly-once writes it never acknowledges, come and go in waves of
/// 1,000; the expiry loop drops each wave once the coordinator says its leases
/// expired. Stated bound: at any time at most one wave's records (3,000) are
/// kept; after the last wave none are, the leases table is empty, the log's
/// live bytes are those of the 64 objects alone (under 64 × 128 bytes; the
/// 30,000 records, about 2 MB, are all dead bytes for the cleaner), and the
/// expired ids remembered stay within 16 × (capacity + MAX_UNVERIFIED).
#[test]
fn expire_client_lease_keeps_records_and_live_bytes_bounded_over_many_leases() {
    const WAVES: u64 = 10;
    const CLIENTS: u64 = 1_000;
    const WRITES: u64 = 3;
    const KEYS: u64 = 64;
    const PER_SHARD: usize = 32;
    let s = store(PER_SHARD);
    let rules = RejectRules::default();
    let live_before = s.stats().log.live_object_bytes;
    let mut lease = 0;
    for wave in 0..WAVES {
        let first = lease + 1;
        for _ in 0..CLIENTS {
            lease += 1;
            for seq in 1..=WRITES {
                let key = ((lease * WRITES + seq) % KEYS).to_le_bytes();
                s.write_once(TABLE, &key, b"value", &rules, id(lease, seq))
                    .expect("write");
            }
        }
        assert!(s.rpc_records() <= (CLIENTS * WRITES) as usize);
        // The loop's next two rounds: the wave is idle by the second.
        s.client_leases_to_check();
        let mut idle = s.client_leases_to_check();
        idle.sort_unstable();
        assert_eq!(idle, (first..=lease).collect::<Vec<_>>(), "wave {wave}");
        for l in idle {
            s.expire_client_lease(l);
        }
        assert_eq!(s.rpc_records(), 0, "wave {wave}");
        assert!(s.remembered_expired_leases() <= SHARDS * (PER_SHARD + MAX_UNVERIFIED));
    }
    assert!(s.client_leases().is_empty());
    let live = s.stats().log.live_object_bytes - live_before;
    assert!(live < KEYS * 128, "{live} live bytes for {KEYS} objects");
    // A late retry of the newest wave is stale, not run again.
    assert_eq!(
        s.write_once(TABLE, b"late", b"v", &rules, id(lease, 1)),
        Err(WriteError::StaleRpc)
    );
}

/// Past the floor of remembered expired ids, a lease unknown here may be a
/// forgotten expired one: its RPCs wait (retryable) until the coordinator says.
#[test]
fn write_once_under_lease_below_floor_waits_for_the_coordinator() {
    let s = store(1);
    let rules = RejectRules::default();
    // Leases 32 and 48 share a shard (ids mod 16): with room for one expired
    // id there, expiring both forgets 32 and raises the floor to it.
    for lease in [32, 48] {
        s.write_once(TABLE, b"k", b"v", &rules, id(lease, 1))
            .expect("write");
        s.expire_client_lease(lease);
    }
    assert_eq!(
        s.write_once(TABLE, b"k", b"v", &rules, id(48, 1)),
        Err(WriteError::StaleRpc),
        "still remembered"
    );
    // Forgotten: it waits, and the loop asks about it; expired, it is stale.
    let forgotten = s.write_once(TABLE, b"k", b"again", &rules, id(32, 1));
    assert_eq!(forgotten, Err(WriteError::LeaseUnverified));
    assert!(forgotten.is_err_and(|e| e.is_retryable()));
    assert!(s.client_leases_to_check().contains(&32), "asked next round");
    s.expire_client_lease(32);
    assert_eq!(
        s.write_once(TABLE, b"k", b"again", &rules, id(32, 1)),
        Err(WriteError::StaleRpc)
    );
    // Learning 32 made room by forgetting 48 (the floor is now 48).
    // An old lease never seen here (16 < the floor) that is live: admitted once
    // the coordinator says so, and it runs.
    assert_eq!(
        s.write_once(TABLE, b"k", b"old", &rules, id(16, 1)),
        Err(WriteError::LeaseUnverified)
    );
    assert!(s.client_leases_to_check().contains(&16));
    s.client_lease_is_live(16);
    assert!(s.write_once(TABLE, b"k", b"old", &rules, id(16, 1)).is_ok());
    assert_eq!(s.rpc_records(), 1);
    // A lease above the floor is new at once.
    assert!(s.write_once(TABLE, b"k", b"new", &rules, id(64, 1)).is_ok());
}
