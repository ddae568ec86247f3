//! What the coordinator learns from a master's `GetServerStats` text to decide
//! where data may go (issue 20): its log's size and use, and the bytes of each
//! tablet it holds (the per-tablet statistics the master keeps on every write,
//! R§3). Used to refuse a migration whose target lacks the memory (K§2.3) and
//! to show a migration's total.
//!
//! Thread-safety: plain data and one async request; nothing shared.

use std::collections::BTreeMap;
use std::time::Duration;

use ramstore_wire::{decode_response, encode_request, Request, Response};

use crate::cluster::Cluster;
use crate::coordinator::address_of;
use crate::error::CoordinatorError;
use crate::server_list::ServerId;

/// How long the coordinator waits for a master's statistics.
const STATS_DEADLINE_MS: u64 = 2_000;

/// The share of its log a master may fill by receiving a migration. RAMCloud
/// runs its masters at 80–90% memory utilisation (R§4.6); above that the
/// cleaner's cost per freed byte climbs steeply (L§5), so a migration must not
/// push its target beyond it.
pub const MAX_FILL_AFTER_MIGRATION: f64 = 0.9;

/// One tablet's counts as its master reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TabletBytes {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    pub objects: u64,
    /// Bytes of the tablet's live objects in the log.
    pub bytes: u64,
}

/// A master's memory as its statistics say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MasterStats {
    /// Bytes of log memory (`--memory`).
    pub memory_bytes: u64,
    /// Bytes in use: live objects and tombstones.
    pub used_bytes: u64,
    pub tablets: Vec<TabletBytes>,
    /// `(bytes, objects)` pulled so far by each migration coming in, by id.
    pub incoming: BTreeMap<u64, (u64, u64)>,
    /// A ctime for a tablet the master takes from now on (at most the one it
    /// gives the tablet; design notes "Tablet ctime"; 0 from a master that
    /// does not report it: no cutoff).
    pub tenure_floor: u64,
}

