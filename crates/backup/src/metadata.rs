//! The metadata block of a frame: every byte, its encoder and its parser.
//!
//! Each frame keeps two metadata *slots* (see the crate doc for where they sit). A slot
//! holds one 64-byte block followed by zero padding to [`METADATA_SLOT_BYTES`]; the
//! padding is neither written with meaning nor read. All integers are little-endian.
//!
//! ```text
//! offset  bytes  field          meaning
//! ------  -----  -------------  ------------------------------------------------------
//!      0      8  magic          b"RSBACKUP" (METADATA_MAGIC)
//!      8      2  version        u16, METADATA_VERSION (1)
//!     10      2  flags          u16: bit 0 CLOSED, bit 1 ATOMIC; other bits must be 0
//!     12      4  segment_bytes  u32, the segment area size the file was formatted with
//!     16      8  master_id      u64, the master whose segment this is
//!     24      8  segment_id     u64, the segment within that master's log
//!     32      8  sequence       u64, store-wide write sequence: the newer slot wins
//!     40      4  frame_index    u32, the frame this block was written for
//!     44      4  length         u32, valid bytes at the start of the segment area
//!     48      4  data_crc       u32, crc32c of those `length` valid bytes
//!     52      8  reserved       must be zero
//!     60      4  block_crc      u32, crc32c of bytes [0, 60) of this block
//! ```
//!
//! A block of 64 zero bytes is *blank*: the slot of a frame that was never used or
//! whose replica was freed. [`parse`] reports it as [`MetadataError::Blank`] so a
//! restart can tell an empty frame from a damaged one.
//!
//! `segment_bytes` and `frame_index` are in every block so that a file opened with
//! the wrong configuration, or a block written to the wrong place, is noticed instead
//! of being read as a replica. `sequence` orders the two slots of a frame (see
//! `store`): it increases with every block the store writes, across replicas and
//! across restarts, so the slot with the larger value is the newer one.
//!
//! [`parse`] checks every byte it reads and never panics, whatever its input. The
//! block checksum covers every field: a change confined to 32 consecutive bits (one
//! flipped bit, one rewritten byte) is always detected, wider damage (a torn write)
//! with probability 1 − 2⁻³².

use crate::config::{FRAME_SEGMENT_BYTES, METADATA_AREA_BYTES};

/// First eight bytes of every non-blank metadata block.
pub const METADATA_MAGIC: [u8; 8] = *b"RSBACKUP";
/// The metadata format this crate writes and reads.
pub const METADATA_VERSION: u16 = 1;
/// Bytes in one encoded metadata block.
pub const METADATA_BLOCK_BYTES: usize = 64;
/// Spacing of the metadata slots within a frame's metadata area: one disk sector, so
/// rewriting one slot never touches the sector that holds the other.
pub const METADATA_SLOT_BYTES: usize = 512;
/// Metadata slots per frame (two, written alternately, so a torn or reordered write
/// of one never destroys the state the other records).
pub const METADATA_SLOTS: usize = 2;
/// Bytes of the slots at the start of each frame's metadata area.
pub const METADATA_SLOTS_BYTES: usize = METADATA_SLOTS * METADATA_SLOT_BYTES;
// Both slots fit the metadata area the frame geometry leaves after each segment.
const _: () = assert!(METADATA_SLOTS_BYTES <= METADATA_AREA_BYTES as usize);

/// The largest `sequence` a valid block carries. A store numbers its metadata writes
/// from one more than the largest it found, one per write, so no store reaches 2⁶²
/// (a billion writes a second for 146 years); a larger value is damage. Rejecting it
/// keeps the next number from overflowing, which would order new blocks before old
/// ones (found by the `backup_frames` fuzz target: a block with `u64::MAX`).
pub const MAX_SEQUENCE: u64 = 1 << 62;

/// Flag bit: the replica is closed (complete and read-only).
pub const FLAG_CLOSED: u16 = 1 << 0;
/// Flag bit: the replica was written in atomic mode (valid only once closed, R§8).
pub const FLAG_ATOMIC: u16 = 1 << 1;
const KNOWN_FLAGS: u16 = FLAG_CLOSED | FLAG_ATOMIC;

