//! `ramstore split`, `ramstore migrate` and `ramstore migrations`: tablet
//! splits and live migrations (K§2.3; docs/operations.md "Splitting,
//! migrating and rebalancing tablets").

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ramstore_client::{
    server_id, BlockingClient, ClientOptions, MigrationInfo, MigrationMode, TabletInfo,
};
use serde_json::json;

use crate::data::{coordinator_stats, explain, newest_runs, server_entries, table_id};
use crate::output::{print_json, Columns, Format};

/// How often `migrate` asks the coordinator how the migration is going.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a stop-and-copy `MigrateTablet` may take (it answers after the copy).
const STOP_AND_COPY_DEADLINE: Duration = Duration::from_secs(600);

/// Parses a key hash: decimal, or hexadecimal with `0x`.
pub fn parse_hash(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a key hash (decimal, or hex with 0x)"))
}

/// Parses `START:END` (inclusive key hashes).
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (a, b) = s
        .split_once(':')
        .ok_or_else(|| format!("{s:?} is not a range START:END"))?;
    let (start, end) = (parse_hash(a)?, parse_hash(b)?);
    if start > end {
        return Err(format!("range {s:?} is empty (START > END)"));
    }
    Ok((start, end))
}

/// `ramstore split TABLE --at HASH`.
pub fn split(client: &BlockingClient, table: &str, at: u64, format: Format) -> Result<()> {
    table_id(client, table)?;
    client.split_tablet(table, at).map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(out, "table {table}: a tablet starts at {at:#018x}")?,
        Format::Json => print_json(&mut out, &json!({"table": table, "split_hash": at}))?,
        Format::Raw => {}
    }
    Ok(())
}

/// What `migrate` was asked to do.
pub struct MigrateArgs<'a> {
    pub table: &'a str,
    /// A server index (its newest run) or `INDEX.RUN`-style id as `status` shows.
    pub to: u64,
    pub range: Option<(u64, u64)>,
    pub wait: bool,
    /// Rocksteady, or one of the benchmark baselines.
    pub mode: MigrationMode,
}

