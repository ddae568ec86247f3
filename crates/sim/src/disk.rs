//! [`SparseDisk`]: a simulated backup disk that holds only the chunks written.
//!
//! Why not `ramstore_backup::MemDisk`: it sizes two whole images (what reads
//! see and what survives a power failure) with `Vec::resize`, which touches
//! every page, so each simulated server held twice its frames file resident —
//! 32 MiB at the default 128 frames of 128 KiB, and the reason a 1,000-server
//! run was OOM-killed (issue 22). The simulation never cuts a disk's power (a
//! crashed host's disk is gone with it, `Cluster::crash_server`), so one image
//! is enough, and chunks never written read as zeros without being stored.
//!
//! Invariants: reads see every byte written before them, zeros elsewhere; a
//! range outside the disk fails with `UnexpectedEof` as `MemDisk`'s does.
//!
//! Thread-safety: one mutex over the chunk map (the simulation has one thread).

use std::collections::BTreeMap;
use std::io;

use parking_lot::Mutex;
use ramstore_backup::Disk;

/// Bytes per stored chunk: a page-sized unit, so a replica's metadata slot
/// (a few hundred bytes per frame) costs 4 KiB, not a whole frame.
const CHUNK: u64 = 4096;

/// A disk whose unwritten chunks cost nothing (see the module doc).
#[derive(Debug, Default)]
pub struct SparseDisk {
    inner: Mutex<Image>,
}

#[derive(Debug, Default)]
struct Image {
    len: u64,
    chunks: BTreeMap<u64, Box<[u8; CHUNK as usize]>>,
}

impl SparseDisk {
    /// An empty disk.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held in memory (the chunks written so far).
    pub fn stored_bytes(&self) -> u64 {
        self.inner.lock().chunks.len() as u64 * CHUNK
    }

    fn check(img: &Image, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= img.len => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "range {offset}+{len} outside a SparseDisk of {} bytes",
                    img.len
                ),
            )),
        }
    }
}

impl Disk for SparseDisk {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let img = self.inner.lock();
        Self::check(&img, offset, buf.len())?;
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (chunk, within) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(buf.len() - done);
            match img.chunks.get(&chunk) {
                Some(c) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let mut img = self.inner.lock();
        Self::check(&img, offset, bytes.len())?;
        let mut done = 0usize;
        while done < bytes.len() {
            let at = offset + done as u64;
            let (chunk, within) = (at / CHUNK, (at % CHUNK) as usize);
            let n = (CHUNK as usize - within).min(bytes.len() - done);
            let c = img
                .chunks
                .entry(chunk)
                .or_insert_with(|| Box::new([0u8; CHUNK as usize]));
            c[within..within + n].copy_from_slice(&bytes[done..done + n]);
            done += n;
        }
        Ok(())
    }

    /// Nothing to do: the simulation never cuts a disk's power.
    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.inner.lock().len)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut img = self.inner.lock();
        img.len = len;
        // Chunks wholly past the end go; a chunk cut in the middle keeps its
        // head and reads zeros past the end only if the disk grows again.
        let first_gone = len.div_ceil(CHUNK);
        img.chunks.split_off(&first_gone);
        if !len.is_multiple_of(CHUNK) {
            if let Some(c) = img.chunks.get_mut(&(len / CHUNK)) {
                c[(len % CHUNK) as usize..].fill(0);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_at_returns_writes_across_chunks_and_zeros_elsewhere() {
        let d = SparseDisk::new();
        d.set_len(3 * CHUNK).expect("sized");
        let bytes: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8 + 1).collect();
        d.write_at(CHUNK - 100, &bytes).expect("written");
        let mut back = vec![0u8; 6000];
        d.read_at(CHUNK - 100, &mut back).expect("read");
        assert_eq!(back, bytes);
        let mut head = [7u8; 16];
        d.read_at(0, &mut head).expect("read");
        assert_eq!(head, [0u8; 16], "never written: zeros");
        // 100 bytes of chunk 0, all of chunk 1, 1,804 of chunk 2.
        assert_eq!(d.stored_bytes(), 3 * CHUNK, "only the chunks written");
    }

    #[test]
    fn write_at_outside_the_disk_fails() {
        let d = SparseDisk::new();
        d.set_len(10).expect("sized");
        let e = d.write_at(8, b"abc").expect_err("past the end");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(d.read_at(u64::MAX, &mut [0u8; 2]).is_err());
    }

    #[test]
    fn set_len_shrinking_forgets_the_bytes_past_the_end() {
        let d = SparseDisk::new();
        d.set_len(2 * CHUNK).expect("sized");
        d.write_at(0, &[9u8; 2 * CHUNK as usize]).expect("written");
        d.set_len(100).expect("shrunk");
        d.set_len(2 * CHUNK).expect("grown");
        let mut b = [1u8; 200];
        d.read_at(0, &mut b).expect("read");
        assert_eq!(&b[..100], &[9u8; 100][..]);
        assert_eq!(&b[100..], &[0u8; 100][..], "cut bytes read as zeros");
        assert_eq!(d.stored_bytes(), CHUNK);
    }
}