const VERSION_AT: usize = 8;
const FLAGS_AT: usize = 10;
const SEGMENT_BYTES_AT: usize = 12;
const MASTER_AT: usize = 16;
const SEGMENT_AT: usize = 24;
const SEQUENCE_AT: usize = 32;
const FRAME_AT: usize = 40;
const LENGTH_AT: usize = 44;
const DATA_CRC_AT: usize = 48;
const RESERVED_AT: usize = 52;
const BLOCK_CRC_AT: usize = 60;

const _: () = assert!(BLOCK_CRC_AT + 4 == METADATA_BLOCK_BYTES);
const _: () = assert!(METADATA_BLOCK_BYTES <= METADATA_SLOT_BYTES);

/// One metadata block, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaMetadata {
    /// The master whose segment the frame holds.
    pub master_id: u64,
    /// The segment of that master's log.
    pub segment_id: u64,
    /// Store-wide write sequence; of a frame's two valid slots the larger is newer.
    pub sequence: u64,
    /// The segment area size of the file the block was written in.
    pub segment_bytes: u32,
    /// The frame the block was written for.
    pub frame_index: u32,
    /// Valid bytes at the start of the segment area.
    pub length: u32,
    /// crc32c of the `length` valid bytes.
    pub data_crc: u32,
    /// The replica is closed: complete and read-only.
    pub closed: bool,
    /// The replica was written in atomic mode: it is valid only once closed.
    pub atomic: bool,
}

/// Why a metadata block was rejected. A restart treats every one of these except
/// [`MetadataError::Blank`] as damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataError {
    /// Fewer than [`METADATA_BLOCK_BYTES`] bytes were given.
    #[error("metadata block truncated: {available} of {METADATA_BLOCK_BYTES} bytes")]
    Truncated { available: usize },
    /// Every byte is zero: an unused or freed slot, not damage.
    #[error("metadata block is blank")]
    Blank,
    /// The block does not start with [`METADATA_MAGIC`].
    #[error("bad metadata magic {0:02x?}")]
    BadMagic([u8; 8]),
    /// A format version this code does not read.
    #[error("unsupported metadata version {0}")]
    UnsupportedVersion(u16),
    /// The block checksum does not match its contents.
    #[error("metadata checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadChecksum { stored: u32, computed: u32 },
    /// Flag bits this version does not define are set.
    #[error("unknown metadata flags {0:#06x}")]
    UnknownFlags(u16),
    /// The reserved bytes are not zero.
    #[error("reserved metadata bytes are not zero")]
    NonZeroReserved,
    /// `segment_bytes` is zero or above [`FRAME_SEGMENT_BYTES`].
    #[error("metadata segment size {0} is out of range")]
    BadSegmentBytes(u32),
    /// `length` exceeds `segment_bytes`.
    #[error("metadata length {length} exceeds the segment size {segment_bytes}")]
    LengthExceedsSegment { length: u32, segment_bytes: u32 },
    /// `sequence` is above [`MAX_SEQUENCE`]: no store wrote it.
    #[error("metadata sequence {0} is above the largest a store writes")]
    SequenceOutOfRange(u64),
}

impl ReplicaMetadata {
    /// The block's bytes, checksum included.
    pub fn encode(&self) -> [u8; METADATA_BLOCK_BYTES] {
        // Paired with the check in `parse`: never write a block it would refuse.
        assert!(self.sequence <= MAX_SEQUENCE, "metadata sequence overflow");
        let mut b = [0u8; METADATA_BLOCK_BYTES];
        let mut flags = 0u16;
        if self.closed {
            flags |= FLAG_CLOSED;
        }
        if self.atomic {
            flags |= FLAG_ATOMIC;
        }
        b[..VERSION_AT].copy_from_slice(&METADATA_MAGIC);
        b[VERSION_AT..FLAGS_AT].copy_from_slice(&METADATA_VERSION.to_le_bytes());
        b[FLAGS_AT..SEGMENT_BYTES_AT].copy_from_slice(&flags.to_le_bytes());
        b[SEGMENT_BYTES_AT..MASTER_AT].copy_from_slice(&self.segment_bytes.to_le_bytes());
        b[MASTER_AT..SEGMENT_AT].copy_from_slice(&self.master_id.to_le_bytes());
        b[SEGMENT_AT..SEQUENCE_AT].copy_from_slice(&self.segment_id.to_le_bytes());
        b[SEQUENCE_AT..FRAME_AT].copy_from_slice(&self.sequence.to_le_bytes());
        b[FRAME_AT..LENGTH_AT].copy_from_slice(&self.frame_index.to_le_bytes());
        b[LENGTH_AT..DATA_CRC_AT].copy_from_slice(&self.length.to_le_bytes());
        b[DATA_CRC_AT..RESERVED_AT].copy_from_slice(&self.data_crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..BLOCK_CRC_AT]);
        b[BLOCK_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        b
    }
}

