//! Cold start: a storage server restarted on its old backup directory reloads the
//! log of the master it was from that master's replicas on the other backups,
//! before it enlists (issue 4's "direct reload"; crash recovery, R§7, will do the
//! same work partitioned over many recovery masters).
//!
//! # Protocol
//! 1. After enlisting, a server that replicates records its server id in
//!    `<backup_dir>/server.id` (written to a temporary file, synced, renamed).
//! 2. A server that finds that file at start-up serves its backup first (other
//!    masters reloading need it), then asks the coordinator for the server list and
//!    the tablets the old id owned, and asks every backup listed (not Removed) which
//!    replicas of the old id it holds (R§7.4).
//! 3. The replica of the highest segment id that starts with a log digest is the
//!    newest head; its digest names every segment of the log. Until some backup
//!    offers each of them, it asks again (backups restart at their own pace), for
//!    at most [`COLD_START_WAIT_MS`].
//! 4. Every named segment is read and replayed: the newest version of each key
//!    wins, a tombstone kills versions up to its own (R§7.6); the safe version is
//!    raised above every version seen, so versions never go back (R§3.1).
//! 5. The server takes the old id's tablets, restores the live objects (its new log
//!    is replicated as usual once it enlists), and enlists naming the old id as the
//!    one it replaces; the coordinator removes the old id, and the backups free its
//!    replicas (R§8).
//!
//! Known gap: the old replicas may be freed before the reloaded objects are
//! durable in the new log; a crash of this server in that window loses them.
//! Crash recovery (issue 5) closes it by removing the old id only once recovery
//! is done.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use ramstore_client::{BackupClient, Client, ClientOptions};
use ramstore_log::entry::{parse_entry, Entry, EntryError};
use ramstore_master::ObjectStore;

/// The file under the backup directory that names the server id of the last run.
pub const IDENTITY_FILE: &str = "server.id";
/// Longest a cold start waits for the backups to offer a complete log.
pub const COLD_START_WAIT_MS: u64 = 60_000;
/// Pause between two rounds of asking the backups.
const ASK_AGAIN_MS: u64 = 200;

/// Why a cold start failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColdStartError {
    #[error("reading or writing {path}: {source}")]
    Identity {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "cold start of master {old_id}: segments {missing:?} named by the log digest are on \
         no reachable backup after {waited_ms} ms; start the other servers of the cluster, \
         or move {identity} away to start empty (its data is then lost)"
    )]
    Incomplete {
        old_id: u64,
        missing: Vec<u64>,
        waited_ms: u64,
        identity: String,
    },
    #[error("cold start of master {old_id}: segment {segment_id}: {reason}")]
    Replay {
        old_id: u64,
        segment_id: u64,
        reason: String,
    },
    #[error("cold start of master {old_id}: coordinator: {reason}")]
    Coordinator { old_id: u64, reason: String },
}

/// What a cold start reloaded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadSummary {
    pub segments: usize,
    pub objects: usize,
    pub tablets: usize,
    pub max_version: u64,
}

/// Who this server was in its previous run: its server id and the address it
/// enlisted with. The address tells the old entry apart from a server that got the
/// same id from a coordinator whose state was reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub server_id: u64,
    /// `None` in files written before the address was recorded.
    pub address: Option<String>,
}

/// The identity recorded by the previous run, if any (`ID [ADDRESS]`).
pub fn read_identity(dir: &Path) -> Result<Option<Identity>, ColdStartError> {
    let path = dir.join(IDENTITY_FILE);
    let bad = |what: &str| ColdStartError::Identity {
        path: path.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string()),
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut words = text.split_whitespace();
            let server_id = words
                .next()
                .and_then(|w| w.parse().ok())
                .ok_or_else(|| bad("no server id"))?;
            let address = words.next().map(str::to_string);
            if words.next().is_some() {
                return Err(bad("more than an id and an address"));
            }
            Ok(Some(Identity { server_id, address }))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ColdStartError::Identity {
            path: path.display().to_string(),
            source,
        }),
    }
}

