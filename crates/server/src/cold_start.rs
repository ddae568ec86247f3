//! Restart of a storage server on its old backup directory (cold start): the new
//! process names its previous run at enlistment, and the coordinator recovers that
//! run's data through ordinary crash recovery (R§7) — partitioned over the
//! cluster's masters, from the replicas on the backups — at once, instead of after
//! the failure detector notices the old process is gone. A whole cluster restarted
//! cold comes back the same way: each old id is recovered once the backups that
//! hold its log are up again (recovery waits for a complete log, R§7.4).
//!
//! # Protocol
//! 1. After enlisting, a server with a backup directory records its server id and
//!    address in `<backup_dir>/server.id` (written to a temporary file, synced,
//!    renamed).
//! 2. A clean stop (SIGINT/SIGTERM, [`crate::StartedServer::stop`]) records the id
//!    that stopped in `<backup_dir>/server.clean` once its open replicas are on
//!    disk; `ramstore server` also tells the coordinator first ([`leave`]).
//! 3. A server that finds `server.id` at start-up takes `server.clean` away (so a
//!    crash of this run is never mistaken for a clean stop) and asks the
//!    coordinator whether the old id is still listed as this server's previous run
//!    (any state, at the recorded address). If so, it enlists naming the old id:
//!    the coordinator gives it the next incarnation of the same index (its server
//!    id stays the same, `ramstore_wire::server_id`) and, if the old run was still
//!    up or crashed, recovers its tablets from the backups. If the previous run
//!    stopped cleanly and the coordinator still lists it up (it could not be told
//!    at the stop), the server sends [`leave`] for it first, so the recovery is
//!    reported as a restart's. If the old id is not listed (the coordinator's
//!    state was reset and the id may be someone else's), it enlists as a new
//!    server. Design notes: "Server identity across restarts".
//!
//! [`LogReplay`] is the reference replay (newest version wins, tombstones win at
//! equal versions): tests compare what backups hold against the master's state
//! with it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ramstore_client::{Client, ClientOptions};
use ramstore_clock::{Clock, Rng};
use ramstore_log::entry::{parse_entry, Entry, EntryError};
use ramstore_rpc::{TcpTransport, Transport};
use ramstore_wire::{decode_response, encode_request, Request, Response};

/// The file under the backup directory that names the server id of the last run.
pub const IDENTITY_FILE: &str = "server.id";
/// The file under the backup directory that says the last run stopped cleanly
/// (it holds that run's server id).
pub const CLEAN_STOP_FILE: &str = "server.clean";
/// Longest a clean stop waits for the coordinator to acknowledge [`leave`].
pub const LEAVE_DEADLINE_MS: u64 = 2_000;
/// Longest a restart waits for the coordinator to answer.
pub const COORDINATOR_WAIT_MS: u64 = 60_000;
/// Pause between two attempts to reach the coordinator.
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
    #[error("cold start of master {old_id}: coordinator: {reason}")]
    Coordinator { old_id: u64, reason: String },
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
    write_atomically(dir, IDENTITY_FILE, &format!("{server_id} {address}\n"))
}

/// Records that run `server_id` stopped cleanly (after its open replicas were
/// written out), atomically.
pub fn record_clean_stop(dir: &Path, server_id: u64) -> Result<(), ColdStartError> {
    write_atomically(dir, CLEAN_STOP_FILE, &format!("{server_id}\n"))
}

/// The id of the run whose clean stop is recorded, if one is; removes the record
/// (durably) so that whatever happens to this run is judged afresh. A record that
/// cannot be read counts as none: the stop is then treated as a crash, the safe
/// side (it only makes the restart's log louder).
pub fn take_clean_stop(dir: &Path) -> Result<Option<u64>, ColdStartError> {
    let path = dir.join(CLEAN_STOP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => String::new(),
    };
    std::fs::remove_file(&path).map_err(|source| ColdStartError::Identity {
        path: path.display().to_string(),
        source,
    })?;
    sync_dir(dir);
    Ok(text.trim().parse().ok())
}

/// Tells the coordinator (each address in turn) that server `server_id` is
/// stopping cleanly (`Leave`), so it recovers its data at once and reports it as
/// a restart (R§7). Waits at most [`LEAVE_DEADLINE_MS`]; returns whether a
/// coordinator acknowledged. Best effort: a stop goes on either way, and the
/// record in the directory ([`record_clean_stop`]) tells the next start. The
/// deadline runs on `clock`.
pub async fn leave(coordinator: &str, server_id: u64, clock: &Arc<dyn Clock>) -> bool {
    let mut frame = Vec::new();
    if encode_request(0, &Request::Leave { server_id }, &mut frame).is_err() {
        return false;
    }
    let transport = TcpTransport::with_clock(clock.clone());
    let deadline = Duration::from_millis(LEAVE_DEADLINE_MS);
    let ask = async {
        for address in coordinator
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            if let Ok(bytes) = transport.call(address, frame.clone(), deadline).await {
                if matches!(decode_response(&bytes), Ok((_, Response::Leave))) {
                    return true;
                }
            }
        }
        false
    };
    clock.timeout(deadline, ask).await.unwrap_or(false)
}

