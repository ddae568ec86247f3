//! Live tablet migrations in the simulation (K§2.3, issue 20): while the
//! clients run, one admin client keeps moving a random tablet of the table to
//! another master and waits until the move is done, so the history checker
//! judges every operation that ran across an ownership move, a PriorityPull or
//! a background pull.
//!
//! Thread-safety: one task; its choices come from its own seeded generator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ramstore_client::Client;
use ramstore_clock::Rng;

use crate::clock::SimClock;

/// How long one migration may take before the driver stops waiting for it.
const DONE_WITHIN: Duration = Duration::from_secs(30);

/// Moves random tablets of `table` (named `name`) until `end` (simulated time
/// since the start of `clock`; the simulation's timers are tokio's paused ones); counts the migrations that finished in `done`.
pub async fn drive(
    admin: Client,
    (name, table): (&str, u64),
    clock: Arc<SimClock>,
    rng: Arc<dyn Rng>,
    end: Duration,
    done: Arc<AtomicU64>,
) {
    while clock.elapsed() < end {
        let pause = 500 + rng.next_u64() % 1_500;
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let Ok(map) = admin.tablet_map().await else {
            continue;
        };
        let tablets: Vec<_> = map.iter().filter(|t| t.table_id == table).collect();
        let mut owners: Vec<u64> = map.iter().map(|t| t.server_id).collect();
        owners.sort_unstable();
        owners.dedup();
        if tablets.is_empty() || owners.len() < 2 {
            continue;
        }
        let t = tablets[(rng.next_u64() % tablets.len() as u64) as usize];
        let others: Vec<u64> = owners.into_iter().filter(|o| *o != t.server_id).collect();
        let target = others[(rng.next_u64() % others.len() as u64) as usize];
        let Ok(id) = admin
            .migrate_tablet(name, t.start_hash, t.end_hash, target)
            .await
        else {
            continue;
        };
        let deadline = clock.elapsed() + DONE_WITHIN;
        while clock.elapsed() < deadline {
            let finished = admin
                .migrations()
                .await
                .is_ok_and(|ms| ms.iter().any(|m| m.id == id && m.is_done()));
            if finished {
                done.fetch_add(1, Ordering::Relaxed);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