/// Records this server's identity, atomically (temporary file, fsync, rename).
pub fn write_identity(dir: &Path, server_id: u64, address: &str) -> Result<(), ColdStartError> {
    use std::io::Write;
    let path = dir.join(IDENTITY_FILE);
    let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
    let fail = |source| ColdStartError::Identity {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::File::create(&tmp).map_err(fail)?;
    f.write_all(format!("{server_id} {address}\n").as_bytes())
        .map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The newest state of one key in a log being replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Newest {
    version: u64,
    /// `None`: a tombstone, every version up to `version` is dead.
    value: Option<Vec<u8>>,
}

/// Replays segments in any order, keeping the newest state of each key (R§7.6).
/// Keys are looked up borrowed: an entry costs an allocation only for a key not
/// seen before, and a newer value reuses the older one's buffer.
#[derive(Debug, Default)]
pub struct LogReplay {
    keys: HashMap<u64, HashMap<Vec<u8>, Newest>>,
    max_version: u64,
}

impl LogReplay {
    /// Applies every entry of one segment's bytes.
    pub fn add_segment(&mut self, mut bytes: &[u8]) -> Result<(), EntryError> {
        while !bytes.is_empty() {
            let (entry, len) = parse_entry(bytes)?;
            bytes = &bytes[len..];
            match entry {
                Entry::Object(o) => self.apply(o.table_id, o.key, o.version, Some(o.value)),
                Entry::Tombstone(t) => self.apply(t.table_id, t.key, t.version, None),
                Entry::SafeVersion(s) => self.max_version = self.max_version.max(s.version),
                Entry::SegmentHeader(_) | Entry::LogDigest(_) | Entry::TabletStats(_) => {}
            }
        }
        Ok(())
    }

    /// Keeps the entry if it is newer than what the key has: a higher version
    /// wins, and at equal versions a tombstone wins over its object.
    fn apply(&mut self, table_id: u64, key: &[u8], version: u64, value: Option<&[u8]>) {
        self.max_version = self.max_version.max(version);
        let rank = |version: u64, value: Option<_>| (version, value.is_none());
        let table = self.keys.entry(table_id).or_default();
        match table.get_mut(key) {
            Some(cur) if rank(version, value) > rank(cur.version, cur.value.as_deref()) => {
                cur.version = version;
                match (value, &mut cur.value) {
                    (Some(v), Some(buf)) => {
                        buf.clear();
                        buf.extend_from_slice(v);
                    }
                    (v, slot) => *slot = v.map(<[u8]>::to_vec),
                }
            }
            Some(_) => {}
            None => {
                table.insert(
                    key.to_vec(),
                    Newest {
                        version,
                        value: value.map(<[u8]>::to_vec),
                    },
                );
            }
        }
    }

    /// The highest version any entry carried.
    pub fn max_version(&self) -> u64 {
        self.max_version
    }

    /// The live objects: (table, key, version, value).
    pub fn live(&self) -> impl Iterator<Item = (u64, &[u8], u64, &[u8])> + '_ {
        self.keys.iter().flat_map(|(&table, keys)| {
            keys.iter().filter_map(move |(key, n)| {
                let value = n.value.as_deref()?;
                Some((table, key.as_slice(), n.version, value))
            })
        })
    }
}

/// The segment ids named by the log digest in `bytes` (a segment's first
/// entries), if it has one.
pub fn digest_of(mut bytes: &[u8]) -> Option<Vec<u64>> {
    // A head starts with its header, then its digest (R§7.4); look a few entries in.
    for _ in 0..4 {
        let (entry, len) = parse_entry(bytes).ok()?;
        if let Entry::LogDigest(d) = entry {
            return Some(d.segment_ids().collect());
        }
        bytes = &bytes[len..];
    }
    None
}

/// A backup as the coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ListedBackup {
    server_id: u64,
    address: String,
}

/// The not-removed servers with a backup service in the coordinator's stats text
/// (`server.ID=ADDR STATUS ... services=BITS ...`).
fn listed_backups(stats: &str) -> Vec<ListedBackup> {
    stats
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let server_id = key.strip_prefix("server.")?.parse().ok()?;
            let mut words = value.split_whitespace();
            let address = words.next()?.to_string();
            let status = words.next()?;
            let services: u32 = words
                .find_map(|w| w.strip_prefix("services="))
                .and_then(|s| s.parse().ok())?;
            let backup = services & ramstore_wire::SERVICE_BACKUP != 0;
            (status != "removed" && backup).then_some(ListedBackup { server_id, address })
        })
        .collect()
}

/// The address and status word of server `id` in the coordinator's stats text,
/// if listed.
fn entry_of(stats: &str, id: u64) -> Option<(&str, &str)> {
    let prefix = format!("server.{id}=");
    let mut words = stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))?
        .split_whitespace();
    Some((words.next()?, words.next()?))
}

/// Whether the coordinator's entry for the old id is this server's previous run
/// (up or crashed, and enlisted from the recorded address).
fn is_ours(stats: &str, identity: &Identity) -> bool {
    match entry_of(stats, identity.server_id) {
        Some((address, "up" | "crashed")) => {
            identity.address.as_deref().is_none_or(|a| a == address)
        }
        _ => false,
    }
}

