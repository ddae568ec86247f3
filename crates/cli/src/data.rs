//! Data and admin commands: they talk to a running cluster through the client
//! library and print one clear line on error.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use ramstore_client::{server_id, BlockingClient, ClientError, ClientOptions, RejectRules};

/// Connects to the coordinator at `addr`.
pub fn connect(addr: &str) -> Result<BlockingClient> {
    let mut options = ClientOptions::new(addr.to_string());
    // Interactive commands should fail fast when a cluster is down.
    options.operation_deadline = std::time::Duration::from_secs(10);
    BlockingClient::connect(options).map_err(|e| match e {
        ClientError::CoordinatorUnreachable(_) => {
            anyhow::anyhow!("cannot reach coordinator at {addr} (is `ramstore dev` running? set --coordinator or RAMSTORE_COORDINATOR)")
        }
        e => anyhow::anyhow!("cannot connect to coordinator at {addr}: {e}"),
    })
}

/// The id of table `name`, with a clear error if it does not exist.
pub fn table_id(client: &BlockingClient, name: &str) -> Result<u64> {
    client.get_table_id(name).map_err(|e| match e {
        ClientError::TableDoesntExist => anyhow::anyhow!(
            "unknown table '{name}' (create it with `ramstore create-table {name}`)"
        ),
        e => anyhow::anyhow!("looking up table '{name}': {e}"),
    })
}

fn explain(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::TooLarge(what) => {
            anyhow::anyhow!("too large: {what} (keys ≤ 65,535 bytes, values ≤ 1 MiB)")
        }
        e @ ClientError::NoSpace { .. } => {
            anyhow::anyhow!("{e}; see `ramstore status` (REFUSING WRITES)")
        }
        e => anyhow::anyhow!("{e}"),
    }
}

pub fn create_table(client: &BlockingClient, name: &str, span: u32) -> Result<()> {
    let id = client.create_table(name, span).map_err(explain)?;
    println!("table '{name}' has id {id}");
    Ok(())
}

pub fn drop_table(client: &BlockingClient, name: &str) -> Result<()> {
    table_id(client, name)?;
    client.drop_table(name).map_err(explain)?;
    println!("dropped table '{name}'");
    Ok(())
}

/// Parses GetServerStats text: one `key=value` per line. Lines without `=` are
/// skipped (the text comes from a peer; a garbled line must not fail a command).
fn parse_stats(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// Parses the coordinator's `key=value` stats.
fn coordinator_stats(
    client: &BlockingClient,
    coordinator: &str,
) -> Result<BTreeMap<String, String>> {
    let text = client
        .server_stats(coordinator)
        .with_context(|| format!("asking the coordinator at {coordinator} for its state"))?;
    Ok(parse_stats(&text))
}

/// Tables as (id, tablet count, name), by id, from the coordinator's stats lines
/// `table.<id>=<tablets> <name>`.
fn table_list(stats: &BTreeMap<String, String>) -> Vec<(u64, String, String)> {
    let mut tables: Vec<(u64, String, String)> = stats
        .iter()
        .filter_map(|(k, v)| {
            let id = k.strip_prefix("table.")?.parse().ok()?;
            let (tablets, name) = v.split_once(' ')?;
            Some((id, tablets.to_string(), name.to_string()))
        })
        .collect();
    tables.sort();
    tables
}

pub fn tables(client: &BlockingClient, coordinator: &str) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let tables = table_list(&stats);
    println!("{:<24} {:>8} {:>8}", "TABLE", "ID", "TABLETS");
    for (id, tablets, name) in &tables {
        println!("{name:<24} {id:>8} {tablets:>8}");
    }
    if tables.is_empty() {
        println!("(no tables)");
    }
    Ok(())
}

pub struct PutOptions {
    pub if_version: Option<u64>,
    pub create_only: bool,
}

