//! Data and admin commands: they talk to a running cluster through the client
//! library, print their result in the chosen `--output` format (see
//! [`crate::output`]) and fail with one clear line and an exit code
//! ([`crate::reach`]).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use ramstore_client::{server_id, BlockingClient, ClientError, ExpiryChange, RejectRules};
use serde_json::{json, Map, Value};

use crate::output::{escape, json_bytes, print_json, Columns, Format};
use crate::reach::Exit;
use crate::size;

/// The id of table `name`, with a clear error if it does not exist.
pub fn table_id(client: &BlockingClient, name: &str) -> Result<u64> {
    client.get_table_id(name).map_err(|e| match e {
        ClientError::TableDoesntExist => anyhow::anyhow!(
            "unknown table '{name}' (create it with `ramstore create-table {name}`)"
        ),
        e => explain(e).context(format!("looking up table '{name}'")),
    })
}

pub(crate) fn explain(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::TooLarge(what) => {
            anyhow::anyhow!("too large: {what} (keys ≤ 65,535 bytes, values ≤ 1 MiB)")
        }
        e @ ClientError::NoSpace { .. } => {
            anyhow::anyhow!("{e}; see `ramstore status` (REFUSING WRITES)")
        }
        // Exit code 3: the cluster (or the part of it holding the key) did not
        // answer in time.
        ClientError::DeadlineExceeded {
            elapsed,
            last_attempt,
        } => Exit::Unreachable(format!(
            "gave up after {:.1} s (--timeout); last attempt: {last_attempt}",
            elapsed.as_secs_f64()
        ))
        .into(),
        e @ ClientError::CoordinatorUnreachable(_) => Exit::Unreachable(e.to_string()).into(),
        e => anyhow::anyhow!("{e}"),
    }
}

pub fn create_table(client: &BlockingClient, name: &str, span: u32, format: Format) -> Result<()> {
    let id = client.create_table(name, span).map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "table '{}' has id {id}", escape(name.as_bytes()))?,
        Format::Json => print_json(&mut out, &json!({"table": name, "id": id}))?,
        Format::Raw => writeln!(out, "{id}")?,
    }
    Ok(())
}

pub fn drop_table(client: &BlockingClient, name: &str, format: Format) -> Result<()> {
    let id = table_id(client, name)?;
    client.drop_table(name).map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "dropped table '{}'", escape(name.as_bytes()))?,
        Format::Json => print_json(&mut out, &json!({"table": name, "id": id, "dropped": true}))?,
        Format::Raw => {}
    }
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
pub(crate) fn coordinator_stats(
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
pub(crate) fn table_list(stats: &BTreeMap<String, String>) -> Vec<(u64, String, String)> {
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

pub fn tables(client: &BlockingClient, coordinator: &str, format: Format) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let tables = table_list(&stats);
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => {
            let mut t = Columns::new(&[("TABLE", false), ("ID", true), ("TABLETS", true)]);
            for (id, tablets, name) in &tables {
                t.row(vec![
                    escape(name.as_bytes()),
                    id.to_string(),
                    tablets.clone(),
                ]);
            }
            t.print(&mut out)?;
            if tables.is_empty() {
                writeln!(out, "(no tables)")?;
            }
        }
        Format::Json => {
            let list: Vec<Value> = tables
                .iter()
                .map(|(id, tablets, name)| {
                    json!({"name": name, "id": id, "tablets": tablets.parse::<u64>().ok()})
                })
                .collect();
            print_json(&mut out, &Value::Array(list))?;
        }
        Format::Raw => {
            for (id, tablets, name) in &tables {
                writeln!(out, "{name}\t{id}\t{tablets}")?;
            }
        }
    }
    Ok(())
}

pub struct PutOptions {
    pub if_version: Option<u64>,
    pub create_only: bool,
    /// Seconds until the object expires (`--ttl`); `None`: never.
    pub ttl_secs: Option<u64>,
}

