//! Small disks for storage servers, so a full disk can be injected (issue 6): each
//! server's disk directory becomes a tmpfs just large enough for its backup frames
//! file plus [`DISK_SLACK_BYTES`], and a fault fills the slack with a filler file
//! for a while.
//!
//! Why this is interesting although the frames file is allocated up front
//! (`posix_fallocate`, so a disk too small for it is refused at start-up): whatever
//! else a server writes to its disk while it runs would fail with ENOSPC, and the
//! fault shows whether anything does — the server must keep serving, replicating
//! and recovering with a full disk, and lose nothing.
//!
//! Mounting needs root (like the network namespaces of [`crate::netns`]).

use std::fs::{self, File};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::HarnessError;

/// Room on each server's disk beyond its frames file.
pub const DISK_SLACK_BYTES: u64 = 16 << 20;
/// The filler file a full-disk fault writes.
pub const FILLER_NAME: &str = "filler";
/// Bytes per write while filling.
const FILL_CHUNK_BYTES: usize = 1 << 20;

/// A tmpfs mounted on a directory; unmounted (lazily, so a process that has not
/// exited yet cannot keep it busy) when dropped.
pub struct DiskMount {
    path: PathBuf,
}

impl DiskMount {
    /// Mounts a tmpfs of `bytes` on `path` (created if missing).
    pub fn mount(path: &Path, bytes: u64) -> Result<DiskMount, HarnessError> {
        fs::create_dir_all(path)
            .map_err(|e| HarnessError::Io(format!("{}: {e}", path.display())))?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(path)
            .status()
            .map_err(|e| HarnessError::Io(format!("mount: {e}")))?;
        if !status.success() {
            return Err(HarnessError::Io(format!(
                "mount -t tmpfs on {} failed ({status}); full-disk faults need root",
                path.display()
            )));
        }
        Ok(DiskMount {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for DiskMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Unmounts (lazily) every tmpfs mounted under `dir`, e.g. after an interrupted run
/// whose [`DiskMount`]s were never dropped.
pub fn unmount_under(dir: &Path) {
    let Ok(mounts) = fs::read_to_string("/proc/self/mounts") else {
        return;
    };
    for line in mounts.lines() {
        // "device mount-point type options …"
        let mut fields = line.split_whitespace();
        let (Some(_device), Some(target), Some(fs_type)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if fs_type == "tmpfs" && Path::new(target).starts_with(dir) {
            let _ = Command::new("umount").arg("-l").arg(target).status();
        }
    }
}

/// Fills the file system holding `dir` with a filler file until a write fails with
/// ENOSPC; returns the bytes written.
pub fn fill(dir: &Path) -> Result<u64, HarnessError> {
    let path = dir.join(FILLER_NAME);
    let io = |e: std::io::Error| HarnessError::Io(format!("{}: {e}", path.display()));
    let mut file = File::create(&path).map_err(io)?;
    let chunk = vec![0xA5u8; FILL_CHUNK_BYTES];
    let mut written = 0u64;
    loop {
        match file.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    }
    Ok(written)
}

/// Removes the filler file [`fill`] wrote in `dir` (if any).
pub fn unfill(dir: &Path) -> Result<(), HarnessError> {
    match fs::remove_file(dir.join(FILLER_NAME)) {
        Err(e) if e.kind() != ErrorKind::NotFound => {
            Err(HarnessError::Io(format!("{}: {e}", dir.display())))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a small file system to fill, at least the filler's removal is
    /// idempotent (the fill itself is exercised by the soak and the partition test
    /// as root).
    #[test]
    fn unfill_without_a_filler_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        unfill(dir.path()).unwrap();
        fs::write(dir.path().join(FILLER_NAME), b"x").unwrap();
        unfill(dir.path()).unwrap();
        assert!(!dir.path().join(FILLER_NAME).exists());
    }
}