pub fn put(
    client: &BlockingClient,
    table: &str,
    key: &str,
    value: &str,
    o: PutOptions,
) -> Result<()> {
    let id = table_id(client, table)?;
    let rules = match (o.if_version, o.create_only) {
        (Some(_), true) => bail!("--if-version and --create-only cannot be combined"),
        (Some(v), false) => RejectRules::version_must_equal(v),
        (None, true) => RejectRules::must_not_exist(),
        (None, false) => RejectRules::default(),
    };
    let version = client
        .write_with_rules(id, key.as_bytes(), value.as_bytes(), &rules)
        .map_err(|e| match e {
            ClientError::WrongVersion { current } => {
                anyhow::anyhow!("not written: the object's version is {current}")
            }
            ClientError::ObjectExists => anyhow::anyhow!("not written: '{key}' already exists"),
            ClientError::ObjectDoesntExist => {
                anyhow::anyhow!("not written: '{key}' does not exist")
            }
            e => explain(e),
        })?;
    println!("version {version}");
    Ok(())
}

pub fn get(client: &BlockingClient, table: &str, key: &str, show_version: bool) -> Result<()> {
    let id = table_id(client, table)?;
    match client.read(id, key.as_bytes()) {
        Ok((value, version)) => {
            let mut out = std::io::stdout().lock();
            out.write_all(&value)?;
            out.write_all(b"\n")?;
            if show_version {
                eprintln!("version {version}");
            }
            Ok(())
        }
        Err(ClientError::ObjectDoesntExist) => bail!("'{key}' not found in table '{table}'"),
        Err(e) => Err(explain(e)),
    }
}

pub fn del(client: &BlockingClient, table: &str, key: &str) -> Result<()> {
    let id = table_id(client, table)?;
    match client.remove(id, key.as_bytes()).map_err(explain)? {
        Some(version) => println!("deleted '{key}' (it had version {version})"),
        None => println!("'{key}' did not exist"),
    }
    Ok(())
}

pub fn incr(client: &BlockingClient, table: &str, key: &str, delta: i64) -> Result<()> {
    let id = table_id(client, table)?;
    let (value, version) =
        client
            .increment_i64(id, key.as_bytes(), delta)
            .map_err(|e| match e {
                ClientError::NotNumeric => anyhow::anyhow!(
                    "'{key}' does not hold an integer in decimal text such as 42 (counters \
                     are stored as Redis stores them; an 8-byte binary counter of an \
                     earlier ramstore must be rewritten: see docs/operations.md, \
                     \"Counters\")"
                ),
                e => explain(e),
            })?;
    println!("{value} (version {version})");
    Ok(())
}

pub fn scan(client: &BlockingClient, table: &str, limit: Option<usize>) -> Result<()> {
    let id = table_id(client, table)?;
    let mut out = std::io::stdout().lock();
    let mut n = 0;
    for item in client.enumerate(id) {
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        let o = item.map_err(explain)?;
        writeln!(
            out,
            "{}\t{}\t{}",
            String::from_utf8_lossy(&o.key),
            String::from_utf8_lossy(&o.value),
            o.version
        )?;
        n += 1;
    }
    drop(out);
    eprintln!("{n} object(s)");
    Ok(())
}

