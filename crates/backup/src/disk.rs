//! The `Disk` seam (docs/design.md §7): positional I/O on the one file that holds a store's
//! frames, with a real-file implementation and an in-memory one for tests.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

/// Largest image a [`MemDisk`] holds: it is a test double, not a store.
pub const MEM_DISK_MAX_BYTES: u64 = 1 << 30;

/// The storage under a backup store: one fixed-size byte array with positional reads
/// and writes and a barrier that makes earlier writes durable.
///
/// Implementations are called from many threads at once: writes to disjoint ranges
/// and `sync_data` may run concurrently. A write that returns an error may have
/// written any part of its bytes.
pub trait Disk: Send + Sync {
    /// Fills `buf` with the bytes at `offset`; fails (`UnexpectedEof`) if the disk
    /// ends before `buf` is full.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes all of `bytes` at `offset`.
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    /// Returns once every write that returned before this call is durable.
    fn sync_data(&self) -> io::Result<()>;
    /// The size of the disk in bytes.
    fn len(&self) -> io::Result<u64>;
    /// True if the disk has no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Grows (with zeros) or shrinks the disk to `len` bytes.
    fn set_len(&self, len: u64) -> io::Result<()>;
}

impl<D: Disk + ?Sized> Disk for Arc<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        (**self).sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        (**self).set_len(len)
    }
}

impl<D: Disk + ?Sized> Disk for Box<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        (**self).sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        (**self).set_len(len)
    }
}

/// A regular file, read and written with `pread`/`pwrite`, made durable with
/// `fdatasync`.
#[derive(Debug)]
pub struct FileDisk {
    file: File,
}

impl FileDisk {
    /// Creates a new file of `len` bytes with its blocks allocated up front
    /// (`posix_fallocate`), so a full file system is reported now rather than when a
    /// replica is closed. Fails if `path` exists: formatting over an existing frames
    /// file would destroy replicas.
    pub fn create(path: impl AsRef<Path>, len: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        if len > 0 {
            let len = libc::off_t::try_from(len)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large"))?;
            // SAFETY: the descriptor is open for writing and owned by `file`, which
            // outlives the call; posix_fallocate reads no memory of ours.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
        }
        Ok(Self { file })
    }

    /// Opens an existing frames file for reading and writing.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Self { file })
    }

    /// Uses an already opened file (it must be readable and writable).
    pub fn from_file(file: File) -> Self {
        Self { file }
    }
}

impl Disk for FileDisk {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

/// An in-memory disk for tests that also models what a power failure keeps.
///
/// Clones share one image, so a test can keep a handle while a store owns another,
/// drop the store, and reopen it on the same bytes. Writes are visible to reads at
/// once but become *durable* only at [`Disk::sync_data`]; [`MemDisk::power_loss`]
/// throws away (or tears) everything written since the last sync, as a power failure
/// would. `set_len` is durable at once. Unsynced writes are kept as copies, so a
/// test that never syncs holds every byte it wrote twice.
#[derive(Clone, Default)]
pub struct MemDisk {
    inner: Arc<Mutex<MemImage>>,
}

impl std::fmt::Debug for MemDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let img = self.inner.lock();
        f.debug_struct("MemDisk")
            .field("len", &img.current.len())
            .field("unsynced_writes", &img.pending.len())
            .finish()
    }
}

#[derive(Default)]
struct MemImage {
    /// What reads see.
    current: Vec<u8>,
    /// What survives a power failure.
    durable: Vec<u8>,
    /// Writes since the last sync, oldest first.
    pending: Vec<(u64, Vec<u8>)>,
}

impl MemDisk {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every byte as reads see it.
    pub fn snapshot(&self) -> Vec<u8> {
        self.inner.lock().current.clone()
    }

    /// A copy of every byte as a power failure now would leave it (unsynced writes
    /// lost whole).
    pub fn durable(&self) -> Vec<u8> {
        self.inner.lock().durable.clone()
    }

    /// Writes not yet made durable by a sync.
    pub fn unsynced_writes(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// XORs the byte at `offset` with `mask`, durably, as silent media corruption
    /// would. Out-of-range offsets are ignored.
    pub fn corrupt(&self, offset: u64, mask: u8) {
        let mut img = self.inner.lock();
        let Ok(i) = usize::try_from(offset) else {
            return;
        };
        if i < img.current.len() {
            img.current[i] ^= mask;
            img.durable[i] ^= mask;
        }
    }

    /// A power failure: every write since the last sync is lost, except that
    /// `keep(offset, len)` bytes from the start of each such write (oldest first)
    /// reach the disk, so tests can tear writes or let some of them through. Values
    /// above `len` count as `len`.
    pub fn power_loss(&self, mut keep: impl FnMut(u64, usize) -> usize) {
        let mut img = self.inner.lock();
        let pending = std::mem::take(&mut img.pending);
        let MemImage {
            current, durable, ..
        } = &mut *img;
        current.clone_from(durable);
        for (offset, bytes) in pending {
            let n = keep(offset, bytes.len()).min(bytes.len());
            // The write was in range when it was made and lengths only change
            // durably, so the kept prefix is in range too.
            let at = offset as usize;
            current[at..at + n].copy_from_slice(&bytes[..n]);
            durable[at..at + n].copy_from_slice(&bytes[..n]);
        }
    }

    /// What Linux does to writes whose `fdatasync` failed: reads keep returning
    /// them, but they are marked clean and never reach the disk, so a later
    /// successful sync does not make them durable either.
    pub fn drop_unsynced(&self) {
        self.inner.lock().pending.clear();
    }

    /// A power failure that loses every unsynced write whole.
    pub fn power_loss_all(&self) {
        self.power_loss(|_, _| 0);
    }

    fn range(img: &MemImage, offset: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= img.current.len() as u64)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "range {offset}+{len} outside a MemDisk of {} bytes",
                        img.current.len()
                    ),
                )
            })?;
        // Both ends are at most the image length, which is a usize.
        Ok(offset as usize..end as usize)
    }
}

