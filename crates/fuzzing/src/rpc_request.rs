//! The storage server's RPC handlers, fed decoded garbage.
//!
//! The first input byte picks an opcode and the rest becomes the body of a frame
//! with a valid header, so the body decoders and the handlers behind them are
//! reached (a frame that does not decode is answered before any handler runs).
//! The input is also offered as a whole frame when its length prefix says it is
//! one. Every request is handled by one in-process storage server — a master with
//! a tablet covering all of table 1, and a backup on an in-memory disk — that
//! persists between inputs, as a real server's state does.
//!
//! The server must never panic, and every request it answers at once must get
//! exactly one well-formed response frame that echoes the request id. Long requests
//! (those `handle` hands to `handle_slow`: recovery, coordinator notifications) are
//! not run: they talk to other servers.

use std::sync::OnceLock;

use ramstore_backup::{BackupConfig, BackupStore, Disk, MemDisk, SyncMode};
use ramstore_master::{CleanerMode, ObjectStore, StoreConfig};
use ramstore_rpc::{Handled, Service};
use ramstore_server::{BackupService, StorageService};
use ramstore_wire::{
    decode_raw_header, decode_response, frame_len, Opcode, FLAG_RESPONSE, HEADER_BYTES,
    MAX_FRAME_BYTES,
};

/// The request id of every built frame; the answer must echo it.
const REQUEST_ID: u64 = 0x0123_4567_89ab_cdef;
const MEMORY_BYTES: usize = 16 << 20;
const SEGMENT_BYTES: usize = 1 << 20;
/// The table whose whole hash range the server owns.
pub const OWNED_TABLE: u64 = 1;

fn service() -> &'static StorageService {
    static SERVICE: OnceLock<StorageService> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let mut config = StoreConfig::new(MEMORY_BYTES);
        config.segment_bytes = SEGMENT_BYTES;
        config.cleaner = CleanerMode::Background { threads: 1 };
        // A fixed, valid configuration: these cannot fail.
        let store = ObjectStore::new(config).expect("store config is valid");
        store
            .add_tablet(OWNED_TABLE, 0, u64::MAX)
            .expect("a fresh store takes a tablet");
        let backup = BackupStore::create(
            Box::new(MemDisk::new()) as Box<dyn Disk>,
            BackupConfig {
                frame_count: 8,
                segment_bytes: 4096,
                max_open_buffers: 4,
                sync_mode: SyncMode::Buffered,
            },
        )
        .expect("backup config is valid");
        StorageService::with_backup(store, Some(BackupService::new(backup)))
    })
}

/// Handles the request the input describes, and the input itself if it is a frame.
pub fn check(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let opcode = Opcode::ALL[usize::from(pick) % Opcode::ALL.len()];
    if let Some(frame) = frame_for(opcode as u16, body) {
        handle(&frame, REQUEST_ID);
    }
    if matches!(frame_len(data), Ok(Some(n)) if n == data.len()) {
        if let Ok(raw) = decode_raw_header(data) {
            handle(data, raw.request_id);
        }
    }
}

/// A request frame for `opcode` with `body`, or `None` if it would be too large.
fn frame_for(opcode: u16, body: &[u8]) -> Option<Vec<u8>> {
    let len = HEADER_BYTES + body.len();
    if len > MAX_FRAME_BYTES {
        return None;
    }
    let mut frame = Vec::with_capacity(4 + len);
    frame.extend_from_slice(&u32::try_from(len).ok()?.to_le_bytes());
    frame.extend_from_slice(&opcode.to_le_bytes());
    frame.extend_from_slice(&0u16.to_le_bytes()); // status
    frame.extend_from_slice(&0u32.to_le_bytes()); // flags: a request
    frame.extend_from_slice(&REQUEST_ID.to_le_bytes());
    frame.extend_from_slice(body);
    Some(frame)
}

fn handle(frame: &[u8], request_id: u64) {
    let mut out = Vec::new();
    match service().handle(frame, &mut out) {
        Handled::Done => check_answer(&out, request_id),
        Handled::Slow => assert!(out.is_empty(), "a slow request wrote an answer early"),
        Handled::Deferred(_) => panic!("a server without replicas deferred an answer"),
    }
}

/// `out` is exactly one response frame for `request_id` that decodes.
fn check_answer(out: &[u8], request_id: u64) {
    let len = frame_len(out)
        .expect("the answer's length prefix is valid")
        .expect("the answer holds a length prefix");
    assert_eq!(len, out.len(), "exactly one frame per request");
    let raw = decode_raw_header(out).expect("the answer has a header");
    assert_eq!(
        raw.request_id, request_id,
        "the answer echoes the request id"
    );
    assert_ne!(
        raw.flags & FLAG_RESPONSE,
        0,
        "the answer is marked a response"
    );
    if let Err(e) = decode_response(out) {
        // An answer to an unknown opcode cannot name it as an `Opcode`; every other
        // answer must decode like any response a client reads.
        assert!(
            Opcode::try_from(raw.opcode).is_err(),
            "the server's answer does not decode ({e}): {out:02x?}"
        );
    }
}
