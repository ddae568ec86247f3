//! The restart scan: what a frames file holds, read back from its metadata slots and
//! verified against its data (R§8: a restarting backup "preserves any of the
//! replicas on its secondary storage").
//!
//! For each frame both slots are parsed. Blocks that parse are *candidates*; the
//! newest (largest sequence) whose recorded checksum matches the frame's bytes wins.
//! An older candidate wins only when the newest's bytes do not match — the state a
//! torn or reordered write left behind, which is the previous state of that replica.
//! A frame without a winner is free; if any of it was non-blank it is reported
//! corrupt. An open atomic winner is discarded: such a replica is valid only once
//! closed (R§8). Two frames claiming one replica (possible only after a power
//! failure in buffered mode, or bit rot) are resolved for the newer one.

use std::cmp::Reverse;

use crate::config::BackupConfig;
use crate::disk::Disk;
use crate::error::BackupError;
use crate::metadata::{
    self, MetadataError, ReplicaMetadata, METADATA_SLOTS, METADATA_SLOTS_BYTES, METADATA_SLOT_BYTES,
};

/// What a restart found, for logs and metrics. Nothing here needs acting on: damaged
/// frames are already free.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestartSummary {
    /// Frames in the file.
    pub frames: u32,
    /// Frames whose slots are both blank (never used, or freed).
    pub empty_frames: u32,
    /// Closed replicas kept.
    pub closed_replicas: u32,
    /// Open replicas kept (non-atomic, bytes verified).
    pub open_replicas: u32,
    /// Open atomic replicas found and dropped: they were never completed.
    pub discarded_atomic: u32,
    /// Frames dropped (and cleared) because a newer frame holds the same replica.
    pub superseded: u32,
    /// Damaged or misplaced slots in frames whose replica was kept from the other
    /// slot.
    pub damaged_slots: u32,
    /// Kept replicas whose newest slot described bytes that are not on disk, so the
    /// state before it was used.
    pub older_state_used: u32,
    /// Frames that held something but nothing usable; they are free now.
    pub corrupt: Vec<CorruptFrame>,
}

/// A frame whose contents could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptFrame {
    /// The frame's index in the file.
    pub frame: u32,
    /// (master id, segment id) if a valid metadata block named them.
    pub replica: Option<(u64, u64)>,
    /// What was wrong.
    pub problem: FrameProblem,
}

/// Why a frame's contents could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameProblem {
    /// No slot parses (the error of the first non-blank slot).
    Metadata(MetadataError),
    /// A valid block records another frame index: it was written to the wrong place.
    Misplaced { recorded: u32 },
    /// Metadata parses but the bytes do not match its checksum (that of the newest
    /// candidate is shown).
    DataChecksum { expected: u32, computed: u32 },
}

/// A replica that survived the scan.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub frame: u32,
    pub meta: ReplicaMetadata,
    /// The slot its metadata came from.
    pub slot: usize,
    /// The bytes of an open replica (its buffer from now on), `None` when closed.
    pub data: Option<Vec<u8>>,
}

/// The result of [`scan`].
#[derive(Debug)]
pub(crate) struct Scan {
    pub recovered: Vec<Recovered>,
    pub summary: RestartSummary,
    /// The largest sequence in any valid block, used or not: new blocks must be
    /// newer than every block on disk.
    pub max_sequence: u64,
    /// Frames whose metadata must be cleared (superseded duplicates).
    pub clear: Vec<u32>,
}