pub fn put(
    client: &BlockingClient,
    table: &str,
    key: &str,
    value: &[u8],
    o: PutOptions,
    format: Format,
) -> Result<()> {
    let id = table_id(client, table)?;
    let rules = match (o.if_version, o.create_only) {
        // The argument parser refuses the combination (a usage error).
        (Some(_), true) => bail!("--if-version and --create-only cannot be combined"),
        (Some(v), false) => RejectRules::version_must_equal(v),
        (None, true) => RejectRules::must_not_exist(),
        (None, false) => RejectRules::default(),
    };
    let shown = escape(key.as_bytes());
    let written = match o.ttl_secs {
        None => client.write_with_rules(id, key.as_bytes(), value, &rules),
        Some(secs) => {
            // An absolute time from this client's wall clock (the Clock seam):
            // the master stores it in the object's log entry.
            let at = client.wall_ms().saturating_add(secs.saturating_mul(1000));
            client.write_expiring(id, key.as_bytes(), value, &rules, ExpiryChange::At(at))
        }
    };
    let version = written.map_err(|e| match e {
        ClientError::WrongVersion { current } => {
            anyhow::anyhow!("not written: the object's version is {current}")
        }
        ClientError::ObjectExists => anyhow::anyhow!("not written: '{shown}' already exists"),
        ClientError::ObjectDoesntExist => {
            anyhow::anyhow!("not written: '{shown}' does not exist")
        }
        e => explain(e),
    })?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "version {version}")?,
        Format::Json => print_json(&mut out, &json!({"version": version, "bytes": value.len()}))?,
        Format::Raw => writeln!(out, "{version}")?,
    }
    Ok(())
}

pub fn get(
    client: &BlockingClient,
    table: &str,
    key: &str,
    show_version: bool,
    format: Format,
) -> Result<()> {
    let id = table_id(client, table)?;
    match client.read(id, key.as_bytes()) {
        Ok((value, version)) => {
            let mut out = std::io::stdout().lock();
            match format {
                Format::Table => writeln!(out, "{}", escape(&value))?,
                Format::Json => {
                    let mut o = Map::new();
                    json_bytes(&mut o, "key", key.as_bytes());
                    json_bytes(&mut o, "value", &value);
                    o.insert("version".into(), version.into());
                    print_json(&mut out, &Value::Object(o))?;
                }
                // Exactly the stored bytes: `get --raw T K > f` gives back the
                // file of `put T K --value-file f`.
                Format::Raw => out.write_all(&value)?,
            }
            out.flush()?;
            if show_version {
                eprintln!("version {version}");
            }
            Ok(())
        }
        Err(ClientError::ObjectDoesntExist) => bail!(
            "'{}' not found in table '{}'",
            escape(key.as_bytes()),
            escape(table.as_bytes())
        ),
        Err(e) => Err(explain(e)),
    }
}

pub fn del(client: &BlockingClient, table: &str, key: &str, format: Format) -> Result<()> {
    let id = table_id(client, table)?;
    let removed = client.remove(id, key.as_bytes()).map_err(explain)?;
    let shown = escape(key.as_bytes());
    let mut out = std::io::stdout().lock();
    match (format, removed) {
        (Format::Table, Some(version)) => {
            writeln!(out, "deleted '{shown}' (it had version {version})")?
        }
        (Format::Table, None) => writeln!(out, "'{shown}' did not exist")?,
        (Format::Json, _) => print_json(
            &mut out,
            &json!({"deleted": removed.is_some(), "version": removed}),
        )?,
        (Format::Raw, Some(version)) => writeln!(out, "{version}")?,
        (Format::Raw, None) => {}
    }
    Ok(())
}

pub fn incr(
    client: &BlockingClient,
    table: &str,
    key: &str,
    delta: i64,
    format: Format,
) -> Result<()> {
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
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "{value} (version {version})")?,
        Format::Json => print_json(&mut out, &json!({"value": value, "version": version}))?,
        Format::Raw => writeln!(out, "{value}")?,
    }
    Ok(())
}

