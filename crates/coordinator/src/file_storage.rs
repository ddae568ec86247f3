//! [`FileStorage`]: the coordinator's external storage in one local directory.
//!
//! Layout: one file per key, named by a reversible encoding of the key (ASCII letters,
//! digits, `-` and `_` stand for themselves; every other byte is `%HH`). Encoded names
//! never contain `.`, so the names the store uses for itself cannot collide with a
//! key: `.lock` (the lock file) and `NAME.tmp` (a value being written).
//!
//! Every write is an *atomic replace*: write `NAME.tmp`, fsync it, rename it over
//! `NAME`, fsync the directory. A crash at any point leaves either the old or the new
//! value under `NAME`, plus perhaps a stale `NAME.tmp`, which `open` deletes. This is
//! what gives the coordinator's "write before acting" rule (R§9) its meaning on one
//! disk.
//!
//! Each value file carries a header with a magic number, a format version, the value
//! length and a CRC-32C of the value, so a damaged file is reported as
//! [`StorageError::Corrupt`] instead of being read as a wrong value.
//!
//! One process at a time: `open` takes an exclusive `flock` on `.lock` and keeps it
//! until the `FileStorage` is dropped, so two coordinators pointed at one directory
//! fail fast with [`StorageError::Locked`] instead of overwriting each other.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::storage::{validate_key, ExternalStorage, StorageError, MAX_KEY_BYTES};

/// The lock file's name; it starts with `.`, which no encoded key does.
const LOCK_FILE_NAME: &str = ".lock";
/// Suffix of a value being written; `.` never occurs in an encoded key.
const TMP_SUFFIX: &str = ".tmp";
/// The longest file name common file systems accept.
const MAX_FILE_NAME_BYTES: usize = 255;
// Every key must fit a file name even when each byte is escaped as `%HH`, with room
// for the temporary suffix.
const _: () = assert!(3 * MAX_KEY_BYTES + TMP_SUFFIX.len() <= MAX_FILE_NAME_BYTES);

/// First bytes of every value file.
const VALUE_MAGIC: [u8; 4] = *b"RSKV";
/// Version of the value file layout; bump it when the header changes.
const VALUE_FORMAT: u32 = 1;
/// magic (4) + format (4) + value length (8) + CRC-32C of the value (4).
const VALUE_HEADER_BYTES: usize = 4 + 4 + 8 + 4;

/// External storage in a local directory; see the module documentation for the
/// layout and the crash guarantees.
#[derive(Debug)]
pub struct FileStorage {
    dir: PathBuf,
    /// Holds the exclusive `flock` for as long as this value lives; closing the file
    /// (on drop) releases it.
    _lock: File,
    /// Serialises writers within this process: they share `NAME.tmp`, so two
    /// concurrent puts of one key must not interleave.
    write_lock: Mutex<()>,
}

impl FileStorage {
    /// Opens (creating it if missing) the storage directory `dir`, takes its lock and
    /// deletes `.tmp` files left by a crash in the middle of a write.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StorageError> {
        let dir = dir.as_ref().to_path_buf();
        let existed = dir.is_dir();
        fs::create_dir_all(&dir).map_err(|e| io_err("create directory", &dir, e))?;
        if !existed {
            // A new directory is only durable once its parent's entry for it is;
            // otherwise a crash could lose the directory with every value in it.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent)?;
            }
        }
        let lock = lock_dir(&dir)?;
        // Stale temporaries are removed only after the lock is held: before that they
        // might belong to a live coordinator's write in progress.
        let mut removed_any = false;
        for entry in fs::read_dir(&dir).map_err(|e| io_err("read directory", &dir, e))? {
            let entry = entry.map_err(|e| io_err("read directory", &dir, e))?;
            let name = entry.file_name();
            if name.to_string_lossy().ends_with(TMP_SUFFIX) {
                let path = entry.path();
                fs::remove_file(&path).map_err(|e| io_err("remove stale", &path, e))?;
                removed_any = true;
            }
        }
        if removed_any {
            sync_dir(&dir)?;
        }
        Ok(Self {
            dir,
            _lock: lock,
            write_lock: Mutex::new(()),
        })
    }

    /// The storage directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `key`'s value (for operators and tests).
    pub fn path_for(&self, key: &str) -> Result<PathBuf, StorageError> {
        validate_key(key)?;
        Ok(self.dir.join(encode_key(key)))
    }

    fn read_value(&self, key: &str, path: &Path) -> Result<Option<Vec<u8>>, StorageError> {
        let mut bytes = Vec::new();
        match File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)) {
            Ok(_) => decode_value(&bytes)
                .map(Some)
                .map_err(|reason| StorageError::Corrupt {
                    key: key.to_owned(),
                    reason: format!("{}: {reason}", path.display()),
                }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read", path, e)),
        }
    }
}

