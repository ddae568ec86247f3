use ramstore_master::{CleanerMode, ObjectStore, RejectRules, StoreConfig, WriteError};

#[test]
fn write_read_delete_with_cleaning_under_tiny_memory() {
    let mut cfg = StoreConfig::new(8 << 20);
    cfg.segment_bytes = 512 << 10;
    cfg.cleaner = CleanerMode::Manual;
    let store = ObjectStore::new(cfg).unwrap();
    store.add_tablet(1, 0, u64::MAX).unwrap();
    let none = RejectRules::default();
    let mut model = std::collections::HashMap::new();
    let mut buf = Vec::new();
    let mut nospace = 0;
    for i in 0..200_000u64 {
        let key = format!("k{}", i % 3000);
        let value = vec![(i % 251) as u8; 100 + (i % 900) as usize];
        loop {
            match store.write(1, key.as_bytes(), &value, &none) {
                Ok(v) => {
                    model.insert(key.clone(), (value.clone(), v));
                    break;
                }
                Err(WriteError::NoSpace) => {
                    nospace += 1;
                    assert!(
                        store.clean_now(None).is_some()
                            || store
                                .clean_now(Some(ramstore_log::CleanKind::Combined))
                                .is_some(),
                        "no progress: {:?}",
                        store.stats().log
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
        if i % 7 == 0 {
            let dk = format!("k{}", (i * 13) % 3000);
            if let Ok(r) = store.remove(1, dk.as_bytes(), &none) {
                assert_eq!(r.is_some(), model.remove(&dk).is_some());
            }
        }
    }
    for (k, (v, ver)) in &model {
        let got = store.read(1, k.as_bytes(), &mut buf).unwrap();
        assert_eq!(got, *ver);
        assert_eq!(&buf, v);
    }
    let s = store.stats();
    println!("nospace={nospace} {:#?}", s.log);
    assert!(s.log.compactions + s.log.combined_passes > 0);
}
