//! Every byte of a log entry: the on-log format, its encoders and its parsers.
//!
//! # Frame
//!
//! Every entry, whatever its type, is framed the same way, so the log can be walked
//! from a segment's first byte without knowing anything about the entries' contents:
//!
//! ```text
//! +------+-----------------+---------------------+--------------+
//! | type | body_len        | body                | crc32c       |
//! | u8   | varint, 1..=4 B | body_len bytes      | u32 LE, 4 B  |
//! +------+-----------------+---------------------+--------------+
//! |<------------- covered by the crc ----------->|
//! ```
//!
//! Types: 1 SegmentHeader, 2 Object (0x82 for an object with expiry), 3 Tombstone, 4 LogDigest, 5 SafeVersion,
//! 6 TabletStats, 7 RpcResult (a RIFL completion record; its body is documented in
//! `rpc_result`), 8 TxRecord (a transaction's prepared op or its decided mark;
//! documented in `tx_record`). Type 0 is invalid because unwritten log memory is zero: a scan that
//! reaches the end of the written part of a segment stops with
//! [`EntryError::UnknownType`]`(0)` instead of reading garbage. `body_len` is at most
//! [`SEGMENT_BYTES`] (2^23), so its varint never exceeds four bytes.
//!
//! The checksum covers the type and the length as well as the body: a flipped bit in
//! either would otherwise make the parser read a well-checksummed *different* entry,
//! or mis-frame everything after it. [`parse_entry`] therefore succeeds only if every
//! byte of the entry is as written.
//!
//! All integers are LEB128 varints ([`crate::varint`]) unless marked otherwise. Varint
//! decoding rejects non-canonical encodings, so an entry that parses re-encodes to
//! exactly the same bytes.
//!
//! # Bodies
//!
//! Object (type 2); the value takes whatever the body has left after the key:
//!
//! ```text
//! +----------+---------+-------+---------+-------------+-------------------+
//! | table_id | version | birth | key_len | key         | value             |
//! | varint   | varint  | varint| varint  | key_len B   | rest of the body  |
//! +----------+---------+-------+---------+-------------+-------------------+
//! ```
//!
//! `birth` is a logical age stamp: the cleaner uses it to judge how long the data has
//! lived, which survives copying an object into a new segment.
//!
//! Object with expiry (type byte 0x82, [`OBJECT_WITH_EXPIRY_BYTE`]: the object's
//! byte with the high bit set); it parses as an Object whose layout carries
//! `expires_at`, and its body has one more varint after `birth`:
//!
//! ```text
//! +----------+---------+-------+------------+---------+-----------+-----------+
//! | table_id | version | birth | expires_at | key_len | key       | value     |
//! | varint   | varint  | varint| varint     | varint  | key_len B | rest      |
//! +----------+---------+-------+------------+---------+-----------+-----------+
//! ```
//!
//! `expires_at` is an absolute wall-clock time in ms since the Unix epoch, from
//! the `Clock` seam. The expiry lives in the object's own entry (R§4: the log is
//! the truth), so whatever copies or replays the entry (cleaner, recovery, cold
//! start) carries it without knowing about it; objects that never expire keep
//! type 2 and pay no byte for the feature.
//!
//! Tombstone (type 3); the body ends exactly after the key:
//!
//! ```text
//! +----------+---------+------------+---------+-----------+
//! | table_id | version | segment_id | key_len | key       |
//! | varint   | varint  | varint     | varint  | key_len B |
//! +----------+---------+------------+---------+-----------+
//! ```
//!
//! `version` is the version of the object the tombstone kills and `segment_id` the
//! segment that held it: once that segment has left the log, the tombstone has nothing
//! left to kill and the cleaner may drop it.
//!
//! SegmentHeader (type 1), the first entry of every segment:
//!
//! ```text
//! +-----------+------------+
//! | master_id | segment_id |
//! | varint    | varint     |
//! +-----------+------------+
//! ```
//!
//! LogDigest (type 4), the list of segments that make up the log when a head segment
//! is opened, so recovery can tell which segments belong to the log:
//!
//! ```text
//! +--------+--------------+-----+------------------+
//! | count  | segment_id 0 | ... | segment_id n - 1 |
//! | varint | varint       |     | varint           |
//! +--------+--------------+-----+------------------+
//! ```
//!
//! SafeVersion (type 5), a floor for version numbers that survives the deletion of
//! every object carrying a higher one:
//!
//! ```text
//! +---------+
//! | version |
//! | varint  |
//! +---------+
//! ```
//!
//! TabletStats (type 6), per-tablet occupancy so recovery can plan partitions:
//!
//! ```text
//! +--------+------------------------------------------------------------+-----+
//! | count  | table_id | start_hash | end_hash | entry_count | bytes       | ... |
//! | varint | varint   | u64 LE 8 B | u64 LE 8B| varint      | varint      |     |
//! +--------+------------------------------------------------------------+-----+
//! ```
//!
//! The hashes are fixed-width because they are uniformly distributed: a varint would
//! make most of them longer, not shorter.
//!
//! # Why varints
//!
//! Log-structured memory stores every object as one log entry (L§3), and the hash
//! table points straight at those entries in the log (R§4.1 Fig. 5), so whatever
//! metadata an entry carries is paid by every object in memory. With the small objects
//! these systems are built for (around 100 bytes), fixed 8-byte table ids, versions,
//! birth stamps and lengths would add more than 30 % to each object; varints bring the
//! per-object overhead down to about ten bytes (see [`object_entry_len`]). Fields that
//! are usually small (table ids, key lengths, lengths) cost one byte, and large ones
//! cost no more than they need.
//!
//! # Use
//!
//! The append path writes an object without staging it: [`object_header`] gives the
//! bytes before the key, the caller copies key and value into the log, and
//! [`entry_crc`] computes the checksum over the three pieces. Readers that hold a
//! reference to an object parse only its first [`MAX_HEADER_BYTES`] bytes with
//! [`parse_object_layout`]; recovery and tests use [`parse_entry`], which checks
//! everything. Parsers never panic and never allocate, whatever their input.
//!
//! # Layout of this module
//!
//! `format` holds the types every part shares (entry types, errors, layouts and
//! the size bounds), `parse` the parsers and the parsed views, `encode` the
//! encoders; `tests` checks that they agree.

mod encode;
mod format;
mod parse;
mod rpc_result;
#[cfg(test)]
mod tests;
mod tx_record;

pub use self::encode::*;
pub use self::format::*;
pub use self::parse::*;
pub use self::rpc_result::*;
pub use self::tx_record::*;