impl ExternalStorage for FileStorage {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        let path = self.path_for(key)?;
        self.read_value(key, &path)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), StorageError> {
        let path = self.path_for(key)?;
        let tmp = self.dir.join(format!("{}{TMP_SUFFIX}", encode_key(key)));
        let bytes = encode_value(value);
        let _writer = self.write_lock.lock();
        let mut file = File::create(&tmp).map_err(|e| io_err("create", &tmp, e))?;
        file.write_all(&bytes)
            .map_err(|e| io_err("write", &tmp, e))?;
        // The data must be on disk before the rename makes it visible; otherwise a
        // crash could leave the new name pointing at an empty or partial file.
        file.sync_all().map_err(|e| io_err("fsync", &tmp, e))?;
        drop(file);
        fs::rename(&tmp, &path).map_err(|e| io_err("rename", &path, e))?;
        // The rename itself is durable only once the directory is synced.
        sync_dir(&self.dir)
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path_for(key)?;
        let _writer = self.write_lock.lock();
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &path, e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        let mut out = Vec::new();
        let entries =
            fs::read_dir(&self.dir).map_err(|e| io_err("read directory", &self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err("read directory", &self.dir, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // The lock file, temporaries of writes in progress, and directories (such
            // as `lost+found` when DIR is a mount point) are not keys.
            if name.starts_with('.') || name.ends_with(TMP_SUFFIX) {
                continue;
            }
            let is_dir = entry
                .file_type()
                .map_err(|e| io_err("stat", &entry.path(), e))?
                .is_dir();
            if is_dir {
                continue;
            }
            let key = decode_key(&name).ok_or_else(|| StorageError::Corrupt {
                key: name.to_string(),
                reason: format!(
                    "{} is not a file this store wrote (its name encodes no key)",
                    entry.path().display()
                ),
            })?;
            if !key.starts_with(prefix) {
                continue;
            }
            // A concurrent delete may remove the file after read_dir saw it; then the
            // key simply is not there any more.
            if let Some(value) = self.read_value(&key, &entry.path())? {
                out.push((key, value));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> StorageError {
    StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Makes renames and removals in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("fsync directory", dir, e))
}

/// Opens `DIR/.lock` and takes an exclusive, non-blocking `flock` on it.
#[cfg(unix)]
fn lock_dir(dir: &Path) -> Result<File, StorageError> {
    use std::fs::OpenOptions;
    use std::os::fd::AsRawFd;

    let path = dir.join(LOCK_FILE_NAME);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io_err("open lock file", &path, e))?;
    loop {
        // SAFETY: `file` owns a valid open descriptor for the duration of the call;
        // flock only acts on that descriptor and touches no memory of ours.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        match err.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => {
                let mut text = String::new();
                let holder_pid = file
                    .read_to_string(&mut text)
                    .ok()
                    .and_then(|_| text.trim().parse().ok());
                return Err(StorageError::Locked { path, holder_pid });
            }
            _ => return Err(io_err("lock", &path, err)),
        }
    }
    // The pid is only a hint for the error message of a second coordinator; failing
    // to write it does not weaken the lock, so it is not an error.
    let _ = file
        .set_len(0)
        .and_then(|()| file.write_all(std::process::id().to_string().as_bytes()));
    Ok(file)
}

/// Without `flock` there is no lock to take; refuse rather than run unprotected.
#[cfg(not(unix))]
fn lock_dir(dir: &Path) -> Result<File, StorageError> {
    let path = dir.join(LOCK_FILE_NAME);
    Err(io_err(
        "lock",
        &path,
        io::Error::new(io::ErrorKind::Unsupported, "FileStorage needs flock (Unix)"),
    ))
}

fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Encodes `key` as a file name: plain bytes as themselves, others as `%HH`.
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for &b in key.as_bytes() {
        if is_plain(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key a file name encodes, or `None` if `encode_key` would never produce the
/// name (so every key has exactly one file and no stray file is mistaken for one).
fn decode_key(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if is_plain(b) {
            out.push(b);
            i += 1;
        } else if b == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let upper = |c: &u8| c.is_ascii_digit() || (b'A'..=b'F').contains(c);
            if !hex.iter().all(upper) {
                return None;
            }
            let v = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            if is_plain(v) {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            return None;
        }
    }
    let key = String::from_utf8(out).ok()?;
    validate_key(&key).ok()?;
    Some(key)
}

fn encode_value(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(VALUE_HEADER_BYTES + value.len());
    out.extend_from_slice(&VALUE_MAGIC);
    out.extend_from_slice(&VALUE_FORMAT.to_le_bytes());
    out.extend_from_slice(&(value.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c(value).to_le_bytes());
    out.extend_from_slice(value);
    out
}

fn decode_value(bytes: &[u8]) -> Result<Vec<u8>, String> {
    if bytes.len() < VALUE_HEADER_BYTES {
        return Err(format!(
            "{} bytes is shorter than the {VALUE_HEADER_BYTES}-byte header",
            bytes.len()
        ));
    }
    let (header, value) = bytes.split_at(VALUE_HEADER_BYTES);
    if header[0..4] != VALUE_MAGIC {
        return Err("bad magic number".to_owned());
    }
    let field = |range: std::ops::Range<usize>| -> [u8; 8] {
        let mut buf = [0u8; 8];
        buf[..range.len()].copy_from_slice(&header[range]);
        buf
    };
    let format = u64::from_le_bytes(field(4..8));
    if format != u64::from(VALUE_FORMAT) {
        return Err(format!("unknown format version {format}"));
    }
    let len = u64::from_le_bytes(field(8..16));
    if len != value.len() as u64 {
        return Err(format!(
            "header says {len} value bytes, file holds {}",
            value.len()
        ));
    }
    let stored_crc = u64::from_le_bytes(field(16..20));
    let crc = u64::from(crc32c(value));
    if stored_crc != crc {
        return Err(format!(
            "checksum mismatch (stored {stored_crc:#010x}, computed {crc:#010x})"
        ));
    }
    Ok(value.to_vec())
}

/// CRC-32C (Castagnoli) lookup table, built at compile time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-32C of `data`; values are small, so a table-driven byte loop is plenty.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = (crc >> 8) ^ CRC32C_TABLE[usize::from((crc as u8) ^ b)];
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn encode_key_round_trips_and_is_injective() {
        for key in ["state", "a/b", "tables/x.y", "%", "ümlaut", "a b", "-_Az09"] {
            let name = encode_key(key);
            assert!(!name.contains('.') && !name.contains('/'), "{name}");
            assert_eq!(decode_key(&name).as_deref(), Some(key));
        }
        assert_eq!(encode_key("a/b"), "a%2Fb");
        // Names encode_key never produces are rejected.
        assert_eq!(decode_key("a%2fb"), None);
        assert_eq!(decode_key("%61"), None);
        assert_eq!(decode_key("a.b"), None);
        assert_eq!(decode_key("%2"), None);
        assert_eq!(decode_key(""), None);
    }

    #[test]
    fn decode_value_detects_damage() {
        let good = encode_value(b"hello");
        assert_eq!(decode_value(&good).unwrap(), b"hello");
        assert!(decode_value(&good[..good.len() - 1]).is_err());
        assert!(decode_value(&good[..3]).is_err());
        let mut flipped = good.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(decode_value(&flipped).unwrap_err().contains("checksum"));
        let mut magic = good;
        magic[0] = b'X';
        assert!(decode_value(&magic).is_err());
    }
}
