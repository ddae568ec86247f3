//! `ramstore migrate --cancel ID`: cancel a live migration (issue 20; design
//! notes "Cancelling a migration"). The coordinator records the cancel; the
//! migration finishes and a return migration brings the range back to its
//! source, so no write acknowledged meanwhile is lost. Waits for the return
//! unless `--no-wait`.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use ramstore_client::{server_id, BlockingClient, MigrationInfo};
use serde_json::json;

use crate::data::explain;
use crate::migrate::{progress_bar, show_progress};
use crate::output::{print_json, Format};

/// How often the command asks the coordinator how the return is going.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Where a cancelled migration is.
enum Stage {
    /// Still moving to its target (state `cancelling`).
    Finishing(MigrationInfo),
    /// Coming back to its source.
    Returning(MigrationInfo),
    /// Back on its source.
    Back(MigrationInfo),
}

/// Finds cancelled migration `id` and its return in the coordinator's list.
fn stage(client: &BlockingClient, id: u64) -> Result<Stage> {
    let all = client.migrations().map_err(explain)?;
    if let Some(ret) = all.iter().find(|m| m.returns == Some(id)) {
        return Ok(if ret.is_done() {
            Stage::Back(ret.clone())
        } else {
            Stage::Returning(ret.clone())
        });
    }
    match all.into_iter().find(|m| m.id == id) {
        Some(m) if m.state == "cancelling" => Ok(Stage::Finishing(m)),
        Some(m) => bail!(
            "migration {id} is {} and nothing brings it back; see the coordinator's log",
            m.state
        ),
        None => bail!("migration {id} is no longer listed (too many migrations finished since)"),
    }
}

/// `ramstore migrate --cancel ID [--no-wait]`.
pub fn cancel(client: &BlockingClient, id: u64, wait: bool, format: Format) -> Result<()> {
    client.cancel_migration(id).map_err(explain)?;
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    if !wait {
        return match format {
            Format::Json => Ok(print_json(
                &mut out,
                &json!({"id": id, "state": "cancelling"}),
            )?),
            _ => Ok(writeln!(
                out,
                "migration {id}: cancelled; its range goes back to its source once it has \
                 arrived (see `ramstore migrations`)"
            )?),
        };
    }
    let bar = (format == Format::Table).then(|| progress_bar(id));
    let back = loop {
        match stage(client, id)? {
            Stage::Back(ret) => break ret,
            Stage::Finishing(m) | Stage::Returning(m) => {
                if let Some(bar) = &bar {
                    bar.set_prefix(format!("migration {}", m.id));
                    show_progress(bar, &m);
                }
            }
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let took = started.elapsed().as_secs_f64();
    match format {
        Format::Json => print_json(
            &mut out,
            &json!({"id": id, "state": "cancelled", "returned_by": back.id,
                    "owner": back.target, "seconds": took}),
        )?,
        Format::Table => writeln!(
            out,
            "migration {id} cancelled: table {} [{:#018x}, {:#018x}] is back on server {} \
             (migration {} returned {} objects in {took:.2} s)",
            back.table,
            back.start_hash,
            back.end_hash,
            server_id::Show(back.target),
            back.id,
            back.objects.unwrap_or(0)
        )?,
        Format::Raw => {}
    }
    Ok(())
}
