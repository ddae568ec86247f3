//! `ramstore rebalance [--dry-run] [--band PCT] [--parallel N]`: even out the
//! masters' memory use by splitting and migrating tablets live (issue 20,
//! K§2.3). The plan comes from the pure planner
//! (`ramstore_coordinator::rebalance`) over what the masters' statistics say;
//! `--dry-run` prints it, otherwise it runs with at most `--parallel`
//! migrations at a time and a progress bar, then prints the loads after.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use ramstore_client::{server_id, BlockingClient};
use ramstore_coordinator::master_stats::{MasterStats, MAX_FILL_AFTER_MIGRATION};
use ramstore_coordinator::rebalance::{balanced, band_bounds, plan, ServerLoad, Step, TabletLoad};
use serde_json::json;

use crate::data::{coordinator_stats, explain, server_entries, table_list};
use crate::output::{print_json, Columns, Format};

/// How often a running rebalance asks how its migrations are going.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// At most this many plans are run (each from fresh statistics).
const ROUNDS: usize = 3;

/// What `rebalance` was asked to do.
pub struct RebalanceArgs {
    pub dry_run: bool,
    /// The band around the mean, in percent.
    pub band_pct: f64,
    /// Migrations in flight at once.
    pub parallel: usize,
}

/// The masters' loads (UP servers with a log) and the tables' names by id.
fn gather(
    client: &BlockingClient,
    coordinator: &str,
) -> Result<(Vec<ServerLoad>, BTreeMap<u64, String>)> {
    let stats = coordinator_stats(client, coordinator)?;
    let names: BTreeMap<u64, String> = table_list(&stats)
        .into_iter()
        .map(|(id, _, name)| (id, name))
        .collect();
    let map = client.tablet_map().map_err(explain)?;
    let mut servers = Vec::new();
    for (id, value) in server_entries(&stats) {
        let mut parts = value.split_whitespace();
        let (Some(address), Some("up")) = (parts.next(), parts.next()) else {
            continue;
        };
        let Ok(text) = client.server_stats(address) else {
            bail!(
                "server {} ({address}) did not answer; rebalance needs every master's statistics",
                server_id::Show(id)
            );
        };
        let master = MasterStats::parse(&text);
        if master.memory_bytes == 0 {
            continue; // A backup without a master.
        }
        let tablets: Vec<TabletLoad> = map
            .iter()
            .filter(|t| t.server_id == id)
            .map(|t| TabletLoad {
                table_id: t.table_id,
                start_hash: t.start_hash,
                end_hash: t.end_hash,
                bytes: master
                    .tablets
                    .iter()
                    .find(|x| x.table_id == t.table_id && x.start_hash == t.start_hash)
                    .map_or(0, |x| x.bytes),
            })
            .collect();
        let in_tablets: u64 = tablets.iter().map(|t| t.bytes).sum();
        // Memory that is not in tablets (tombstones, dead space) stays where it is.
        let other = master.used_bytes.saturating_sub(in_tablets);
        let limit = (master.memory_bytes as f64 * MAX_FILL_AFTER_MIGRATION) as u64;
        servers.push(ServerLoad {
            id,
            capacity: limit.saturating_sub(other),
            tablets,
        });
    }
    Ok((servers, names))
}

/// `ramstore rebalance`.
pub fn rebalance(
    client: &BlockingClient,
    coordinator: &str,
    args: RebalanceArgs,
    format: Format,
) -> Result<()> {
    if !(0.0..100.0).contains(&args.band_pct) || args.band_pct.is_nan() {
        bail!(
            "--band must be a percentage from 0 to 100 (got {})",
            args.band_pct
        );
    }
    let band = args.band_pct / 100.0;
    let (servers, names) = gather(client, coordinator)?;
    let total: u64 = servers.iter().map(ServerLoad::load).sum();
    let mut out = std::io::stdout().lock();
    let nothing = |out: &mut std::io::StdoutLock<'_>, why: &str| -> Result<()> {
        match format {
            Format::Json => print_json(out, &json!({"steps": [], "balanced": true, "note": why}))?,
            _ => writeln!(out, "nothing to do: {why}")?,
        }
        Ok(())
    };
    if servers.len() < 2 {
        return nothing(&mut out, "fewer than two masters are up");
    }
    if total == 0 {
        return nothing(&mut out, "the masters hold no data");
    }
    let (lo, hi) = band_bounds(&servers, band);
    if balanced(&servers, band) {
        let why = format!(
            "every master holds {lo} to {hi} bytes (within ±{}% of the mean)",
            args.band_pct
        );
        return nothing(&mut out, &why);
    }
    let steps = plan(&servers, band);
    if steps.is_empty() {
        bail!(
            "no plan brings every master within ±{}% of the mean: the masters below it lack \
             the free memory, or the tablets cannot be split further",
            args.band_pct
        );
    }
    let name = |table_id: u64| names.get(&table_id).cloned().unwrap_or_default();
    if args.dry_run {
        return print_plan(&mut out, &steps, &name, format);
    }
    let started = Instant::now();
    let mut moved = execute(client, &steps, &name, args.parallel.max(1), format)?;
    let mut steps = steps;
    let (mut after, _) = gather(client, coordinator)?;
    // The plan assumes bytes spread evenly over hashes; if the real halves of
    // a split differ enough to leave a master outside the band, plan again
    // from what the masters now report.
    for _ in 1..ROUNDS {
        let more = plan(&after, band);
        if balanced(&after, band) || more.is_empty() {
            break;
        }
        moved += execute(client, &more, &name, args.parallel.max(1), format)?;
        steps.extend(more);
        after = gather(client, coordinator)?.0;
    }
    let took = started.elapsed().as_secs_f64();
    let loads =
        |s: &[ServerLoad]| -> BTreeMap<u64, u64> { s.iter().map(|x| (x.id, x.load())).collect() };
    let (before_loads, after_loads) = (loads(&servers), loads(&after));
    match format {
        Format::Json => print_json(
            &mut out,
            &json!({"steps": steps, "moved_bytes": moved, "seconds": took,
                    "band": [lo, hi], "balanced": balanced(&after, band),
                    "servers": after_loads.iter().map(|(id, bytes)| json!({
                        "id": id, "bytes_before": before_loads.get(id), "bytes": bytes}))
                        .collect::<Vec<_>>()}),
        )?,
        _ => {
            let mut cols = Columns::new(&[
                ("SERVER", true),
                ("BYTES BEFORE", true),
                ("BYTES AFTER", true),
            ]);
            for (id, bytes) in &after_loads {
                cols.row(vec![
                    server_id::Show(*id).to_string(),
                    before_loads
                        .get(id)
                        .map_or_else(|| "-".into(), |b| b.to_string()),
                    bytes.to_string(),
                ]);
            }
            cols.print(&mut out)?;
            writeln!(
                out,
                "rebalanced: {} step(s), {moved} bytes moved in {took:.1} s; band {lo}..{hi} bytes{}",
                steps.len(),
                if balanced(&after, band) { "" } else { " (not every master is inside it yet: run again)" }
            )?;
        }
    }
    Ok(())
}