/// `bytes` for a person, in one word (so `status` rows split on whitespace):
/// `977B`, `1.5KiB`, `32.0MiB`, `2.0GiB`.
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// The backup columns of a `status` row (REPLICAS, BUFFERS, BACKUP DISK) from a
/// server's stats: `-` for each when there are no stats (server down or
/// unreachable), `backup off` for a server without a backup, and `?` for a value
/// whose line is missing or malformed — the stats come from a peer, possibly of
/// another version, and one bad line must not hide the rest of the cluster.
fn backup_columns(server: &BTreeMap<String, String>) -> String {
    let columns = |replicas: &str, buffers: &str, disk: &str| {
        format!("{replicas:>8} {buffers:>7} {disk:>18}")
    };
    if server.is_empty() {
        return columns("-", "-", "-");
    }
    if server.get("backup").is_some_and(|v| v == "off") {
        return "backup off".into();
    }
    let num = |key: &str| server.get(key).and_then(|v| v.parse::<u64>().ok());
    let text = |n: Option<u64>| n.map_or("?".into(), |n| n.to_string());
    // Servers always give their backup frames of a whole segment
    // (`ServerOptions::backup_config`), so capacity is frames × segment bytes.
    let capacity = num("backup_frames_total")
        .and_then(|frames| frames.checked_mul(u64::from(ramstore_backup::FRAME_SEGMENT_BYTES)));
    let bytes = |n: Option<u64>| n.map_or("?".into(), human_bytes);
    columns(
        &text(num("backup_replicas")),
        &format!(
            "{}/{}",
            text(num("backup_open_buffers_used")),
            text(num("backup_open_buffers_max"))
        ),
        &format!("{}/{}", bytes(num("backup_bytes_on_disk")), bytes(capacity)),
    )
}

/// The resident split's columns of `ramstore status` (issue 17): the server
/// process's resident memory, then its log, hash table and other parts (GetServerStats
/// `resident_bytes`, `log_resident_bytes`, `hash_table_resident_bytes`,
/// `other_resident_bytes`), each a single word so the row splits on whitespace.
fn resident_columns([rss, log, hash, other]: [&str; 4]) -> String {
    format!("{rss:>9} {log:>9} {hash:>9} {other:>10}")
}

/// The servers of the coordinator's stats (`server.<id>=ADDRESS STATE …`), by
/// index, then run (the stats map sorts keys as text).
fn server_entries(stats: &BTreeMap<String, String>) -> Vec<(u64, &String)> {
    let mut servers: Vec<(u64, &String)> = stats
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("server.")?.parse().ok()?, v)))
        .collect();
    servers.sort_by_key(|&(id, _)| (server_id::index(id), server_id::incarnation(id)));
    servers
}

/// The newest run (incarnation) of each server index among `ids`.
fn newest_runs(ids: impl Iterator<Item = u64>) -> BTreeMap<u64, u64> {
    let mut newest = BTreeMap::new();
    for id in ids {
        let e = newest.entry(server_id::index(id)).or_insert(id);
        *e = (*e).max(id);
    }
    newest
}

/// How `status` names server `id`: its index (the server id, the same across
/// restarts) for its newest run, `INDEX.RUN` for an earlier run.
fn shown_id(id: u64, newest: &BTreeMap<u64, u64>) -> String {
    let index = server_id::index(id);
    if newest.get(&index) == Some(&id) {
        index.to_string()
    } else {
        format!("{index}.{}", server_id::incarnation(id))
    }
}

/// Whether `status` lists a server: its newest run unless removed; with `all`,
/// every run.
fn listed(id: u64, state: &str, newest: &BTreeMap<u64, u64>, all: bool) -> bool {
    all || (newest.get(&server_id::index(id)) == Some(&id) && state != "removed")
}