/// Parses the first [`METADATA_BLOCK_BYTES`] of `bytes` (later bytes are ignored).
/// Succeeds only if every byte of the block is as [`ReplicaMetadata::encode`] writes
/// it; never panics.
pub fn parse(bytes: &[u8]) -> Result<ReplicaMetadata, MetadataError> {
    let Some(b) = bytes.get(..METADATA_BLOCK_BYTES) else {
        return Err(MetadataError::Truncated {
            available: bytes.len(),
        });
    };
    if b.iter().all(|&x| x == 0) {
        return Err(MetadataError::Blank);
    }
    let magic = array::<8>(b, 0);
    if magic != METADATA_MAGIC {
        return Err(MetadataError::BadMagic(magic));
    }
    // The version is checked before the checksum so that a block of a later format
    // (which may checksum differently) is reported as such, not as damage.
    let version = u16::from_le_bytes(array(b, VERSION_AT));
    if version != METADATA_VERSION {
        return Err(MetadataError::UnsupportedVersion(version));
    }
    let stored = u32::from_le_bytes(array(b, BLOCK_CRC_AT));
    let computed = crc32c::crc32c(&b[..BLOCK_CRC_AT]);
    if stored != computed {
        return Err(MetadataError::BadChecksum { stored, computed });
    }
    let flags = u16::from_le_bytes(array(b, FLAGS_AT));
    if flags & !KNOWN_FLAGS != 0 {
        return Err(MetadataError::UnknownFlags(flags));
    }
    if b[RESERVED_AT..BLOCK_CRC_AT].iter().any(|&x| x != 0) {
        return Err(MetadataError::NonZeroReserved);
    }
    let segment_bytes = u32::from_le_bytes(array(b, SEGMENT_BYTES_AT));
    if segment_bytes == 0 || segment_bytes > FRAME_SEGMENT_BYTES {
        return Err(MetadataError::BadSegmentBytes(segment_bytes));
    }
    let sequence = u64::from_le_bytes(array(b, SEQUENCE_AT));
    if sequence > MAX_SEQUENCE {
        return Err(MetadataError::SequenceOutOfRange(sequence));
    }
    let length = u32::from_le_bytes(array(b, LENGTH_AT));
    if length > segment_bytes {
        return Err(MetadataError::LengthExceedsSegment {
            length,
            segment_bytes,
        });
    }
    Ok(ReplicaMetadata {
        master_id: u64::from_le_bytes(array(b, MASTER_AT)),
        segment_id: u64::from_le_bytes(array(b, SEGMENT_AT)),
        sequence,
        segment_bytes,
        frame_index: u32::from_le_bytes(array(b, FRAME_AT)),
        length,
        data_crc: u32::from_le_bytes(array(b, DATA_CRC_AT)),
        closed: flags & FLAG_CLOSED != 0,
        atomic: flags & FLAG_ATOMIC != 0,
    })
}

/// The bytes of both slots of a frame: `first` in slot 0, `second` in slot 1, blank
/// where `None`, padding zero.
pub fn encode_slots(
    first: Option<&ReplicaMetadata>,
    second: Option<&ReplicaMetadata>,
) -> [u8; METADATA_SLOTS_BYTES] {
    let mut region = [0u8; METADATA_SLOTS_BYTES];
    for (slot, meta) in [first, second].into_iter().enumerate() {
        if let Some(meta) = meta {
            let at = slot * METADATA_SLOT_BYTES;
            region[at..at + METADATA_BLOCK_BYTES].copy_from_slice(&meta.encode());
        }
    }
    region
}