/// `scan`: `table` output is aligned, so it is printed when the scan ends; `json`
/// (an array) and `raw` (`KEY<TAB>VALUE<TAB>VERSION` lines of exact bytes) stream.
pub fn scan(
    client: &BlockingClient,
    table: &str,
    limit: Option<usize>,
    format: Format,
) -> Result<()> {
    let id = table_id(client, table)?;
    let mut out = std::io::stdout().lock();
    let mut rows = Columns::new(&[("KEY", false), ("VALUE", false), ("VERSION", true)]);
    let mut n = 0;
    if format == Format::Json {
        write!(out, "[")?;
    }
    for item in client.enumerate(id) {
        if limit.is_some_and(|l| n >= l) {
            break;
        }
        let o = item.map_err(explain)?;
        match format {
            Format::Table => rows.row(vec![
                escape(&o.key),
                escape(&o.value),
                o.version.to_string(),
            ]),
            Format::Json => {
                let mut object = Map::new();
                json_bytes(&mut object, "key", &o.key);
                json_bytes(&mut object, "value", &o.value);
                object.insert("version".into(), o.version.into());
                write!(out, "{}\n  ", if n == 0 { "" } else { "," })?;
                serde_json::to_writer(&mut out, &Value::Object(object))?;
            }
            Format::Raw => {
                out.write_all(&o.key)?;
                out.write_all(b"\t")?;
                out.write_all(&o.value)?;
                writeln!(out, "\t{}", o.version)?;
            }
        }
        n += 1;
    }
    match format {
        Format::Table => rows.print(&mut out)?,
        Format::Json => writeln!(out, "{}]", if n == 0 { "" } else { "\n" })?,
        Format::Raw => {}
    }
    out.flush()?;
    drop(out);
    if format == Format::Table {
        eprintln!("{n} object(s)");
    }
    Ok(())
}

/// The backup cells of a `status` row (REPLICAS, BUFFERS, BACKUP DISK) from a
/// server's stats: `-` for each when there are no stats (server down or
/// unreachable), `backup off` for a server without a backup, and `?` for a value
/// whose line is missing or malformed — the stats come from a peer, possibly of
/// another version, and one bad line must not hide the rest of the cluster.
fn backup_columns(server: &BTreeMap<String, String>) -> [String; 3] {
    if server.is_empty() {
        return ["-".into(), "-".into(), "-".into()];
    }
    if server.get("backup").is_some_and(|v| v == "off") {
        return ["backup off".into(), String::new(), String::new()];
    }
    let num = |key: &str| server.get(key).and_then(|v| v.parse::<u64>().ok());
    let text = |n: Option<u64>| n.map_or("?".into(), |n| n.to_string());
    let bytes = |n: Option<u64>| n.map_or("?".into(), size::one_word);
    [
        text(num("backup_replicas")),
        format!(
            "{}/{}",
            text(num("backup_open_buffers_used")),
            text(num("backup_open_buffers_max"))
        ),
        format!(
            "{}/{}",
            bytes(num("backup_bytes_on_disk")),
            bytes(backup_capacity(server))
        ),
    ]
}

/// The servers of the coordinator's stats (`server.<id>=ADDRESS STATE …`), by
/// index, then run (the stats map sorts keys as text).
pub(crate) fn server_entries(stats: &BTreeMap<String, String>) -> Vec<(u64, &String)> {
    let mut servers: Vec<(u64, &String)> = stats
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("server.")?.parse().ok()?, v)))
        .collect();
    servers.sort_by_key(|&(id, _)| (server_id::index(id), server_id::incarnation(id)));
    servers
}