/// Writes `name` in `dir` atomically: a temporary file, fsync, rename, and an
/// fsync of the directory.
fn write_atomically(dir: &Path, name: &str, text: &str) -> Result<(), ColdStartError> {
    use std::io::Write;
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let fail = |source| ColdStartError::Identity {
        path: path.display().to_string(),
        source,
    };
    let mut f = std::fs::File::create(&tmp).map_err(fail)?;
    f.write_all(text.as_bytes()).map_err(fail)?;
    f.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, &path).map_err(fail)?;
    sync_dir(dir);
    Ok(())
}

/// Makes a rename or removal in `dir` durable (best effort: some file systems
/// cannot sync a directory, and the file's own sync already happened).
fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
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
                // Completion records and transaction records are not object
                // state (RIFL §4.3, SOSP'15 §6.2): the recovery masters rebuild
                // them (`recovery_master`).
                Entry::SegmentHeader(_)
                | Entry::LogDigest(_)
                | Entry::TabletStats(_)
                | Entry::RpcResult(_)
                | Entry::TxRecord(_) => {}
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

/// The coordinator's state of the old id if its entry is this server's previous
/// run (listed, in any state, and enlisted from the recorded address).
fn ours<'s>(stats: &'s str, identity: &Identity) -> Option<&'s str> {
    let (address, state) = entry_of(stats, identity.server_id)?;
    identity
        .address
        .as_deref()
        .is_none_or(|a| a == address)
        .then_some(state)
}

/// The id this server should name as the one it replaces: its previous run's,
/// if the coordinator at `coordinator` still lists that run (see the module
/// doc); 0 for none. `stopped_cleanly`: the previous run recorded a clean stop;
/// if the coordinator still lists it up, it is told now ([`leave`]). Waits and
/// the client run on `clock` and `rng`.
pub async fn replaced_id(
    coordinator: &str,
    identity: &Identity,
    stopped_cleanly: bool,
    clock: &Arc<dyn Clock>,
    rng: &Arc<dyn Rng>,
) -> Result<u64, ColdStartError> {
    let old_id = identity.server_id;
    let deadline = clock.deadline_after(Duration::from_millis(COORDINATOR_WAIT_MS));
    let coord_err = |reason: String| ColdStartError::Coordinator { old_id, reason };
    let options = ClientOptions {
        clock: clock.clone(),
        rng: rng.clone(),
        ..ClientOptions::new(coordinator)
    };
    let client = loop {
        match Client::connect(options.clone()).await {
            Ok(c) => break c,
            Err(e) if clock.now() >= deadline => return Err(coord_err(e.to_string())),
            Err(_) => clock.sleep(Duration::from_millis(ASK_AGAIN_MS)).await,
        }
    };
    let stats = client
        .server_stats(coordinator)
        .await
        .map_err(|e| coord_err(e.to_string()))?;
    if let Some(state) = ours(&stats, identity) {
        if stopped_cleanly && state == "up" && !leave(coordinator, old_id, clock).await {
            tracing::info!(
                old_id,
                "restart: the coordinator did not acknowledge the previous run's clean stop; it recovers that run as a crash"
            );
        }
        Ok(old_id)
    } else {
        tracing::warn!(
            old_id,
            "restart: the coordinator does not list this server's previous run at its address; enlisting as a new server"
        );
        Ok(0)
    }
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
    fn ours_recognises_the_previous_run_in_any_state() {
        let text = "role=coordinator\nserver_list_version=4\n\
            server.1=127.0.0.1:1 up memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.2=127.0.0.1:2 removed memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.3=127.0.0.1:3 crashed memory_bytes=1 services=3 failure_domain= backup_read_mbps=5\n\
            server.4=127.0.0.1:4 up memory_bytes=1 services=1 failure_domain= backup_read_mbps=0\n";
        assert_eq!(entry_of(text, 2), Some(("127.0.0.1:2", "removed")));
        assert_eq!(entry_of(text, 3), Some(("127.0.0.1:3", "crashed")));
        assert_eq!(entry_of(text, 9), None);
        let me = |id, address: Option<&str>| Identity {
            server_id: id,
            address: address.map(str::to_string),
        };
        assert_eq!(ours(text, &me(1, Some("127.0.0.1:1"))), Some("up"));
        assert_eq!(
            ours(text, &me(3, None)),
            Some("crashed"),
            "no address recorded"
        );
        assert_eq!(
            ours(text, &me(1, Some("127.0.0.1:7"))),
            None,
            "the id was reused"
        );
        assert_eq!(
            ours(text, &me(2, Some("127.0.0.1:2"))),
            Some("removed"),
            "recovered while down: still this server's index"
        );
        assert_eq!(ours(text, &me(9, None)), None, "unknown id");
    }

    /// A clean stop is recorded once and taken once: a later crash of the next
    /// run finds no record. A garbled record counts as none.
    #[test]
    fn clean_stop_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(take_clean_stop(dir.path()).unwrap(), None);
        record_clean_stop(dir.path(), 1 << 32 | 3).unwrap();
        assert_eq!(take_clean_stop(dir.path()).unwrap(), Some(1 << 32 | 3));
        assert_eq!(take_clean_stop(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(CLEAN_STOP_FILE), "garbage").unwrap();
        assert_eq!(take_clean_stop(dir.path()).unwrap(), None);
        assert!(!dir.path().join(CLEAN_STOP_FILE).exists());
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