pub fn status(client: &BlockingClient, coordinator: &str, all: bool) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let map = client.tablet_map().map_err(explain)?;
    println!(
        "coordinator {coordinator}: server list version {}, recoveries completed {}",
        stats.get("server_list_version").map_or("?", |s| s),
        stats.get("recoveries_completed").map_or("?", |s| s)
    );
    println!(
        "{:>4} {:<22} {:<8} {:>8} {:>10} {:>12} {:>12} {:>6} {:>11} {} {:>8} {:>7} {:>18}",
        "ID",
        "ADDRESS",
        "STATUS",
        "TABLETS",
        "OBJECTS",
        "LIVE MiB",
        "MEMORY MiB",
        "USED",
        "DURABILITY",
        resident_columns(["RSS MiB", "LOG MiB", "HASH MiB", "OTHER MiB"]),
        "REPLICAS",
        "BUFFERS",
        "BACKUP DISK"
    );
    let servers = server_entries(&stats);
    let newest = newest_runs(servers.iter().map(|(id, _)| *id));
    // Servers refusing writes for lack of memory, told after the table.
    let mut refusing = Vec::new();
    for (id, v) in servers {
        let mut parts = v.split_whitespace();
        let address = parts.next().unwrap_or("?");
        let state = parts.next().unwrap_or("?");
        if !listed(id, state, &newest, all) {
            continue;
        }
        // A server that stopped cleanly is being recovered like a crashed one,
        // but did not crash.
        let state = if state == "crashed" && parts.any(|w| w == "stopped_cleanly=1") {
            "stopped"
        } else {
            state
        };
        let shown = shown_id(id, &newest);
        let tablets = map.iter().filter(|t| t.server_id == id).count();
        let server: BTreeMap<String, String> = if state == "up" {
            client
                .server_stats(address)
                .map(|t| parse_stats(&t))
                .unwrap_or_default()
        } else {
            BTreeMap::new()
        };
        let num = |key: &str| server.get(key).and_then(|v| v.parse::<u64>().ok());
        let mib = |key: &str| {
            num(key).map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0))
        };
        let used = match (num("live_object_bytes"), num("memory_bytes")) {
            (Some(l), Some(m)) if m > 0 => format!("{:.1}%", 100.0 * l as f64 / m as f64),
            _ => "-".into(),
        };
        if num("refusing_writes") == Some(1) {
            refusing.push(refusing_line(id, address, &server));
        }
        let state = if state == "up" && server.is_empty() {
            "unreachable"
        } else {
            state
        };
        println!(
            "{shown:>4} {address:<22} {state:<8} {tablets:>8} {:>10} {:>12} {:>12} {used:>6} {:>11} {} {}",
            num("objects").map_or("-".into(), |n| n.to_string()),
            mib("live_object_bytes"),
            mib("memory_bytes"),
            server.get("durability").map_or("-", |s| s.as_str()),
            resident_columns([
                mib("resident_bytes").as_str(),
                mib("log_resident_bytes").as_str(),
                mib("hash_table_resident_bytes").as_str(),
                mib("other_resident_bytes").as_str(),
            ]),
            backup_columns(&server),
        );
    }
    println!(
        "{} table(s), {} tablet(s)",
        table_list(&stats).len(),
        map.len()
    );
    for line in refusing {
        println!("{line}");
    }
    // Recoveries in progress, after the summary (scripts read the rows above).
    for (key, value) in &stats {
        if let Some(id) = key.strip_prefix("recovery.") {
            let id = id
                .parse()
                .map_or(id.to_string(), |id| shown_id(id, &newest));
            println!("recovering server {id}: {}", value.replace('=', " "));
        }
    }
    Ok(())
}

/// The line `ramstore status` prints for a server whose log is refusing writes
/// (GetServerStats `refusing_writes=1`).
fn refusing_line(id: u64, address: &str, server: &BTreeMap<String, String>) -> String {
    let get = |key: &str| server.get(key).map_or("?", |s| s.as_str());
    format!(
        "REFUSING WRITES: server {} ({address}): its log is full (NO_SPACE for {} ms, {} \
         NO_SPACE answers so far); delete data or add servers",
        server_id::index(id),
        get("refusing_writes_ms"),
        get("no_space_answers")
    )
}