impl Disk for MemDisk {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let img = self.inner.lock();
        let r = Self::range(&img, offset, buf.len())?;
        buf.copy_from_slice(&img.current[r]);
        Ok(())
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut img = self.inner.lock();
        let r = Self::range(&img, offset, bytes.len())?;
        img.current[r].copy_from_slice(bytes);
        img.pending.push((offset, bytes.to_vec()));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut img = self.inner.lock();
        let pending = std::mem::take(&mut img.pending);
        for (offset, bytes) in pending {
            let at = offset as usize;
            img.durable[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.inner.lock().current.len() as u64)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if len > MEM_DISK_MAX_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MemDisk is limited to {MEM_DISK_MAX_BYTES} bytes"),
            ));
        }
        let mut img = self.inner.lock();
        // Bounded by MEM_DISK_MAX_BYTES above, so it fits a usize.
        let len = len as usize;
        img.current.resize(len, 0);
        img.durable.resize(len, 0);
        img.pending
            .retain(|(offset, bytes)| *offset as usize + bytes.len() <= len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_disk_read_write_round_trip() {
        let d = MemDisk::new();
        d.set_len(100).unwrap();
        d.write_at(10, b"hello").unwrap();
        let mut buf = [0u8; 7];
        d.read_at(9, &mut buf).unwrap();
        assert_eq!(&buf, b"\0hello\0");
        assert_eq!(d.len().unwrap(), 100);
        assert!(!d.is_empty().unwrap());
    }

    #[test]
    fn mem_disk_out_of_range_errors() {
        let d = MemDisk::new();
        d.set_len(10).unwrap();
        let e = d.write_at(8, b"abc").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = d.read_at(u64::MAX, &mut [0u8; 2]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(d.set_len(MEM_DISK_MAX_BYTES + 1).is_err());
    }

    #[test]
    fn mem_disk_power_loss_drops_unsynced() {
        let d = MemDisk::new();
        d.set_len(8).unwrap();
        d.write_at(0, b"ab").unwrap();
        d.sync_data().unwrap();
        d.write_at(2, b"cd").unwrap();
        assert_eq!(d.unsynced_writes(), 1);
        d.power_loss_all();
        assert_eq!(d.snapshot(), b"ab\0\0\0\0\0\0");
        assert_eq!(d.unsynced_writes(), 0);
    }

    #[test]
    fn mem_disk_power_loss_tears_writes() {
        let d = MemDisk::new();
        d.set_len(8).unwrap();
        d.write_at(0, b"abcd").unwrap();
        d.write_at(4, b"efgh").unwrap();
        d.power_loss(|offset, _| if offset == 0 { 2 } else { 100 });
        assert_eq!(d.snapshot(), b"ab\0\0efgh");
        // What survived is durable now.
        d.power_loss_all();
        assert_eq!(d.snapshot(), b"ab\0\0efgh");
    }

    #[test]
    fn mem_disk_drop_unsynced_keeps_reads_loses_durability() {
        let d = MemDisk::new();
        d.set_len(4).unwrap();
        d.write_at(0, b"ab").unwrap();
        d.drop_unsynced();
        assert_eq!(&d.snapshot()[..2], b"ab");
        d.sync_data().unwrap();
        assert_eq!(&d.durable()[..2], b"\0\0");
    }

    #[test]
    fn mem_disk_clones_share_image() {
        let a = MemDisk::new();
        let b = a.clone();
        a.set_len(4).unwrap();
        b.write_at(0, b"x").unwrap();
        a.corrupt(0, 0xff);
        assert_eq!(a.snapshot()[0], b'x' ^ 0xff);
        a.corrupt(99, 1);
    }

    #[test]
    fn file_disk_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames");
        let d = FileDisk::create(&path, 1 << 16).unwrap();
        assert_eq!(d.len().unwrap(), 1 << 16);
        d.write_at(4096, b"replica").unwrap();
        d.sync_data().unwrap();
        drop(d);
        let d = FileDisk::open(&path).unwrap();
        let mut buf = [0u8; 7];
        d.read_at(4096, &mut buf).unwrap();
        assert_eq!(&buf, b"replica");
        let e = d.read_at((1 << 16) - 3, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        d.set_len(10).unwrap();
        assert_eq!(d.len().unwrap(), 10);
    }

    #[test]
    fn file_disk_create_refuses_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames");
        drop(FileDisk::create(&path, 4096).unwrap());
        let e = FileDisk::create(&path, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn arc_and_box_forward() {
        let m = MemDisk::new();
        let a: Arc<dyn Disk> = Arc::new(m.clone());
        let b: Box<dyn Disk> = Box::new(m.clone());
        a.set_len(4).unwrap();
        b.write_at(1, b"z").unwrap();
        a.sync_data().unwrap();
        let mut buf = [0u8; 1];
        b.read_at(1, &mut buf).unwrap();
        assert_eq!(&buf, b"z");
        assert_eq!(b.len().unwrap(), 4);
    }
}
