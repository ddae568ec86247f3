//! Backup frame files: what a backup reads back after a restart (R§8).
//!
//! The input becomes a small frames file (three 4 KiB frames): for each frame, a
//! run of segment bytes and the two metadata slots. Opening it must never panic;
//! every replica it keeps must read back at its recorded length; and opening the
//! file a second time (a restart right after a restart) must keep exactly the same
//! replicas, since the first open already freed everything it did not keep.

use ramstore_backup::metadata::{
    METADATA_BLOCK_BYTES, METADATA_MAGIC, METADATA_SLOTS, METADATA_SLOT_BYTES, METADATA_VERSION,
};
use ramstore_backup::{BackupConfig, BackupStore, Disk, MemDisk, ReplicaInfo, SyncMode};

const SEGMENT_BYTES: u32 = 4096;
const FRAMES: u32 = 3;
/// Segment bytes taken from the input per frame (the rest of the area is zero):
/// enough for a few entries, small enough that inputs stay short.
const MAX_AREA_INPUT_BYTES: usize = 512;

/// Opens the file the input describes as it is, then with every metadata block made
/// plausible (magic, version, geometry and both checksums recomputed).
pub fn check(data: &[u8]) {
    open_twice(image(data, false));
    open_twice(image(data, true));
}

fn config() -> BackupConfig {
    BackupConfig {
        frame_count: FRAMES,
        segment_bytes: SEGMENT_BYTES,
        max_open_buffers: FRAMES,
        sync_mode: SyncMode::Buffered,
    }
}

/// The frames file: per frame, one length byte then that many segment bytes, then
/// two 64-byte metadata blocks, all taken from the input while it lasts.
fn image(data: &[u8], fix_up: bool) -> MemDisk {
    let config = config();
    let mut file = vec![0u8; config.file_bytes() as usize];
    let mut input = data.iter().copied();
    for frame in 0..FRAMES {
        let area_at = config.data_offset(frame) as usize;
        let area_len = (usize::from(input.next().unwrap_or(0)) * 2).min(MAX_AREA_INPUT_BYTES);
        for (i, b) in input.by_ref().take(area_len).enumerate() {
            file[area_at + i] = b;
        }
        for slot in 0..METADATA_SLOTS {
            let at = config.metadata_offset(frame) as usize + slot * METADATA_SLOT_BYTES;
            for (i, b) in input.by_ref().take(METADATA_BLOCK_BYTES).enumerate() {
                file[at + i] = b;
            }
            if fix_up {
                let area = &file[area_at..area_at + SEGMENT_BYTES as usize];
                let block = fixed_block(&file[at..at + METADATA_BLOCK_BYTES], frame, area);
                file[at..at + METADATA_BLOCK_BYTES].copy_from_slice(&block);
            }
        }
    }
    let disk = MemDisk::new();
    // An in-memory disk of a few KiB: neither call can fail.
    disk.set_len(file.len() as u64).expect("MemDisk grows");
    disk.write_at(0, &file).expect("MemDisk writes");
    disk
}

/// `block` with the fields a parser checks first made valid, keeping the fuzzer's
/// flags (known bits only), ids, sequence and length (clamped to the segment).
fn fixed_block(block: &[u8], frame: u32, area: &[u8]) -> [u8; METADATA_BLOCK_BYTES] {
    let mut b = [0u8; METADATA_BLOCK_BYTES];
    b.copy_from_slice(block);
    if b.iter().all(|&x| x == 0) {
        return b; // A blank slot stays blank.
    }
    b[..8].copy_from_slice(&METADATA_MAGIC);
    b[8..10].copy_from_slice(&METADATA_VERSION.to_le_bytes());
    let flags = u16::from_le_bytes([b[10], b[11]]) & 0b11;
    b[10..12].copy_from_slice(&flags.to_le_bytes());
    b[12..16].copy_from_slice(&SEGMENT_BYTES.to_le_bytes());
    b[40..44].copy_from_slice(&frame.to_le_bytes());
    let length = u32::from_le_bytes([b[44], b[45], b[46], b[47]]) % (SEGMENT_BYTES + 1);
    b[44..48].copy_from_slice(&length.to_le_bytes());
    let data_crc = crc32c::crc32c(&area[..length as usize]);
    b[48..52].copy_from_slice(&data_crc.to_le_bytes());
    b[52..60].fill(0);
    let block_crc = crc32c::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&block_crc.to_le_bytes());
    b
}

fn open_twice(disk: MemDisk) {
    let Ok((store, summary)) = BackupStore::open_existing(disk, config()) else {
        return;
    };
    assert_eq!(summary.frames, FRAMES);
    let first = kept(&store);
    assert!(first.len() <= FRAMES as usize);
    assert_eq!(
        first.len(),
        (summary.closed_replicas + summary.open_replicas) as usize,
        "the summary counts what was kept: {summary:?}"
    );
    for r in &first {
        let bytes = store
            .read_replica(r.master_id, r.segment_id)
            .expect("a kept replica reads back");
        assert_eq!(bytes.len(), r.length as usize);
    }
    // Buffered mode: flush what the first open rewrote before "restarting".
    let _ = store.flush();
    let (again, _) = BackupStore::open_existing(store.into_disk(), config())
        .expect("a file this store just opened opens again");
    assert_eq!(
        kept(&again),
        first,
        "a second restart keeps the same replicas"
    );
}

fn kept<D: Disk>(store: &BackupStore<D>) -> Vec<ReplicaInfo> {
    let mut list = store.list();
    list.sort_by_key(|r| (r.master_id, r.segment_id));
    list
}