fn print_plan<W: Write>(
    out: &mut W,
    steps: &[Step],
    name: &dyn Fn(u64) -> String,
    format: Format,
) -> Result<()> {
    if format == Format::Json {
        print_json(out, &json!({"steps": steps, "dry_run": true}))?;
        return Ok(());
    }
    let mut cols = Columns::new(&[
        ("STEP", false),
        ("TABLE", false),
        ("RANGE", false),
        ("FROM", true),
        ("TO", true),
        ("BYTES", true),
    ]);
    for step in steps {
        cols.row(match *step {
            Step::Split {
                table_id,
                start_hash,
                end_hash,
                at,
            } => vec![
                "split".into(),
                name(table_id),
                format!("{start_hash:#x}:{end_hash:#x} at {at:#x}"),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
            Step::Move {
                table_id,
                start_hash,
                end_hash,
                from,
                to,
                bytes,
            } => vec![
                "move".into(),
                name(table_id),
                format!("{start_hash:#x}:{end_hash:#x}"),
                server_id::Show(from).to_string(),
                server_id::Show(to).to_string(),
                bytes.to_string(),
            ],
        });
    }
    cols.print(out)?;
    writeln!(out, "dry run: nothing changed")?;
    Ok(())
}

/// Carries out `steps` in order, at most `parallel` migrations at a time (a
/// split waits until no migration is in flight, as it may split a tablet one
/// has just moved). Returns the bytes moved.
fn execute(
    client: &BlockingClient,
    steps: &[Step],
    name: &dyn Fn(u64) -> String,
    parallel: usize,
    format: Format,
) -> Result<u64> {
    let moves = steps
        .iter()
        .filter(|s| matches!(s, Step::Move { .. }))
        .count();
    let bar = (format == Format::Table).then(|| {
        let bar = indicatif::ProgressBar::new(moves as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "rebalancing {bar:40} {pos}/{len} migrations ({elapsed})",
        ) {
            bar.set_style(style);
        }
        bar
    });
    let mut in_flight: Vec<u64> = Vec::new();
    let mut moved = 0;
    let mut wait_until_at_most = |in_flight: &mut Vec<u64>, n: usize| -> Result<()> {
        while in_flight.len() > n {
            let listed = client.migrations().map_err(explain)?;
            let mine: Vec<_> = listed
                .iter()
                .filter(|m| in_flight.contains(&m.id))
                .collect();
            for m in mine {
                match m.state.as_str() {
                    "done" => {
                        moved += m.bytes.unwrap_or(0);
                        in_flight.retain(|id| *id != m.id);
                        if let Some(bar) = &bar {
                            bar.inc(1);
                        }
                    }
                    "cancelled" => bail!("migration {} was cancelled; rebalance stops", m.id),
                    "rolled_back" => bail!(
                        "migration {} was rolled back (a master crashed); run rebalance again",
                        m.id
                    ),
                    _ => {}
                }
            }
            if in_flight
                .iter()
                .any(|id| !listed.iter().any(|m| m.id == *id))
            {
                bail!("a migration is no longer listed (too many finished since); run rebalance again");
            }
            if in_flight.len() > n {
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        Ok(())
    };
    for step in steps {
        match *step {
            Step::Split { table_id, at, .. } => {
                wait_until_at_most(&mut in_flight, 0)?;
                client.split_tablet(&name(table_id), at).map_err(explain)?;
            }
            Step::Move {
                table_id,
                start_hash,
                end_hash,
                to,
                ..
            } => {
                wait_until_at_most(&mut in_flight, parallel - 1)?;
                let id = client
                    .migrate_tablet(&name(table_id), start_hash, end_hash, to)
                    .map_err(explain)?;
                in_flight.push(id);
            }
        }
    }
    wait_until_at_most(&mut in_flight, 0)?;
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(moved)
}