/// Reads every frame's metadata and verifies the data it describes. Disk errors
/// abort the scan: a frame that cannot be read is not known to be free.
pub(crate) fn scan(disk: &dyn Disk, config: &BackupConfig) -> Result<Scan, BackupError> {
    let mut out = Scan {
        recovered: Vec::new(),
        summary: RestartSummary {
            frames: config.frame_count,
            ..RestartSummary::default()
        },
        max_sequence: 0,
        clear: Vec::new(),
    };
    // One scratch buffer for every frame's bytes; open replicas get their own copy.
    let mut scratch = Vec::with_capacity(config.segment_bytes as usize);
    let mut region = [0u8; METADATA_SLOTS_BYTES];
    for frame in 0..config.frame_count {
        disk.read_at(config.metadata_offset(frame), &mut region)
            .map_err(BackupError::io("reading metadata"))?;
        let mut candidates: Vec<(usize, ReplicaMetadata)> = Vec::with_capacity(METADATA_SLOTS);
        let mut damaged = 0u32;
        let mut first_problem = None;
        for slot in 0..METADATA_SLOTS {
            match metadata::parse(&region[slot * METADATA_SLOT_BYTES..]) {
                Ok(m) if m.segment_bytes != config.segment_bytes => {
                    return Err(BackupError::LayoutMismatch {
                        frame,
                        found: m.segment_bytes,
                        configured: config.segment_bytes,
                    });
                }
                Ok(m) if m.frame_index != frame => {
                    damaged += 1;
                    first_problem.get_or_insert(FrameProblem::Misplaced {
                        recorded: m.frame_index,
                    });
                }
                Ok(m) => {
                    out.max_sequence = out.max_sequence.max(m.sequence);
                    candidates.push((slot, m));
                }
                Err(MetadataError::Blank) => {}
                Err(e) => {
                    damaged += 1;
                    first_problem.get_or_insert(FrameProblem::Metadata(e));
                }
            }
        }
        candidates.sort_by_key(|c| Reverse(c.1.sequence));
        let Some(&(_, newest)) = candidates.first() else {
            match first_problem {
                None => out.summary.empty_frames += 1,
                Some(problem) => out.summary.corrupt.push(CorruptFrame {
                    frame,
                    replica: None,
                    problem,
                }),
            }
            continue;
        };

        let mut winner = None;
        let mut newest_computed = None;
        for (rank, &(slot, m)) in candidates.iter().enumerate() {
            // A second closed copy describes the same bytes: no need to read again.
            if rank > 0 && (m.length, m.data_crc) == (newest.length, newest.data_crc) {
                continue;
            }
            scratch.resize(m.length as usize, 0);
            disk.read_at(config.data_offset(frame), &mut scratch)
                .map_err(BackupError::io("reading replica bytes"))?;
            let computed = crc32c::crc32c(&scratch);
            if computed == m.data_crc {
                winner = Some((rank, slot, m));
                break;
            }
            newest_computed.get_or_insert(computed);
        }
        let Some((rank, slot, m)) = winner else {
            out.summary.corrupt.push(CorruptFrame {
                frame,
                replica: Some((newest.master_id, newest.segment_id)),
                problem: FrameProblem::DataChecksum {
                    expected: newest.data_crc,
                    computed: newest_computed.unwrap_or(newest.data_crc),
                },
            });
            continue;
        };
        if rank > 0 {
            out.summary.older_state_used += 1;
        }
        out.summary.damaged_slots += damaged;
        if m.atomic && !m.closed {
            out.summary.discarded_atomic += 1;
            continue;
        }
        let data = (!m.closed).then(|| {
            // The winner was the last read, so `scratch` holds its bytes.
            let mut buf = Vec::with_capacity(config.segment_bytes as usize);
            buf.extend_from_slice(&scratch);
            buf
        });
        out.recovered.push(Recovered {
            frame,
            meta: m,
            slot,
            data,
        });
    }

    // Duplicates: keep the newest block of each replica.
    out.recovered.sort_by_key(|r| {
        (
            r.meta.master_id,
            r.meta.segment_id,
            Reverse(r.meta.sequence),
        )
    });
    let mut kept: Vec<Recovered> = Vec::with_capacity(out.recovered.len());
    for r in std::mem::take(&mut out.recovered) {
        let duplicate = kept.last().is_some_and(|k| {
            (k.meta.master_id, k.meta.segment_id) == (r.meta.master_id, r.meta.segment_id)
        });
        if duplicate {
            out.summary.superseded += 1;
            out.clear.push(r.frame);
        } else {
            kept.push(r);
        }
    }
    for r in &kept {
        if r.meta.closed {
            out.summary.closed_replicas += 1;
        } else {
            out.summary.open_replicas += 1;
        }
    }
    out.recovered = kept;
    Ok(out)
}
