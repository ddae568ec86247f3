//! A tablet being filled by crash recovery (R§7.6) is written only by replay and
//! served only once the coordinator hands it over (regression: a restarted
//! server served a partly replayed tablet and returned an overwritten version).

use ramstore_master::{ObjectStore, ReadError, RejectRules, StoreConfig, WriteError};

fn store() -> ObjectStore {
    ObjectStore::new(StoreConfig::new(16 << 20)).unwrap()
}

#[test]
fn add_recovering_tablet_serves_replay_only_until_taken() {
    let s = store();
    s.add_recovering_tablet(1, 0, u64::MAX).unwrap();
    // Idempotent while recovering.
    s.add_recovering_tablet(1, 0, u64::MAX).unwrap();
    assert!(s.replay_object(1, b"k", b"v1", 1).unwrap());
    assert!(s.replay_object(1, b"k", b"v2", 2).unwrap());
    assert!(
        !s.replay_object(1, b"k", b"old", 1).unwrap(),
        "older version skipped"
    );
    let mut v = Vec::new();
    assert_eq!(s.read(1, b"k", &mut v), Err(ReadError::UnknownTablet));
    assert_eq!(
        s.write(1, b"k", b"client", &RejectRules::default()),
        Err(WriteError::UnknownTablet)
    );
    assert_eq!(
        s.remove(1, b"k", &RejectRules::default()),
        Err(WriteError::UnknownTablet)
    );
    let mut batch = Vec::new();
    assert_eq!(
        s.enumerate(1, 0, 1 << 20, &mut batch),
        Err(ReadError::UnknownTablet)
    );

    s.take_tablet(1, 0, u64::MAX).unwrap();
    assert_eq!(s.read(1, b"k", &mut v), Ok(2));
    assert_eq!(v, b"v2");
    assert!(
        s.write(1, b"k", b"client", &RejectRules::default())
            .unwrap()
            > 2
    );
}

#[test]
fn replay_tombstone_kills_only_versions_up_to_its_own() {
    let s = store();
    s.add_recovering_tablet(1, 0, u64::MAX).unwrap();
    assert!(s.replay_object(1, b"a", b"x", 3).unwrap());
    assert!(
        !s.replay_tombstone(1, b"a", 2).unwrap(),
        "newer object survives"
    );
    assert!(s.replay_tombstone(1, b"a", 3).unwrap());
    s.take_tablet(1, 0, u64::MAX).unwrap();
    let mut v = Vec::new();
    assert_eq!(s.read(1, b"a", &mut v), Err(ReadError::ObjectDoesntExist));
}

#[test]
fn add_recovering_tablet_refuses_a_range_already_served() {
    let s = store();
    s.add_tablet(1, 0, 99).unwrap();
    assert!(s.add_recovering_tablet(1, 0, 99).is_err());
    assert!(s.add_recovering_tablet(1, 50, 200).is_err());
    s.add_recovering_tablet(1, 100, 200).unwrap();
}