/// `ramstore crash-server ID`: `ID` as `status` shows it, a server's index,
/// names its newest run.
pub fn crash_server(client: &BlockingClient, coordinator: &str, id: u64) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let newest = newest_runs(server_entries(&stats).into_iter().map(|(id, _)| id));
    let run = newest.get(&server_id::index(id)).copied().unwrap_or(id);
    client.crash_server(run).map_err(explain)?;
    println!(
        "server {id} declared crashed; its tablets are being recovered (see `ramstore status`)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(server: &BTreeMap<String, String>) -> Vec<String> {
        backup_columns(server)
            .split_whitespace()
            .map(String::from)
            .collect()
    }

    #[test]
    fn refusing_line_names_the_server_and_how_long() {
        let server =
            parse_stats("refusing_writes=1\nrefusing_writes_ms=4200\nno_space_answers=17\n");
        let line = refusing_line(3, "10.0.0.3:11101", &server);
        assert!(
            line.starts_with("REFUSING WRITES: server 3 (10.0.0.3:11101)"),
            "{line}"
        );
        assert!(
            line.contains("4200 ms") && line.contains("17 NO_SPACE"),
            "{line}"
        );
    }

    /// `status` shows a server by its index, the same across restarts; earlier
    /// runs (and removed servers) only with `--all`, earlier runs as INDEX.RUN.
    #[test]
    fn status_names_servers_by_index_and_hides_old_runs() {
        let run = |index: u64, n: u64| server_id::compose(index, n).unwrap();
        let ids = [run(1, 0), run(2, 0), run(1, 1), run(3, 0), run(1, 2)];
        let newest = newest_runs(ids.into_iter());
        assert_eq!(newest.get(&1), Some(&run(1, 2)));
        assert_eq!(shown_id(run(1, 2), &newest), "1");
        assert_eq!(shown_id(run(1, 0), &newest), "1.0");
        assert_eq!(shown_id(run(1, 1), &newest), "1.1");
        assert_eq!(shown_id(run(2, 0), &newest), "2");
        assert!(listed(run(1, 2), "up", &newest, false));
        assert!(listed(run(2, 0), "crashed", &newest, false));
        assert!(
            !listed(run(1, 1), "crashed", &newest, false),
            "an earlier run"
        );
        assert!(!listed(run(3, 0), "removed", &newest, false));
        assert!(listed(run(1, 1), "removed", &newest, true));
        assert!(listed(run(3, 0), "removed", &newest, true));
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1023), "1023B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(32 << 20), "32.0MiB");
        assert_eq!(human_bytes(512 << 30), "512.0GiB");
        assert_eq!(human_bytes(3 << 40), "3.0TiB");
        assert_eq!(human_bytes(u64::MAX), "16777216.0TiB");
    }

    #[test]
    fn backup_columns_from_stats() {
        let on = parse_stats(
            "server_id=3\nbackup=on\nbackup_sync=buffered\nbackup_frames_total=4\n\
             backup_frames_free=3\nbackup_replicas=1\nbackup_open_buffers_used=1\n\
             backup_open_buffers_max=8\nbackup_bytes_on_disk=3145728\nbackup_syncs=0\n",
        );
        assert_eq!(words(&on), ["1", "1/8", "3.0MiB/32.0MiB"]);
        assert_eq!(
            backup_columns(&parse_stats("server_id=3\nbackup=off\n")),
            "backup off"
        );
        assert_eq!(words(&BTreeMap::new()), ["-", "-", "-"]);
    }

    /// Missing, garbled or absurd lines from a peer show `?`, never fail or panic.
    #[test]
    fn backup_columns_tolerate_bad_stats() {
        // An older server: no backup lines at all.
        assert_eq!(words(&parse_stats("server_id=3\n")), ["?", "?/?", "?/?"]);
        let bad = parse_stats(
            "backup=on\nbackup_frames_total=lots\nbackup_replicas=-1\n\
             backup_open_buffers_used=2\nbackup_open_buffers_max=\n\
             backup_bytes_on_disk=18446744073709551616\ngarbage line\n=\n",
        );
        assert_eq!(words(&bad), ["?", "2/?", "?/?"]);
        // Frames × 8 MiB overflows u64.
        let huge = parse_stats(
            "backup=on\nbackup_frames_total=18446744073709551615\nbackup_bytes_on_disk=0\n",
        );
        assert_eq!(words(&huge), ["?", "?/?", "0B/?"]);
    }
}
