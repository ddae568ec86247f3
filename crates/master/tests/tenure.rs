//! A tablet's ctime (design notes "Tablet ctime", issue 20): a master starting
//! a tenure of a range begins a new head if a drop happened while the current
//! one was open, so every entry it appends for the range from then on is in a
//! segment at or above the tablet's ctime, and every entry of an earlier
//! tenure of the range is below it.

use ramstore_master::{ObjectStore, RejectRules, StoreConfig};

fn store() -> ObjectStore {
    ObjectStore::new(StoreConfig::new(16 << 20)).unwrap()
}

#[test]
fn begin_tenure_without_a_drop_keeps_the_head() {
    let s = store();
    s.add_tablet(1, 0, u64::MAX).unwrap();
    s.write(1, b"k", b"v", &RejectRules::default()).unwrap();
    let head = s.log().head_segment_id();
    assert_eq!(s.tenure_floor(), head);
    assert_eq!(
        s.begin_tenure().unwrap(),
        head,
        "no earlier tenure to cut off"
    );
}

#[test]
fn begin_tenure_after_a_drop_opens_a_head_above_every_earlier_segment() {
    let s = store();
    s.add_tablet(1, 0, u64::MAX).unwrap();
    s.write(1, b"k", b"v", &RejectRules::default()).unwrap();
    let old_head = s.log().head_segment_id();
    s.drop_tablet(1, 0, u64::MAX);
    let floor = s.tenure_floor();
    assert!(floor > old_head);
    let ctime = s.begin_tenure().unwrap();
    assert!(
        ctime > old_head,
        "the head holding the dropped entries is closed"
    );
    assert!(ctime >= floor, "the coordinator's lower bound holds");
    assert_eq!(s.log().head_segment_id(), ctime);
    // Once the head is above the drop, the next tenure needs no roll.
    assert_eq!(s.begin_tenure().unwrap(), ctime);
}

#[test]
fn add_migrating_tablet_starts_its_tenure_in_a_new_head() {
    let s = store();
    // The range's earlier tenure here left its entries in the current head.
    s.add_tablet(2, 0, u64::MAX).unwrap();
    s.write(2, b"gone", b"stale", &RejectRules::default())
        .unwrap();
    s.drop_tablet(2, 0, u64::MAX);
    let recorded = s.tenure_floor();
    let stale_head = s.log().head_segment_id();
    assert!(s.add_migrating_tablet(2, 0, u64::MAX, 10).unwrap());
    let ctime = s.tablet_ctime(2, 0, u64::MAX).expect("the tablet is here");
    assert!(
        ctime > stale_head,
        "ctime {ctime} must be above the stale head {stale_head}"
    );
    assert!(
        ctime >= recorded,
        "ctime {ctime} below the recorded {recorded}"
    );
    // Resent: the same tenure, no new head.
    assert!(s.add_migrating_tablet(2, 0, u64::MAX, 10).unwrap());
    assert_eq!(s.tablet_ctime(2, 0, u64::MAX), Some(ctime));
}

#[test]
fn add_recovering_tablet_takes_the_tenure_begun_for_it() {
    let s = store();
    let ctime = s.begin_tenure().unwrap();
    s.add_recovering_tablet(1, 0, 99).unwrap();
    assert_eq!(s.tablet_ctime(1, 0, 99), Some(ctime));
    assert_eq!(
        s.tablet_ctime(1, 0, 98),
        None,
        "only an exact range has one"
    );
}

#[test]
fn add_tablet_split_pieces_inherit_the_ctime() {
    let s = store();
    s.add_tablet(1, 0, u64::MAX).unwrap();
    let ctime = s.tablet_ctime(1, 0, u64::MAX).unwrap();
    s.begin_tenure().unwrap();
    s.add_tablet(1, 1 << 63, u64::MAX).unwrap();
    assert_eq!(s.tablet_ctime(1, 0, (1 << 63) - 1), Some(ctime));
    assert_eq!(s.tablet_ctime(1, 1 << 63, u64::MAX), Some(ctime));
}