/// `N` bytes of `b` from `at`; callers pass offsets inside the checked 64-byte block.
fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> ReplicaMetadata {
        ReplicaMetadata {
            master_id: 0x0102_0304_0506_0708,
            segment_id: 42,
            sequence: 7,
            segment_bytes: 8192,
            frame_index: 3,
            length: 5000,
            data_crc: 0xdead_beef,
            closed: true,
            atomic: true,
        }
    }

    /// Rewrites the block checksum so a test can reach the checks behind it.
    fn reseal(b: &mut [u8; METADATA_BLOCK_BYTES]) {
        let crc = crc32c::crc32c(&b[..BLOCK_CRC_AT]);
        b[BLOCK_CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    }

    #[test]
    fn encode_round_trip() {
        for (closed, atomic) in [(false, false), (true, false), (false, true), (true, true)] {
            let m = ReplicaMetadata {
                closed,
                atomic,
                ..sample()
            };
            assert_eq!(parse(&m.encode()), Ok(m));
        }
    }

    #[test]
    fn encode_golden_bytes() {
        let b = sample().encode();
        assert_eq!(&b[..8], b"RSBACKUP");
        assert_eq!(&b[8..10], &[1, 0]);
        assert_eq!(&b[10..12], &[3, 0]);
        assert_eq!(&b[12..16], &8192u32.to_le_bytes());
        assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[24..32], &42u64.to_le_bytes());
        assert_eq!(&b[32..40], &7u64.to_le_bytes());
        assert_eq!(&b[40..44], &3u32.to_le_bytes());
        assert_eq!(&b[44..48], &5000u32.to_le_bytes());
        assert_eq!(&b[48..52], &[0xef, 0xbe, 0xad, 0xde]);
        assert_eq!(&b[52..60], &[0; 8]);
        assert_eq!(&b[60..64], &crc32c::crc32c(&b[..60]).to_le_bytes());
    }

    #[test]
    fn parse_blank_block() {
        assert_eq!(parse(&[0u8; 64]), Err(MetadataError::Blank));
        assert_eq!(parse(&[0u8; 512]), Err(MetadataError::Blank));
    }

    #[test]
    fn parse_ignores_bytes_after_block() {
        let mut slot = [0xaau8; METADATA_SLOT_BYTES];
        slot[..64].copy_from_slice(&sample().encode());
        assert_eq!(parse(&slot), Ok(sample()));
    }

    #[test]
    fn parse_every_truncation_errors() {
        let b = sample().encode();
        for n in 0..METADATA_BLOCK_BYTES {
            assert_eq!(
                parse(&b[..n]),
                Err(MetadataError::Truncated { available: n }),
                "{n} bytes"
            );
        }
    }

    /// Every possible change of every single byte of a valid block is rejected.
    #[test]
    fn parse_every_byte_corruption_rejected() {
        let good = sample().encode();
        for at in 0..METADATA_BLOCK_BYTES {
            for x in 1..=255u8 {
                let mut b = good;
                b[at] ^= x;
                assert!(parse(&b).is_err(), "byte {at} xor {x:#04x} accepted");
            }
        }
    }

    #[test]
    fn parse_field_errors() {
        let mut b = sample().encode();
        b[0] = b'X';
        assert!(matches!(parse(&b), Err(MetadataError::BadMagic(_))));

        let mut b = sample().encode();
        b[VERSION_AT] = 2;
        assert_eq!(parse(&b), Err(MetadataError::UnsupportedVersion(2)));

        let mut b = sample().encode();
        b[LENGTH_AT] ^= 1;
        assert!(matches!(parse(&b), Err(MetadataError::BadChecksum { .. })));

        let mut b = sample().encode();
        b[FLAGS_AT] = 0x04;
        reseal(&mut b);
        assert_eq!(parse(&b), Err(MetadataError::UnknownFlags(4)));

        let mut b = sample().encode();
        b[RESERVED_AT + 3] = 1;
        reseal(&mut b);
        assert_eq!(parse(&b), Err(MetadataError::NonZeroReserved));

        for bad in [0, FRAME_SEGMENT_BYTES + 1] {
            let m = ReplicaMetadata {
                segment_bytes: bad,
                length: 0,
                ..sample()
            };
            assert_eq!(parse(&m.encode()), Err(MetadataError::BadSegmentBytes(bad)));
        }

        let m = ReplicaMetadata {
            length: 8193,
            ..sample()
        };
        assert_eq!(
            parse(&m.encode()),
            Err(MetadataError::LengthExceedsSegment {
                length: 8193,
                segment_bytes: 8192
            })
        );
    }

    /// Regression (fuzz target `backup_frames`): a checksummed block with sequence
    /// `u64::MAX` made a restart overflow computing the next sequence number.
    #[test]
    fn parse_rejects_sequence_above_max() {
        let mut b = sample().encode();
        for bad in [MAX_SEQUENCE + 1, u64::MAX] {
            b[SEQUENCE_AT..FRAME_AT].copy_from_slice(&bad.to_le_bytes());
            reseal(&mut b);
            assert_eq!(parse(&b), Err(MetadataError::SequenceOutOfRange(bad)));
        }
        let m = ReplicaMetadata {
            sequence: MAX_SEQUENCE,
            ..sample()
        };
        assert_eq!(parse(&m.encode()), Ok(m));
    }

    #[test]
    fn encode_slots_places_blocks() {
        let m = sample();
        let r = encode_slots(Some(&m), None);
        assert_eq!(parse(&r[..]), Ok(m));
        assert_eq!(parse(&r[METADATA_SLOT_BYTES..]), Err(MetadataError::Blank));
        let r = encode_slots(None, Some(&m));
        assert_eq!(parse(&r[..]), Err(MetadataError::Blank));
        assert_eq!(parse(&r[METADATA_SLOT_BYTES..]), Ok(m));
        assert!(r[METADATA_SLOT_BYTES + METADATA_BLOCK_BYTES..]
            .iter()
            .all(|&x| x == 0));
    }

    fn any_metadata() -> impl Strategy<Value = ReplicaMetadata> {
        (
            any::<u64>(),
            any::<u64>(),
            0..=MAX_SEQUENCE,
            1..=FRAME_SEGMENT_BYTES,
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(
                |(
                    master_id,
                    segment_id,
                    sequence,
                    segment_bytes,
                    frame_index,
                    len,
                    data_crc,
                    closed,
                    atomic,
                )| {
                    ReplicaMetadata {
                        master_id,
                        segment_id,
                        sequence,
                        segment_bytes,
                        frame_index,
                        length: len % (segment_bytes + 1),
                        data_crc,
                        closed,
                        atomic,
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn parse_arbitrary_bytes_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = parse(&bytes);
        }

        /// Random bytes behind a valid magic and version get past the first checks;
        /// they must still be rejected (by the checksum) unless they happen to be a
        /// block `encode` would write.
        #[test]
        fn parse_random_block_with_header_reencodes(
            tail in proptest::collection::vec(any::<u8>(), 54),
        ) {
            let mut b = [0u8; METADATA_BLOCK_BYTES];
            b[..8].copy_from_slice(&METADATA_MAGIC);
            b[8..10].copy_from_slice(&METADATA_VERSION.to_le_bytes());
            b[10..].copy_from_slice(&tail);
            if let Ok(m) = parse(&b) {
                prop_assert_eq!(m.encode(), b);
            }
            reseal(&mut b);
            if let Ok(m) = parse(&b) {
                prop_assert_eq!(m.encode(), b);
            }
        }

        #[test]
        fn encode_parse_round_trip_any(m in any_metadata()) {
            prop_assert_eq!(parse(&m.encode()), Ok(m));
        }

        /// Any mutation of a valid block (1–8 bytes changed anywhere) is rejected.
        #[test]
        fn parse_mutated_block_rejected(
            m in any_metadata(),
            edits in proptest::collection::vec((0..METADATA_BLOCK_BYTES, 1..=255u8), 1..8),
        ) {
            let good = m.encode();
            let mut b = good;
            for (at, x) in edits {
                b[at] ^= x;
            }
            if b != good {
                prop_assert!(parse(&b).is_err());
            }
        }
    }
}
