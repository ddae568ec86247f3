//! Data and admin commands: they talk to a running cluster through the client
//! library and print one clear line on error.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Context, Result};
use ramstore_client::{BlockingClient, ClientError, ClientOptions, RejectRules};

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

/// Parses the coordinator's `key=value` stats.
fn coordinator_stats(
    client: &BlockingClient,
    coordinator: &str,
) -> Result<BTreeMap<String, String>> {
    let text = client
        .server_stats(coordinator)
        .with_context(|| format!("asking the coordinator at {coordinator} for its state"))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect())
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
                    "'{key}' does not hold an 8-byte counter (values written by `incr` do)"
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

pub fn status(client: &BlockingClient, coordinator: &str) -> Result<()> {
    let stats = coordinator_stats(client, coordinator)?;
    let map = client.tablet_map().map_err(explain)?;
    println!(
        "coordinator {coordinator}: server list version {}",
        stats.get("server_list_version").map_or("?", |s| s)
    );
    println!(
        "{:>4} {:<22} {:<8} {:>8} {:>10} {:>12} {:>12} {:>6} {:>11}",
        "ID",
        "ADDRESS",
        "STATUS",
        "TABLETS",
        "OBJECTS",
        "LIVE MiB",
        "MEMORY MiB",
        "USED",
        "DURABILITY"
    );
    // Servers by numeric id (the stats map sorts keys as text).
    let mut servers: Vec<(u64, &String)> = stats
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("server.")?.parse().ok()?, v)))
        .collect();
    servers.sort();
    for (id, v) in servers {
        let mut parts = v.split_whitespace();
        let address = parts.next().unwrap_or("?");
        let state = parts.next().unwrap_or("?");
        let tablets = map.iter().filter(|t| t.server_id == id).count();
        let server: BTreeMap<String, String> = if state == "up" {
            client
                .server_stats(address)
                .map(|t| {
                    t.lines()
                        .filter_map(|l| {
                            l.split_once('=')
                                .map(|(a, b)| (a.to_string(), b.to_string()))
                        })
                        .collect()
                })
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
        let state = if state == "up" && server.is_empty() {
            "unreachable"
        } else {
            state
        };
        println!(
            "{id:>4} {address:<22} {state:<8} {tablets:>8} {:>10} {:>12} {:>12} {used:>6} {:>11}",
            num("objects").map_or("-".into(), |n| n.to_string()),
            mib("live_object_bytes"),
            mib("memory_bytes"),
            server.get("durability").map_or("-", |s| s.as_str()),
        );
    }
    println!(
        "{} table(s), {} tablet(s)",
        table_list(&stats).len(),
        map.len()
    );
    Ok(())
}