/// The newest run (incarnation) of each server index among `ids`.
pub(crate) fn newest_runs(ids: impl Iterator<Item = u64>) -> BTreeMap<u64, u64> {
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

/// A backup's disk capacity in bytes. Servers always give their backup frames of
/// a whole segment (`ServerOptions::backup_config`), so it is frames × segment
/// bytes (`None` if the line is missing or the product overflows).
fn backup_capacity(server: &BTreeMap<String, String>) -> Option<u64> {
    server
        .get("backup_frames_total")
        .and_then(|v| v.parse::<u64>().ok())
        .and_then(|frames| frames.checked_mul(u64::from(ramstore_backup::FRAME_SEGMENT_BYTES)))
}

/// The backup of a `status --output json` server: `null` without stats, `"off"`,
/// or its numbers (`null` where a line is missing or malformed).
fn backup_json(server: &BTreeMap<String, String>) -> Value {
    if server.is_empty() {
        return Value::Null;
    }
    if server.get("backup").is_some_and(|v| v == "off") {
        return "off".into();
    }
    let num = |key: &str| server.get(key).and_then(|v| v.parse::<u64>().ok());
    json!({
        "replicas": num("backup_replicas"),
        "open_buffers_used": num("backup_open_buffers_used"),
        "open_buffers_max": num("backup_open_buffers_max"),
        "bytes_on_disk": num("backup_bytes_on_disk"),
        "capacity_bytes": backup_capacity(server),
    })
}

/// One server of `ramstore status`.
struct ServerRow {
    /// The server id as the coordinator knows it (index and incarnation).
    id: u64,
    /// How the row names it: the index, or `INDEX.RUN` for an earlier run.
    shown: String,
    address: String,
    /// `up`, `crashed`, `removed`…, or `unreachable` (up, but its stats did not come).
    state: String,
    tablets: usize,
    /// The server's own GetServerStats (empty unless it is up and answered).
    stats: BTreeMap<String, String>,
}

impl ServerRow {
    fn num(&self, key: &str) -> Option<u64> {
        self.stats.get(key).and_then(|v| v.parse::<u64>().ok())
    }

    /// The cells of its table row.
    fn cells(&self) -> Vec<String> {
        let mib = |key: &str| self.num(key).map_or("-".to_string(), size::mib);
        let used = match (self.num("live_object_bytes"), self.num("memory_bytes")) {
            (Some(l), Some(m)) if m > 0 => format!("{:.1}%", 100.0 * l as f64 / m as f64),
            _ => "-".into(),
        };
        let mut cells = vec![
            self.shown.clone(),
            self.address.clone(),
            self.state.clone(),
            self.tablets.to_string(),
            self.num("objects").map_or("-".into(), |n| n.to_string()),
            mib("live_object_bytes"),
            mib("memory_bytes"),
            used,
            self.stats
                .get("durability")
                .map_or("-", |s| s.as_str())
                .to_string(),
        ];
        // The resident split (issue 17): the process, then its log, hash table
        // and other parts.
        for key in [
            "resident_bytes",
            "log_resident_bytes",
            "hash_table_resident_bytes",
            "other_resident_bytes",
        ] {
            cells.push(mib(key));
        }
        cells.extend(backup_columns(&self.stats));
        cells
    }

    fn json(&self) -> Value {
        json!({
            "id": server_id::index(self.id),
            "incarnation": server_id::incarnation(self.id),
            "shown_id": self.shown,
            "address": self.address,
            "status": self.state,
            "tablets": self.tablets,
            "objects": self.num("objects"),
            "live_object_bytes": self.num("live_object_bytes"),
            "memory_bytes": self.num("memory_bytes"),
            "durability": self.stats.get("durability"),
            "resident_bytes": self.num("resident_bytes"),
            "resident_peak_bytes": self.num("resident_peak_bytes"),
            "log_resident_bytes": self.num("log_resident_bytes"),
            "hash_table_resident_bytes": self.num("hash_table_resident_bytes"),
            "other_resident_bytes": self.num("other_resident_bytes"),
            "refusing_writes": self.num("refusing_writes") == Some(1),
            "backup": backup_json(&self.stats),
        })
    }
}

pub fn status(client: &BlockingClient, coordinator: &str, all: bool, format: Format) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let map = client.tablet_map().map_err(explain)?;
    let servers = server_entries(&stats);
    let newest = newest_runs(servers.iter().map(|(id, _)| *id));
    let mut rows = Vec::with_capacity(servers.len());
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
        let state = if state == "up" && server.is_empty() {
            "unreachable"
        } else {
            state
        };
        rows.push(ServerRow {
            id,
            shown,
            address: address.to_string(),
            state: state.to_string(),
            tablets,
            stats: server,
        });
    }
    let table_count = table_list(&stats).len();
    // Recoveries in progress: (crashed server id, what the coordinator says).
    let recoveries: Vec<(&str, &String)> = stats
        .iter()
        .filter_map(|(key, value)| Some((key.strip_prefix("recovery.")?, value)))
        .collect();
    let recovering_id = |id: &str| {
        id.parse()
            .map_or(id.to_string(), |id| shown_id(id, &newest))
    };
    let coordinator_num = |key: &str| stats.get(key).and_then(|v| v.parse::<u64>().ok());
    // Migrations in progress (issue 20); an older coordinator lists none.
    let migrations: Vec<_> = client
        .migrations()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| !m.is_finished())
        .collect();

    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => {
            writeln!(
                out,
                "coordinator {coordinator}: server list version {}, recoveries completed {}",
                stats.get("server_list_version").map_or("?", |s| s),
                stats.get("recoveries_completed").map_or("?", |s| s)
            )?;
            let mut t = Columns::new(&[
                ("ID", true),
                ("ADDRESS", false),
                ("STATUS", false),
                ("TABLETS", true),
                ("OBJECTS", true),
                ("LIVE MiB", true),
                ("MEMORY MiB", true),
                ("USED", true),
                ("DURABILITY", true),
                ("RSS MiB", true),
                ("LOG MiB", true),
                ("HASH MiB", true),
                ("OTHER MiB", true),
                ("REPLICAS", true),
                ("BUFFERS", true),
                ("BACKUP DISK", true),
            ]);
            for row in &rows {
                t.row(row.cells());
            }
            t.print(&mut out)?;
            writeln!(out, "{table_count} table(s), {} tablet(s)", map.len())?;
            // Servers refusing writes for lack of memory, told after the table.
            for row in rows.iter().filter(|r| r.num("refusing_writes") == Some(1)) {
                writeln!(out, "{}", refusing_line(row.id, &row.address, &row.stats))?;
            }
            // Recoveries in progress, after the summary (scripts read the rows above).
            for (id, value) in &recoveries {
                let id = recovering_id(id);
                writeln!(out, "recovering server {id}: {}", value.replace('=', " "))?;
            }
            for m in &migrations {
                writeln!(
                    out,
                    "migrating {}: table {} [{:#x}, {:#x}] server {} -> {}, {}, {} of {} bytes",
                    m.id,
                    m.table,
                    m.start_hash,
                    m.end_hash,
                    shown_id(m.source, &newest),
                    shown_id(m.target, &newest),
                    m.state,
                    m.bytes.unwrap_or(0),
                    m.total_bytes
                        .map_or_else(|| "?".to_owned(), |b| b.to_string())
                )?;
            }
        }
        Format::Json => {
            let recoveries: Vec<Value> = recoveries
                .iter()
                .map(|(id, value)| json!({"server": id.parse::<u64>().ok(), "progress": value}))
                .collect();
            let doc = json!({
                "coordinator": coordinator,
                "server_list_version": coordinator_num("server_list_version"),
                "recoveries_completed": coordinator_num("recoveries_completed"),
                "servers": rows.iter().map(ServerRow::json).collect::<Vec<_>>(),
                "tables": table_count,
                "tablets": map.len(),
                "recoveries": recoveries,
                "migrations": migrations.iter().map(|m| json!({
                    "id": m.id, "table": m.table, "start_hash": m.start_hash,
                    "end_hash": m.end_hash, "source": m.source, "target": m.target,
                    "state": m.state, "bytes": m.bytes, "total_bytes": m.total_bytes,
                    "percent": m.percent()})).collect::<Vec<_>>(),
            });
            print_json(&mut out, &doc)?;
        }
        Format::Raw => {
            for row in &rows {
                writeln!(out, "{}", row.cells().join("\t"))?;
            }
        }
    }
    out.flush()?;
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
pub fn crash_server(
    client: &BlockingClient,
    coordinator: &str,
    id: u64,
    format: Format,
) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let newest = newest_runs(server_entries(&stats).into_iter().map(|(id, _)| id));
    let run = newest.get(&server_id::index(id)).copied().unwrap_or(id);
    client.crash_server(run).map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(
            out,
            "server {id} declared crashed; its tablets are being recovered (see `ramstore status`)"
        )?,
        Format::Json => print_json(&mut out, &json!({"server": id, "crashed": true}))?,
        Format::Raw => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(server: &BTreeMap<String, String>) -> Vec<String> {
        backup_columns(server)
            .join(" ")
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
    fn backup_columns_from_stats() {
        let on = parse_stats(
            "server_id=3\nbackup=on\nbackup_sync=buffered\nbackup_frames_total=4\n\
             backup_frames_free=3\nbackup_replicas=1\nbackup_open_buffers_used=1\n\
             backup_open_buffers_max=8\nbackup_bytes_on_disk=3145728\nbackup_syncs=0\n",
        );
        assert_eq!(words(&on), ["1", "1/8", "3.0MiB/32.0MiB"]);
        assert_eq!(
            backup_columns(&parse_stats("server_id=3\nbackup=off\n")),
            ["backup off", "", ""]
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
