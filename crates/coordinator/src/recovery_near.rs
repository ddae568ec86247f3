//! Recovery masters chosen near the data (issue 22; C§3.2, §4.2): when the
//! coordinator's recoveries are set to `near`, a crashed master's log is
//! replayed by the masters attached to one of its switches, reading each
//! segment from a holder on that same switch, so the data shuffle of R§7.4
//! (Fig. 14) crosses one switch instead of the whole network.
//!
//! The switch is the crashed master's switch with the most of its log's
//! segments held on it (a tree has one, the ToR; in a BCube(n, 1) with
//! proximity placement the replicas sit on the level-1 switch, C§3.2's
//! recovery ring). Without switches in the failure-domain fields
//! (`ramstore_wire::location`), or with no segment held on any of them,
//! recovery is as before: every master, any holder.

use std::collections::HashMap;

use ramstore_wire::location::Location;

use crate::recovery_log::FoundLog;
use crate::server_list::ServerEntry;

/// The switch a near recovery runs on, and which servers are attached to it.
pub(crate) struct Near {
    pub(crate) switch: String,
    /// Address → failure-domain field of every UP server.
    fields: HashMap<String, String>,
}

impl Near {
    /// The switch to recover `crashed`'s log on (see the module
    /// documentation); `None`: recover as before.
    pub(crate) fn choose(
        crashed: &ServerEntry,
        up: &[ServerEntry],
        log: &FoundLog,
    ) -> Option<Self> {
        let fields: HashMap<String, String> = up
            .iter()
            .map(|e| (e.address.clone(), e.failure_domain.clone()))
            .collect();
        let home = Location::parse(&crashed.failure_domain);
        let held_on = |switch: &str| {
            log.digest
                .iter()
                .filter(|id| {
                    log.holders.get(id).is_some_and(|hs| {
                        hs.iter().any(|h| {
                            fields
                                .get(h)
                                .is_some_and(|f| Location::parse(f).is_on(switch))
                        })
                    })
                })
                .count()
        };
        // The first of equals wins: the crashed master's own switch order.
        let mut best: Option<(usize, &str)> = None;
        for switch in home.switches() {
            let n = held_on(switch);
            if n > 0 && best.is_none_or(|(b, _)| n > b) {
                best = Some((n, switch));
            }
        }
        best.map(|(_, switch)| Self {
            switch: switch.to_string(),
            fields,
        })
    }

    /// Whether the server at `address` is attached to the chosen switch.
    pub(crate) fn is_near(&self, address: &str) -> bool {
        self.fields
            .get(address)
            .is_some_and(|f| Location::parse(f).is_on(&self.switch))
    }

    /// The masters on the switch; all of `masters` if none is.
    pub(crate) fn masters(&self, masters: &[ServerEntry]) -> Vec<ServerEntry> {
        let near: Vec<ServerEntry> = masters
            .iter()
            .filter(|m| self.is_near(&m.address))
            .cloned()
            .collect();
        if near.is_empty() {
            masters.to_vec()
        } else {
            near
        }
    }

    /// `log` with each segment's holders cut to those on the switch, where it
    /// has any: the fetch order then balances first holders among them
    /// (`recovery_log::fetch_order`).
    pub(crate) fn restrict(&self, log: &FoundLog) -> FoundLog {
        let holders = log
            .holders
            .iter()
            .map(|(id, hs)| {
                let near: Vec<String> = hs.iter().filter(|h| self.is_near(h)).cloned().collect();
                (*id, if near.is_empty() { hs.clone() } else { near })
            })
            .collect();
        FoundLog {
            holders,
            digest: log.digest.clone(),
            stats: log.stats.clone(),
            log_bytes: log.log_bytes,
        }
    }
}

/// Puts back, behind each segment's chosen holders, the holders [`Near::restrict`]
/// cut: fall-backs if a near holder fails mid-recovery.
pub(crate) fn add_fallbacks(sources: &mut [(u64, Vec<String>)], log: &FoundLog) {
    for (id, holders) in sources.iter_mut() {
        for h in log.holders.get(id).into_iter().flatten() {
            if !holders.contains(h) {
                holders.push(h.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server_list::{ServerId, ServerStatus, SERVICE_BACKUP, SERVICE_MASTER};

    fn entry(id: u64, field: &str) -> ServerEntry {
        ServerEntry {
            id: ServerId(id),
            address: format!("s{id}"),
            services: SERVICE_MASTER | SERVICE_BACKUP,
            memory_bytes: 1,
            status: ServerStatus::Up,
            failure_domain: field.into(),
            backup_read_mbps: 100,
            stopped_cleanly: false,
        }
    }

    /// Two racks of three (r0: s0–s2 on t0, r1: s3–s5 on t1); s0 crashed;
    /// segment 1 on s1 and s4, segment 2 on s2 and s5.
    fn tree() -> (ServerEntry, Vec<ServerEntry>, FoundLog) {
        let up: Vec<ServerEntry> = (1..6)
            .map(|i| entry(i, &format!("r{}@t{}", i / 3, i / 3)))
            .collect();
        let log = FoundLog {
            holders: [
                (1, vec!["s4".into(), "s1".into()]),
                (2, vec!["s5".into(), "s2".into()]),
            ]
            .into_iter()
            .collect(),
            digest: vec![1, 2],
            stats: Vec::new(),
            log_bytes: 2,
        };
        (entry(0, "r0@t0"), up, log)
    }

    #[test]
    fn choose_picks_the_switch_holding_the_log_and_its_masters() {
        let (crashed, up, log) = tree();
        let near = Near::choose(&crashed, &up, &log).expect("a switch");
        assert_eq!(near.switch, "t0");
        let masters: Vec<u64> = near.masters(&up).iter().map(|m| m.id.0).collect();
        assert_eq!(masters, [1, 2]);
        let cut = near.restrict(&log);
        assert_eq!(cut.holders[&1], ["s1"]);
        let mut sources = vec![(1, vec!["s1".to_string()]), (2, vec!["s2".to_string()])];
        add_fallbacks(&mut sources, &log);
        assert_eq!(sources[0].1, ["s1", "s4"]);
    }

    #[test]
    fn choose_without_switches_recovers_as_before() {
        let (_, up, log) = tree();
        assert!(Near::choose(&entry(0, "r0"), &up, &log).is_none());
        assert!(Near::choose(&entry(0, "r9@t9"), &up, &log).is_none());
    }
}