/// `ramstore migrate TABLE --to SERVER_ID [--range START:END] [--no-wait]`.
pub fn migrate(
    client: &BlockingClient,
    coordinator: &str,
    args: MigrateArgs<'_>,
    format: Format,
) -> Result<()> {
    let id = table_id(client, args.table)?;
    let (start, end) = match args.range {
        Some(range) => range,
        None => only_tablet(&client.tablet_map().map_err(explain)?, id, args.table)?,
    };
    // A range inside a tablet is split out first (R Fig. 2 splitTablet).
    client.split_tablet(args.table, start).map_err(explain)?;
    if let Some(after) = end.checked_add(1) {
        client.split_tablet(args.table, after).map_err(explain)?;
    }
    let stats = coordinator_stats(client, coordinator)?;
    let newest = newest_runs(server_entries(&stats).into_iter().map(|(id, _)| id));
    let target = newest
        .get(&server_id::index(args.to))
        .copied()
        .unwrap_or(args.to);
    // Stop-and-copy answers only after the whole copy: one attempt must be
    // allowed to wait that long (a retry would find the migration in progress
    // and be refused), so it gets a client of its own with a long RPC deadline.
    let patient;
    let migrating_client = if args.mode == MigrationMode::StopAndCopy {
        patient = BlockingClient::connect(ClientOptions {
            rpc_deadline: STOP_AND_COPY_DEADLINE,
            operation_deadline: STOP_AND_COPY_DEADLINE,
            ..ClientOptions::new(coordinator.to_string())
        })
        .map_err(explain)?;
        &patient
    } else {
        client
    };
    let started = Instant::now();
    let migration = migrating_client
        .migrate_tablet_with_mode(args.table, start, end, target, args.mode)
        .map_err(explain)
        .with_context(|| format!("migrating table {} to server {}", args.table, args.to))?;
    let transfer = started.elapsed();
    if !args.wait {
        let mut out = std::io::stdout().lock();
        return match format {
            Format::Json => Ok(print_json(
                &mut out,
                &json!({"id": migration, "table": args.table, "start_hash": start,
                        "end_hash": end, "target": args.to, "state": "pulling",
                        "mode": args.mode.name(),
                        "ownership_transfer_ms": transfer.as_secs_f64() * 1e3}),
            )?),
            _ => Ok(writeln!(
                out,
                "migration {migration}: server {} owns the range now; its records are being \
                 pulled (see `ramstore migrations`)",
                args.to
            )?),
        };
    }
    let bar = (format == Format::Table).then(|| progress_bar(migration));
    let done = loop {
        let found = client.migrations().map_err(explain)?;
        match found.into_iter().find(|m| m.id == migration) {
            Some(m) if m.is_done() => break m,
            Some(m) if m.state == "cancelled" => bail!(
                "migration {migration} was cancelled; its range is going back to its source \
                 (see `ramstore migrations`)"
            ),
            Some(m) if m.is_rolled_back() => bail!(
                "migration {migration} was rolled back: a master crashed during it; the range \
                 is back on server {}",
                server_id::Show(m.source)
            ),
            Some(m) => {
                if let Some(bar) = &bar {
                    show_progress(bar, &m);
                }
            }
            // The coordinator keeps the newest finished migrations only.
            None => bail!(
                "migration {migration} is no longer listed (too many migrations finished \
                 since); see `ramstore status`"
            ),
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let took = started.elapsed().as_secs_f64();
    let bytes = done.bytes.unwrap_or(0);
    let mb_per_s = bytes as f64 / 1e6 / took.max(1e-9);
    let mut out = std::io::stdout().lock();
    match format {
        Format::Table => writeln!(
            out,
            "migrated table {} [{start:#018x}, {end:#018x}] to server {}: {} objects, {bytes} \
                 bytes in {took:.2} s ({mb_per_s:.1} MB/s; ownership moved after {:.1} ms)",
            args.table,
            args.to,
            done.objects.unwrap_or(0),
            transfer.as_secs_f64() * 1e3
        )?,
        Format::Json => print_json(
            &mut out,
            &json!({"id": migration, "table": args.table, "start_hash": start, "end_hash": end,
                    "source": done.source, "target": args.to, "state": "done",
                    "bytes": bytes, "objects": done.objects.unwrap_or(0), "seconds": took,
                    "total_bytes": done.total_bytes, "total_objects": done.total_objects,
                    "mb_per_s": mb_per_s, "mode": args.mode.name(),
                    "ownership_transfer_ms": transfer.as_secs_f64() * 1e3}),
        )?,
        Format::Raw => {}
    }
    Ok(())
}

/// A bar on stderr (hidden when stderr is not a terminal) for one migration's
/// objects, in percent.
pub(crate) fn progress_bar(id: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(100);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{prefix} {bar:40} {pos}% {msg} ({elapsed})")
    {
        bar.set_style(style);
    }
    bar.set_prefix(format!("migration {id}"));
    bar
}

/// Moves `bar` to where migration `m` is.
pub(crate) fn show_progress(bar: &indicatif::ProgressBar, m: &MigrationInfo) {
    if let Some(p) = m.percent() {
        bar.set_position(p as u64);
    }
    bar.set_message(format!(
        "{}: {} of {} bytes",
        m.state,
        m.bytes.unwrap_or(0),
        m.total_bytes
            .map_or_else(|| "?".to_owned(), |b| b.to_string())
    ));
}

/// The table's only tablet, or an error asking for `--range`.
fn only_tablet(map: &[TabletInfo], table_id: u64, name: &str) -> Result<(u64, u64)> {
    let tablets: Vec<&TabletInfo> = map.iter().filter(|t| t.table_id == table_id).collect();
    match tablets.as_slice() {
        [t] => Ok((t.start_hash, t.end_hash)),
        _ => bail!(
            "table {name} has {} tablets; say which range to move with --range START:END",
            tablets.len()
        ),
    }
}

/// `ramstore migrations`.
pub fn list(client: &BlockingClient, format: Format) -> Result<()> {
    let migrations = client.migrations().map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => {
            let items: Vec<_> = migrations.iter().map(to_json).collect();
            print_json(&mut out, &json!({ "migrations": items }))?
        }
        _ => {
            let mut cols = Columns::new(&[
                ("ID", true),
                ("TABLE", false),
                ("RANGE", false),
                ("SOURCE", true),
                ("TARGET", true),
                ("STATE", false),
                ("MOVED BYTES", true),
                ("OF BYTES", true),
                ("OBJECTS", true),
                ("DONE", true),
            ]);
            for m in &migrations {
                cols.row(vec![
                    m.id.to_string(),
                    m.table.clone(),
                    format!("{:#x}:{:#x}", m.start_hash, m.end_hash),
                    server_id::Show(m.source).to_string(),
                    server_id::Show(m.target).to_string(),
                    // `rolled_back` reads as two words in a table.
                    m.state.replace('_', " "),
                    m.bytes.map_or_else(|| "-".into(), |b| b.to_string()),
                    m.total_bytes.map_or_else(|| "-".into(), |b| b.to_string()),
                    m.objects.map_or_else(|| "-".into(), |b| b.to_string()),
                    m.percent()
                        .map_or_else(|| "-".into(), |p| format!("{p:.0}%")),
                ]);
            }
            if migrations.is_empty() {
                writeln!(out, "no migrations")?;
            } else {
                cols.print(&mut out)?;
            }
        }
    }
    Ok(())
}

fn to_json(m: &MigrationInfo) -> serde_json::Value {
    json!({"id": m.id, "table": m.table, "table_id": m.table_id, "start_hash": m.start_hash,
           "end_hash": m.end_hash, "source": m.source, "target": m.target, "state": m.state,
           "bytes": m.bytes, "objects": m.objects, "total_bytes": m.total_bytes,
           "total_objects": m.total_objects, "percent": m.percent()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_range_reads_decimal_and_hex() {
        assert_eq!(parse_range("0:10"), Ok((0, 10)));
        assert_eq!(
            parse_range("0x8000000000000000:0xffffffffffffffff"),
            Ok((1 << 63, u64::MAX))
        );
        assert!(parse_range("5:1").is_err());
        assert!(parse_range("5").is_err());
        assert!(parse_hash("zz").is_err());
    }
}
