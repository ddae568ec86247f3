//! FileStorage: round trips, reopen, crash leftovers, corruption and the directory lock.

use std::fs;

use ramstore_coordinator::{ExternalStorage, FileStorage, StorageError};

#[test]
fn put_get_delete_list_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    assert_eq!(s.get("state").unwrap(), None);
    s.put("state", b"v1").unwrap();
    s.put("state", b"v2").unwrap();
    s.put("tables/a", b"A").unwrap();
    s.put("tables/b.c", b"").unwrap();
    s.put("tablesX", b"X").unwrap();
    assert_eq!(s.get("state").unwrap().as_deref(), Some(&b"v2"[..]));
    assert_eq!(s.get("tables/b.c").unwrap().as_deref(), Some(&b""[..]));
    assert_eq!(
        s.list("tables/").unwrap(),
        vec![
            ("tables/a".to_owned(), b"A".to_vec()),
            ("tables/b.c".to_owned(), Vec::new()),
        ]
    );
    assert_eq!(s.list("").unwrap().len(), 4);
    s.delete("tables/a").unwrap();
    s.delete("tables/a").unwrap();
    assert_eq!(s.get("tables/a").unwrap(), None);
    assert_eq!(s.list("tables/").unwrap().len(), 1);
}

#[test]
fn open_creates_missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a/b/coordinator");
    let s = FileStorage::open(&nested).unwrap();
    s.put("k", b"v").unwrap();
    assert!(nested.is_dir());
}

#[test]
fn put_rejects_bad_keys() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    assert!(matches!(
        s.put("", b"v"),
        Err(StorageError::InvalidKey { .. })
    ));
    let long = "k".repeat(ramstore_coordinator::MAX_KEY_BYTES + 1);
    assert!(matches!(
        s.put(&long, b"v"),
        Err(StorageError::InvalidKey { .. })
    ));
    // The longest key made only of escaped bytes still fits a file name.
    let escaped = "/".repeat(ramstore_coordinator::MAX_KEY_BYTES);
    s.put(&escaped, b"v").unwrap();
    assert_eq!(s.get(&escaped).unwrap().as_deref(), Some(&b"v"[..]));
}

#[test]
fn reopen_survives() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = FileStorage::open(dir.path()).unwrap();
        s.put("state", b"durable").unwrap();
        s.put("gone", b"x").unwrap();
        s.delete("gone").unwrap();
    }
    let s = FileStorage::open(dir.path()).unwrap();
    assert_eq!(s.get("state").unwrap().as_deref(), Some(&b"durable"[..]));
    assert_eq!(s.get("gone").unwrap(), None);
}

#[test]
fn open_stale_tmp_is_ignored_and_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let (state_path, other_path) = {
        let s = FileStorage::open(dir.path()).unwrap();
        s.put("state", b"old").unwrap();
        (s.path_for("state").unwrap(), s.path_for("other").unwrap())
    };
    // A crash after writing the temporary but before the rename leaves NAME.tmp,
    // possibly half written, beside the old value.
    let tmp = state_path.with_file_name("state.tmp");
    fs::write(&tmp, b"half a new val").unwrap();
    let other_tmp = other_path.with_file_name("other.tmp");
    fs::write(&other_tmp, b"garbage").unwrap();

    let s = FileStorage::open(dir.path()).unwrap();
    assert_eq!(s.get("state").unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(s.get("other").unwrap(), None);
    assert!(!tmp.exists() && !other_tmp.exists());
    assert_eq!(
        s.list("").unwrap(),
        vec![("state".to_owned(), b"old".to_vec())]
    );
    s.put("state", b"new").unwrap();
    assert_eq!(s.get("state").unwrap().as_deref(), Some(&b"new"[..]));
}

#[test]
fn get_corrupt_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    s.put("state", b"a valid value").unwrap();
    let path = s.path_for("state").unwrap();

    // Garbage.
    fs::write(&path, b"{ not what was written").unwrap();
    assert!(matches!(s.get("state"), Err(StorageError::Corrupt { .. })));
    assert!(matches!(s.list(""), Err(StorageError::Corrupt { .. })));

    // Truncated.
    s.put("state", b"a valid value").unwrap();
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
    assert!(matches!(s.get("state"), Err(StorageError::Corrupt { .. })));

    // One flipped bit.
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x10;
    fs::write(&path, &flipped).unwrap();
    let err = s.get("state").unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");

    // Empty.
    fs::write(&path, b"").unwrap();
    assert!(matches!(s.get("state"), Err(StorageError::Corrupt { .. })));
}

#[test]
fn list_stray_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let s = FileStorage::open(dir.path()).unwrap();
    s.put("k", b"v").unwrap();
    fs::write(dir.path().join("not%2fcanonical"), b"?").unwrap();
    assert!(matches!(s.list(""), Err(StorageError::Corrupt { .. })));
}

#[test]
fn open_locked_dir_fails_until_first_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let first = FileStorage::open(dir.path()).unwrap();
    let err = FileStorage::open(dir.path()).unwrap_err();
    match &err {
        StorageError::Locked { holder_pid, .. } => {
            assert_eq!(*holder_pid, Some(std::process::id()));
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    assert!(
        err.to_string().contains("in use by another coordinator"),
        "{err}"
    );
    drop(first);
    let second = FileStorage::open(dir.path()).unwrap();
    second.put("k", b"v").unwrap();
}
