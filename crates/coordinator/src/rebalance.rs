//! The rebalancing planner (issue 20): given each master's capacity and the
//! bytes of each of its tablets, the tablet splits and migrations (K§2.3) that
//! bring every master's memory use within a band around the mean. A pure
//! function: `ramstore rebalance` gathers the inputs from the masters'
//! statistics, prints the plan (`--dry-run`) or carries it out.
//!
//! Greedy: while the most loaded master is above the band or the least loaded
//! below it, move the largest tablet of the most loaded that fits the gap to
//! the least loaded master with room for it; when no tablet fits, split the
//! smallest one that is too big at its hash midpoint (R Fig. 2 splitTablet; the
//! model assumes a tablet's bytes are spread evenly over its hashes, as key
//! hashing makes them). Each move is smaller than the gap between the two
//! masters, so the spread of loads shrinks with every move; the plan is capped
//! at [`MAX_STEPS`] in any case.
//!
//! Invariants of a plan, applied in order (checked by the property test):
//! total bytes are conserved; no master ends above its capacity; each step
//! names a tablet that exists at that point; and when every tablet can be split
//! and every master has room, every master ends inside the band.
//!
//! Thread-safety: pure functions over plain data.

use serde::Serialize;

/// The most steps one plan has (a bound on work, never reached by a feasible
/// plan of a real cluster).
pub const MAX_STEPS: usize = 512;

/// One tablet as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TabletLoad {
    pub table_id: u64,
    pub start_hash: u64,
    pub end_hash: u64,
    /// Bytes of its live objects.
    pub bytes: u64,
}

/// One master as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerLoad {
    pub id: u64,
    /// The most bytes of tablets it may hold (its memory below the fill
    /// limit, `master_stats::MAX_FILL_AFTER_MIGRATION`).
    pub capacity: u64,
    pub tablets: Vec<TabletLoad>,
}

impl ServerLoad {
    pub fn load(&self) -> u64 {
        self.tablets.iter().map(|t| t.bytes).sum()
    }
}

/// One step of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Split the tablet of `table_id` starting at `start_hash` so that a new
    /// one starts at `at`.
    Split {
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        at: u64,
    },
    /// Migrate the tablet `[start_hash, end_hash]` from master `from` to `to`.
    Move {
        table_id: u64,
        start_hash: u64,
        end_hash: u64,
        from: u64,
        to: u64,
        bytes: u64,
    },
}

/// The band around the mean load: `[mean × (1 − band), mean × (1 + band)]`.
pub fn band_bounds(servers: &[ServerLoad], band: f64) -> (u64, u64) {
    let total: u64 = servers.iter().map(ServerLoad::load).sum();
    let mean = total as f64 / servers.len().max(1) as f64;
    (
        (mean * (1.0 - band)).floor() as u64,
        (mean * (1.0 + band)).ceil() as u64,
    )
}

/// Whether every master's load is inside the band.
pub fn balanced(servers: &[ServerLoad], band: f64) -> bool {
    let (lo, hi) = band_bounds(servers, band);
    servers.iter().all(|s| (lo..=hi).contains(&s.load()))
}

/// The plan for `servers` and `band` (a fraction: 0.1 is ±10%). Empty when
/// they are balanced already, or nothing can be moved.
pub fn plan(servers: &[ServerLoad], band: f64) -> Vec<Step> {
    let mut model = servers.to_vec();
    let mut steps = Vec::new();
    if model.len() < 2 {
        return steps;
    }
    let total: u64 = model.iter().map(ServerLoad::load).sum();
    let mean = total as f64 / model.len() as f64;
    let (lo, hi) = band_bounds(&model, band);
    // Moves may overshoot the mean by half the band and still end inside it.
    let slack = (mean * band / 2.0) as u64;
    while steps.len() < MAX_STEPS {
        let (h, l) = extremes(&model);
        let (h_load, l_load) = (model[h].load(), model[l].load());
        if h_load <= hi && l_load >= lo {
            break;
        }
        let gap = (h_load.saturating_sub(mean as u64)).min((mean as u64).saturating_sub(l_load));
        let want = gap + slack;
        match choose(&model, h, want) {
            Choice::Move(i) => {
                let t = model[h].tablets[i];
                let Some(to) = receiver(&model, h, t.bytes) else {
                    break;
                };
                model[h].tablets.remove(i);
                model[to].tablets.push(t);
                steps.push(Step::Move {
                    table_id: t.table_id,
                    start_hash: t.start_hash,
                    end_hash: t.end_hash,
                    from: model[h].id,
                    to: model[to].id,
                    bytes: t.bytes,
                });
            }
            Choice::Split(i) => {
                let t = model[h].tablets[i];
                let at = t.start_hash + (t.end_hash - t.start_hash) / 2 + 1;
                let lower = (t.bytes as u128 * u128::from(at - t.start_hash)
                    / (u128::from(t.end_hash - t.start_hash) + 1))
                    as u64;
                model[h].tablets[i] = TabletLoad {
                    end_hash: at - 1,
                    bytes: lower,
                    ..t
                };
                model[h].tablets.push(TabletLoad {
                    start_hash: at,
                    bytes: t.bytes - lower,
                    ..t
                });
                steps.push(Step::Split {
                    table_id: t.table_id,
                    start_hash: t.start_hash,
                    end_hash: t.end_hash,
                    at,
                });
            }
            Choice::Nothing => break,
        }
    }
    steps
}