impl MasterStats {
    /// Parses `key=value` lines; missing or malformed lines count as zero (an
    /// older master), never as an error.
    pub fn parse(text: &str) -> Self {
        let mut stats = MasterStats::default();
        let hex = |v: &str| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        for (key, value) in text.lines().filter_map(|l| l.split_once('=')) {
            match key {
                "memory_bytes" => stats.memory_bytes = value.parse().unwrap_or(0),
                "log_tenure_floor" => stats.tenure_floor = value.parse().unwrap_or(0),
                "live_object_bytes" | "tombstone_bytes" => {
                    stats.used_bytes += value.parse::<u64>().unwrap_or(0)
                }
                _ if key.starts_with("migration.") => {
                    let mut parts = key.split('.').skip(1);
                    let (Some(id), Some(what)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let (Ok(id), Ok(n)) = (id.parse(), value.parse::<u64>()) else {
                        continue;
                    };
                    let entry = stats.incoming.entry(id).or_default();
                    match what {
                        "bytes" => entry.0 = n,
                        "objects" => entry.1 = n,
                        _ => {}
                    }
                }
                _ => {
                    if let Some(t) = parse_tablet(key, value, hex) {
                        stats.tablets.push(t);
                    }
                }
            }
        }
        stats
    }

    /// Bytes and objects of this master's tablets inside `[start, end]` of
    /// `table_id`.
    pub fn range_counts(&self, table_id: u64, start: u64, end: u64) -> (u64, u64) {
        self.tablets
            .iter()
            .filter(|t| t.table_id == table_id && t.start_hash >= start && t.end_hash <= end)
            .fold((0, 0), |(b, o), t| (b + t.bytes, o + t.objects))
    }

    /// The bytes this master can still take while staying at or below
    /// [`MAX_FILL_AFTER_MIGRATION`] of its memory.
    pub fn room(&self) -> u64 {
        let limit = (self.memory_bytes as f64 * MAX_FILL_AFTER_MIGRATION) as u64;
        limit.saturating_sub(self.used_bytes)
    }
}

/// `tablet.TABLE.START=END entries=N bytes=B` (the master's stats line).
fn parse_tablet(key: &str, value: &str, hex: impl Fn(&str) -> Option<u64>) -> Option<TabletBytes> {
    let mut parts = key.strip_prefix("tablet.")?.split('.');
    let table_id = parts.next()?.parse().ok()?;
    let start_hash = hex(parts.next()?)?;
    let mut fields = value.split_whitespace();
    let end_hash = hex(fields.next()?)?;
    let mut t = TabletBytes {
        table_id,
        start_hash,
        end_hash,
        objects: 0,
        bytes: 0,
    };
    for (k, v) in fields.filter_map(|f| f.split_once('=')) {
        match k {
            "entries" => t.objects = v.parse().ok()?,
            "bytes" => t.bytes = v.parse().ok()?,
            _ => {}
        }
    }
    Some(t)
}

/// Asks master `id` for its statistics; `None` if it did not answer.
pub async fn fetch(cluster: &Cluster, id: ServerId) -> Option<MasterStats> {
    let address = address_of(cluster.core().state(), id);
    let mut frame = Vec::new();
    encode_request(0, &Request::GetServerStats, &mut frame).ok()?;
    let deadline = Duration::from_millis(STATS_DEADLINE_MS);
    let bytes = cluster
        .transport
        .call(&address, frame, deadline)
        .await
        .ok()?;
    match decode_response(&bytes) {
        Ok((_, Response::GetServerStats { text })) => Some(MasterStats::parse(text)),
        _ => None,
    }
}

/// Checks that `target` has room for the tablet `[start, end]` of table `name`
/// (K§2.3: a target without enough free memory is refused up front). Returns
/// the range's bytes and objects as its source counts them, or `None` when the
/// request is bad in a way [`crate::CoordinatorCore::begin_migration`] refuses
/// with a clearer error (unknown table, not one tablet, bad target).
pub(crate) async fn check_room(
    cluster: &Cluster,
    name: &str,
    (start, end): (u64, u64),
    target: ServerId,
) -> Result<Option<(u64, u64)>, CoordinatorError> {
    let found = {
        let core = cluster.core();
        let state = core.state();
        let tablet = state.tables().get(name).and_then(|t| {
            t.tablets
                .iter()
                .find(|x| x.start_hash == start && x.end_hash == end)
                .copied()
        });
        let target_ok = state
            .servers()
            .get(target)
            .is_some_and(|e| e.is_up() && e.is_master());
        tablet.filter(|t| target_ok && t.server_id != target)
    };
    let Some(tablet) = found else {
        return Ok(None);
    };
    let source = fetch(cluster, tablet.server_id)
        .await
        .ok_or(CoordinatorError::ServerDidNotAnswer(tablet.server_id))?;
    let into = fetch(cluster, target)
        .await
        .ok_or(CoordinatorError::ServerDidNotAnswer(target))?;
    let (bytes, objects) = source.range_counts(tablet.table_id, start, end);
    if bytes > into.room() {
        return Err(CoordinatorError::TargetLacksMemory {
            target,
            needed: bytes,
            room: into.room(),
            limit_pct: (MAX_FILL_AFTER_MIGRATION * 100.0).round() as u32,
        });
    }
    Ok(Some((bytes, objects)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "server_id=1\nmemory_bytes=1000\nlive_object_bytes=300\n\
        tombstone_bytes=20\ntablet.2.0x0000000000000000=0x7fffffffffffffff entries=5 bytes=100\n\
        tablet.2.0x8000000000000000=0xffffffffffffffff entries=7 bytes=200\n\
        migration.4.bytes=50\nmigration.4.objects=3\n";

    #[test]
    fn parse_reads_memory_and_tablets() {
        let s = MasterStats::parse(TEXT);
        assert_eq!((s.memory_bytes, s.used_bytes), (1000, 320));
        assert_eq!(s.tablets.len(), 2);
        assert_eq!(s.tablets[1].start_hash, 1 << 63);
        assert_eq!((s.tablets[1].objects, s.tablets[1].bytes), (7, 200));
        assert_eq!(s.incoming.get(&4), Some(&(50, 3)));
    }

    #[test]
    fn range_counts_sums_the_tablets_inside_the_range() {
        let s = MasterStats::parse(TEXT);
        assert_eq!(s.range_counts(2, 0, u64::MAX), (300, 12));
        assert_eq!(s.range_counts(2, 1 << 63, u64::MAX), (200, 7));
        assert_eq!(s.range_counts(3, 0, u64::MAX), (0, 0));
    }

    #[test]
    fn room_keeps_the_fill_limit() {
        let s = MasterStats::parse(TEXT);
        assert_eq!(s.room(), 900 - 320);
        let full = MasterStats {
            memory_bytes: 100,
            used_bytes: 95,
            ..MasterStats::default()
        };
        assert_eq!(full.room(), 0);
    }

    #[test]
    fn parse_ignores_garbage() {
        let s = MasterStats::parse("memory_bytes=x\ntablet.zz=1\nnonsense\n");
        assert_eq!(s, MasterStats::default());
    }
}
