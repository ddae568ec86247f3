use ramstore_log::CleanKind;
use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};

#[test]
fn scratch() {
    let mut cfg = StoreConfig::new(8 << 20);
    cfg.segment_bytes = 512 << 10;
    cfg.cleaner = CleanerMode::Manual;
    let s = ObjectStore::new(cfg).unwrap();
    s.add_tablet(1, 0, u64::MAX).unwrap();
    let none = RejectRules::default();
    let mut n = 0;
    // fill, only new keys, no cleaning at all
    loop {
        match s.write(1, format!("fill-{n:06}").as_bytes(), &[7u8; 1000], &none) {
            Ok(_) => n += 1,
            Err(WriteError::NoSpace) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let st = s.stats().log;
    println!("filled {n}; free {} live {}", st.seglets_free, st.live_object_bytes);
    let mut d = 0;
    while d < n {
        match s.remove(1, format!("fill-{d:06}").as_bytes(), &none) {
            Ok(_) => d += 1,
            Err(e) => { println!("delete #{d}: {e}"); break }
        }
    }
    let st = s.stats().log;
    println!("after deletes: free {} live {} tomb {}", st.seglets_free, st.live_object_bytes, st.tombstone_bytes);
    for round in 0..20 {
        let a = s.clean_now(None);
        let b = s.clean_now(Some(CleanKind::Compaction));
        let c = s.clean_now(Some(CleanKind::Combined));
        let st = s.stats().log;
        let r = s.remove(1, format!("fill-{d:06}").as_bytes(), &none);
        let w = s.write(1, b"new", &[1u8; 1000], &none);
        println!("round {round}: {a:?} {b:?} {c:?} free {} remove {r:?} write {w:?}", st.seglets_free);
        if r.is_ok() { d += 1; }
    }
}