/// The most and the least loaded master (by index; ties to the first).
fn extremes(model: &[ServerLoad]) -> (usize, usize) {
    let mut h = 0;
    let mut l = 0;
    for (i, s) in model.iter().enumerate() {
        if s.load() > model[h].load() {
            h = i;
        }
        if s.load() < model[l].load() {
            l = i;
        }
    }
    (h, l)
}

enum Choice {
    Move(usize),
    Split(usize),
    Nothing,
}

/// What to do with master `h`'s tablets to shed about `want` bytes: move the
/// largest tablet of at most `want` bytes if it is at least half of `want`,
/// else split the smallest splittable tablet above `want`, else move the
/// largest that fits anyway.
fn choose(model: &[ServerLoad], h: usize, want: u64) -> Choice {
    let tablets = &model[h].tablets;
    let fitting = tablets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.bytes > 0 && t.bytes <= want)
        .max_by_key(|(_, t)| t.bytes)
        .map(|(i, t)| (i, t.bytes));
    if let Some((i, bytes)) = fitting {
        if bytes >= want / 2 {
            return Choice::Move(i);
        }
    }
    let splittable = tablets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.bytes > want && t.end_hash > t.start_hash)
        .min_by_key(|(_, t)| t.bytes)
        .map(|(i, _)| i);
    match (splittable, fitting) {
        (Some(i), _) => Choice::Split(i),
        (None, Some((i, _))) => Choice::Move(i),
        (None, None) => Choice::Nothing,
    }
}

/// The least loaded master other than `from` with room for `bytes`.
fn receiver(model: &[ServerLoad], from: usize, bytes: u64) -> Option<usize> {
    model
        .iter()
        .enumerate()
        .filter(|(i, s)| *i != from && s.load() + bytes <= s.capacity)
        .min_by_key(|(_, s)| s.load())
        .map(|(i, _)| i)
}