/// Reloads the log of `old_id` into `store` (see the module doc) and returns what
/// it found. `identity` is the identity file's path, for the error message.
///
/// `Ok(None)`: the coordinator's entry for the old id is not this server's
/// previous run (its state was reset, or another process already replaced it), so
/// nothing was reloaded and the caller must not enlist as its replacement.
pub async fn reload(
    coordinator: &str,
    identity: &Identity,
    store: &ObjectStore,
    backups: &BackupClient,
    identity_file: &Path,
) -> Result<Option<ReloadSummary>, ColdStartError> {
    let old_id = identity.server_id;
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_millis(COLD_START_WAIT_MS);
    let coord_err = |reason: String| ColdStartError::Coordinator { old_id, reason };
    let client = loop {
        match Client::connect(ClientOptions::new(coordinator)).await {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(coord_err(e.to_string()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(ASK_AGAIN_MS)).await,
        }
    };
    let mut missing = Vec::new();
    loop {
        let stats = client
            .server_stats(coordinator)
            .await
            .map_err(|e| coord_err(e.to_string()))?;
        if !is_ours(&stats, identity) {
            // The coordinator forgot this server (its state was reset; the id may
            // even belong to another server now) or another process replaced it:
            // no tablet waits for this log.
            tracing::warn!(
                old_id,
                "cold start: the coordinator lists no up or crashed entry of this server's previous run; starting empty"
            );
            return Ok(None);
        }
        let listed: Vec<ListedBackup> = listed_backups(&stats)
            .into_iter()
            .filter(|b| b.server_id != old_id)
            .collect();
        // Who holds which segment of the old master.
        let mut holders: HashMap<u64, Vec<(String, bool)>> = HashMap::new();
        let mut answered = 0;
        for b in &listed {
            if let Ok(replicas) = backups.get_replicas(&b.address, old_id).await {
                answered += 1;
                for r in replicas {
                    holders
                        .entry(r.segment_id)
                        .or_default()
                        .push((b.address.clone(), r.closed));
                }
            }
        }
        if let Some(head) = find_log(backups, old_id, &holders).await {
            missing = head
                .digest
                .iter()
                .copied()
                .filter(|id| !holders.contains_key(id))
                .collect();
            if missing.is_empty() {
                let tablets: Vec<_> = client
                    .tablet_map()
                    .await
                    .map_err(|e| coord_err(e.to_string()))?
                    .into_iter()
                    .filter(|t| t.server_id == old_id)
                    .collect();
                for t in &tablets {
                    // Owning them early is harmless: no client is sent here
                    // before the coordinator moves them at enlistment.
                    let _ = store.add_tablet(t.table_id, t.start_hash, t.end_hash);
                }
                let mut summary = replay(backups, old_id, &head, &holders, store).await?;
                summary.tablets = tablets.len();
                return Ok(Some(summary));
            }
        }
        // Every backup listed answered and none holds anything of this master: its
        // log never reached a backup, so nothing of it was ever acknowledged (a
        // write is acknowledged only once on R backups).
        let nothing_anywhere = holders.is_empty() && answered == listed.len() && !listed.is_empty();
        if nothing_anywhere || tokio::time::Instant::now() >= deadline {
            if holders.is_empty() {
                tracing::warn!(
                    old_id,
                    "cold start: no backup holds any replica of this master's log; starting empty"
                );
                return Ok(Some(ReloadSummary::default()));
            }
            return Err(ColdStartError::Incomplete {
                old_id,
                missing,
                waited_ms: started.elapsed().as_millis() as u64,
                identity: identity_file.display().to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(ASK_AGAIN_MS)).await;
    }
}

/// The digest of the newest head among the offered replicas, or `None` if no
/// offered replica has one yet.
/// The newest head among a master's replicas: its id, the segments its digest
/// names, and its bytes (replayed as they are, not read again).
struct NewestHead {
    segment_id: u64,
    digest: Vec<u64>,
    bytes: bytes::Bytes,
}

async fn find_log(
    backups: &BackupClient,
    old_id: u64,
    holders: &HashMap<u64, Vec<(String, bool)>>,
) -> Option<NewestHead> {
    let mut ids: Vec<u64> = holders.keys().copied().collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    for id in ids {
        for (address, _) in &holders[&id] {
            let Ok(replica) = backups.read_replica(address, old_id, id).await else {
                continue;
            };
            if let Some(digest) = digest_of(&replica.bytes) {
                return Some(NewestHead {
                    segment_id: id,
                    digest,
                    bytes: replica.bytes,
                });
            }
            // A survivor (no digest): look at older segments.
            break;
        }
    }
    None
}

async fn replay(
    backups: &BackupClient,
    old_id: u64,
    head: &NewestHead,
    holders: &HashMap<u64, Vec<(String, bool)>>,
    store: &ObjectStore,
) -> Result<ReloadSummary, ColdStartError> {
    let mut log = LogReplay::default();
    for &segment_id in &head.digest {
        if segment_id == head.segment_id && log.add_segment(&head.bytes).is_ok() {
            continue;
        }
        let mut holders_of = holders[&segment_id].clone();
        // Closed replicas first: they are whole and checksummed on disk.
        holders_of.sort_by_key(|(_, closed)| !closed);
        let mut last_error = String::from("no backup answered");
        let mut done = false;
        for (address, _) in &holders_of {
            match backups.read_replica(address, old_id, segment_id).await {
                Ok(replica) => match log.add_segment(&replica.bytes) {
                    Ok(()) => {
                        done = true;
                        break;
                    }
                    Err(e) => last_error = format!("replica on {address}: {e}"),
                },
                Err(e) => last_error = e.to_string(),
            }
        }
        if !done {
            return Err(ColdStartError::Replay {
                old_id,
                segment_id,
                reason: last_error,
            });
        }
    }
    store.raise_safe_version(log.max_version() + 1);
    let mut objects = 0;
    for (table_id, key, version, value) in log.live() {
        store
            .restore(table_id, key, value, version)
            .map_err(|e| ColdStartError::Replay {
                old_id,
                segment_id: 0,
                reason: format!("restoring an object of table {table_id}: {e}"),
            })?;
        objects += 1;
    }
    Ok(ReloadSummary {
        segments: head.digest.len(),
        objects,
        tablets: 0,
        max_version: log.max_version(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ramstore_log::entry::{
        encode_log_digest, encode_object, encode_segment_header, encode_tombstone,
    };

    #[test]
    fn replay_keeps_newest_version_and_tombstones_win_in_any_order() {
        let mut a = Vec::new();
        encode_segment_header(1, 1, &mut a);
        encode_log_digest(&[1], &mut a);
        encode_object(7, 3, 0, b"k", b"old", &mut a);
        encode_object(7, 5, 0, b"gone", b"x", &mut a);
        let mut b = Vec::new();
        encode_segment_header(1, 2, &mut b);
        encode_object(7, 4, 0, b"k", b"new", &mut b);
        encode_tombstone(7, 5, 1, b"gone", &mut b);
        for order in [[&a, &b], [&b, &a]] {
            let mut log = LogReplay::default();
            for seg in order {
                log.add_segment(seg).unwrap();
            }
            let live: Vec<_> = log.live().collect();
            assert_eq!(live, vec![(7, &b"k"[..], 4, &b"new"[..])]);
            assert_eq!(log.max_version(), 5);
        }
        assert_eq!(digest_of(&a), Some(vec![1]));
        assert_eq!(digest_of(&b), None);
    }

    #[test]
    fn replay_of_a_corrupt_segment_is_an_error() {
        let mut a = Vec::new();
        encode_object(7, 3, 0, b"k", b"value", &mut a);
        let n = a.len();
        a[n - 6] ^= 0xff;
        assert!(LogReplay::default().add_segment(&a).is_err());
    }

    #[test]
    fn listed_backups_skips_removed_and_master_only_servers() {
        let text = "role=coordinator\nserver_list_version=4\n\
            server.1=127.0.0.1:1 up memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.2=127.0.0.1:2 removed memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.3=127.0.0.1:3 crashed memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.4=127.0.0.1:4 up memory_bytes=1 services=1 failure_domain= backup_read_mbps=0\n";
        let ids: Vec<u64> = listed_backups(text).iter().map(|b| b.server_id).collect();
        assert_eq!(ids, vec![1, 3]);
        assert_eq!(entry_of(text, 2), Some(("127.0.0.1:2", "removed")));
        assert_eq!(entry_of(text, 3), Some(("127.0.0.1:3", "crashed")));
        assert_eq!(entry_of(text, 9), None);
        let me = |id, address: Option<&str>| Identity {
            server_id: id,
            address: address.map(str::to_string),
        };
        assert!(is_ours(text, &me(1, Some("127.0.0.1:1"))));
        assert!(is_ours(text, &me(3, None)), "crashed, no address recorded");
        assert!(
            !is_ours(text, &me(1, Some("127.0.0.1:7"))),
            "the id was reused"
        );
        assert!(
            !is_ours(text, &me(2, Some("127.0.0.1:2"))),
            "removed: replaced"
        );
        assert!(!is_ours(text, &me(9, None)), "unknown id");
    }

    #[test]
    fn identity_round_trips_and_is_absent_at_first() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_identity(dir.path()).unwrap(), None);
        write_identity(dir.path(), 42, "127.0.0.1:7001").unwrap();
        assert_eq!(
            read_identity(dir.path()).unwrap(),
            Some(Identity {
                server_id: 42,
                address: Some("127.0.0.1:7001".into())
            })
        );
        std::fs::write(dir.path().join(IDENTITY_FILE), "42\n").unwrap();
        assert_eq!(
            read_identity(dir.path()).unwrap(),
            Some(Identity {
                server_id: 42,
                address: None
            })
        );
        std::fs::write(dir.path().join(IDENTITY_FILE), "garbage").unwrap();
        assert!(read_identity(dir.path()).is_err());
    }
}