/// Applies `steps` to `servers` as the planner's model does; `None` if a step
/// names a tablet that is not where it says (used by tests and `--dry-run`'s
/// summary).
pub fn apply(servers: &[ServerLoad], steps: &[Step]) -> Option<Vec<ServerLoad>> {
    let mut model = servers.to_vec();
    for step in steps {
        match *step {
            Step::Split {
                table_id,
                start_hash,
                end_hash,
                at,
            } => {
                let s = model.iter_mut().find(|s| {
                    s.tablets.iter().any(|t| {
                        (t.table_id, t.start_hash, t.end_hash) == (table_id, start_hash, end_hash)
                    })
                })?;
                let i = s.tablets.iter().position(|t| {
                    (t.table_id, t.start_hash, t.end_hash) == (table_id, start_hash, end_hash)
                })?;
                let t = s.tablets[i];
                if !(start_hash < at && at <= end_hash) {
                    return None;
                }
                let lower = (t.bytes as u128 * u128::from(at - start_hash)
                    / (u128::from(end_hash - start_hash) + 1)) as u64;
                s.tablets[i] = TabletLoad {
                    end_hash: at - 1,
                    bytes: lower,
                    ..t
                };
                s.tablets.push(TabletLoad {
                    start_hash: at,
                    bytes: t.bytes - lower,
                    ..t
                });
            }
            Step::Move {
                table_id,
                start_hash,
                end_hash,
                from,
                to,
                ..
            } => {
                let f = model.iter().position(|s| s.id == from)?;
                let i = model[f].tablets.iter().position(|t| {
                    (t.table_id, t.start_hash, t.end_hash) == (table_id, start_hash, end_hash)
                })?;
                let t = model[f].tablets.remove(i);
                model.iter_mut().find(|s| s.id == to)?.tablets.push(t);
            }
        }
    }
    Some(model)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn server(id: u64, capacity: u64, tablets: &[(u64, u64, u64, u64)]) -> ServerLoad {
        ServerLoad {
            id,
            capacity,
            tablets: tablets
                .iter()
                .map(|&(table_id, start_hash, end_hash, bytes)| TabletLoad {
                    table_id,
                    start_hash,
                    end_hash,
                    bytes,
                })
                .collect(),
        }
    }

    #[test]
    fn plan_balanced_cluster_is_empty() {
        let servers = [
            server(1, 1000, &[(1, 0, u64::MAX, 100)]),
            server(2, 1000, &[(2, 0, u64::MAX, 105)]),
        ];
        assert!(plan(&servers, 0.1).is_empty());
        assert!(plan(&[], 0.1).is_empty());
        assert!(plan(&servers[..1], 0.1).is_empty());
    }

    #[test]
    fn plan_new_empty_server_gets_a_third_by_splitting() {
        let servers = [
            server(1, 10_000, &[(1, 0, u64::MAX, 3000)]),
            server(2, 10_000, &[(2, 0, u64::MAX, 3000)]),
            server(3, 10_000, &[]),
        ];
        let steps = plan(&servers, 0.1);
        assert!(steps.iter().any(|s| matches!(s, Step::Split { .. })));
        let after = apply(&servers, &steps).expect("applies");
        assert!(balanced(&after, 0.1), "{after:?}");
    }

    #[test]
    fn plan_never_moves_to_a_server_without_room() {
        let servers = [
            server(1, 10_000, &[(1, 0, u64::MAX, 3000)]),
            server(2, 10, &[]),
        ];
        let steps = plan(&servers, 0.1);
        let after = apply(&servers, &steps).expect("applies");
        assert_eq!(after[1].load(), 0, "{steps:?}");
    }

    /// Up to 5 servers with up to 4 tables spread over them, every tablet
    /// splittable.
    fn cluster() -> impl Strategy<Value = Vec<ServerLoad>> {
        (
            2usize..6,
            prop::collection::vec((0usize..6, 0u64..50_000), 0..8),
        )
            .prop_map(|(n, tables)| {
                let mut servers: Vec<ServerLoad> = (0..n)
                    .map(|i| ServerLoad {
                        id: i as u64 + 1,
                        capacity: u64::MAX / 8,
                        tablets: Vec::new(),
                    })
                    .collect();
                for (table, (owner, bytes)) in tables.into_iter().enumerate() {
                    servers[owner % n].tablets.push(TabletLoad {
                        table_id: table as u64 + 1,
                        start_hash: 0,
                        end_hash: u64::MAX,
                        bytes,
                    });
                }
                servers
            })
    }

    proptest! {
        #[test]
        fn plan_conserves_bytes_respects_capacity_and_balances(
            servers in cluster(),
            band in 0.05f64..0.3,
            capacity_limit in prop::option::of(10_000u64..200_000),
        ) {
            let mut servers = servers;
            if let Some(cap) = capacity_limit {
                for s in &mut servers {
                    s.capacity = cap.max(s.load());
                }
            }
            let steps = plan(&servers, band);
            prop_assert!(steps.len() <= MAX_STEPS);
            let after = apply(&servers, &steps).expect("every step names a tablet where it is");
            let before_total: u64 = servers.iter().map(ServerLoad::load).sum();
            let after_total: u64 = after.iter().map(ServerLoad::load).sum();
            prop_assert_eq!(before_total, after_total);
            for s in &after {
                let start = servers.iter().find(|x| x.id == s.id).unwrap();
                prop_assert!(
                    s.load() <= s.capacity.max(start.load()),
                    "server {} above its capacity", s.id
                );
            }
            // Feasible: unlimited room and something to spread (tiny totals
            // cannot be split into the band's granularity of whole bytes).
            let (_, hi) = band_bounds(&servers, band);
            if capacity_limit.is_none() && before_total > 1000 * servers.len() as u64
                && hi > 0
            {
                prop_assert!(balanced(&after, band), "{:?} -> {:?}", servers, after);
            }
        }
    }
}
