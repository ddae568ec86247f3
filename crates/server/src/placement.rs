//! Where a master puts a replica: randomization with refinement (R§7.1).
//!
//! For each replica of a segment the master picks [`PLACEMENT_CANDIDATES`] backups at
//! random among the eligible ones and keeps the one whose disk would finish reading
//! its share of this master's replicas soonest, should the master crash:
//! `(replica_bytes + segment_bytes) / backup_read_mbps`. Random choice spreads each
//! master's replicas over the whole cluster (so recovery reads from every disk at
//! once, R§7.1); the refinement evens out the time each disk needs, taking slower
//! disks and backups already holding much of this master's log into account, without
//! a central allocator.
//!
//! A backup is eligible for a replica when it is not the master, holds no replica
//! of the segment yet, has not refused (full) or failed for this replica, and its
//! failure domain is neither the master's nor that of a backup already holding a
//! replica of the segment — so one failure cause (a rack, a power supply) never takes
//! a segment's every copy. An empty domain means "the server is its own domain":
//! it conflicts with no other server. The domain is the part of the field before
//! any `@` (the rest names the server's switches, `ramstore_wire::location`).
//!
//! [`Placement::Proximity`] (issue 22, C§3) prefers backups one hop from the
//! master under the same domain rules; see [`choose_backup_with`].
//!
//! This module is pure (no I/O, no clock): the caller passes the UP backups it knows
//! of (from the coordinator's server list) and a random number generator.

use ramstore_wire::location::Location;
use rand::seq::index::sample;
use rand::Rng;

/// A backup a replica may be placed on: an UP server running a backup service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub server_id: u64,
    /// Its failure domain; empty: the server is its own domain.
    pub failure_domain: &'a str,
    /// Its disk's read speed in MB/s as measured at its start-up (0 is taken as 1,
    /// the slowest).
    pub backup_read_mbps: u32,
    /// bytes of this master's replicas the backup already holds
    pub replica_bytes: u64,
}

/// Candidates drawn at random for each replica, of which the best is kept (R§7.1
/// uses 5: enough to even out disk loads, few enough to keep the choice random).
pub const PLACEMENT_CANDIDATES: usize = 5;

/// Whether two servers share a failure domain: the same server always does; two
/// servers do when the domain parts of their fields (before any `@switches`,
/// [`Location`]) are equal and not empty.
fn same_domain(a_id: u64, a_field: &str, b_id: u64, b_field: &str) -> bool {
    let (a, b) = (
        Location::parse(a_field).domain,
        Location::parse(b_field).domain,
    );
    a_id == b_id || (!a.is_empty() && a == b)
}

/// The rules a replica's backup must keep: besides the segment's own
/// exclusions, whether the master's failure domain is allowed (only for the
/// one near replica of [`Placement::Proximity`] in a tree) and which
/// candidates are wanted at all.
struct Rule<'r> {
    allow_master_domain: bool,
    wanted: &'r dyn Fn(&Candidate<'_>) -> bool,
}

/// Whether `c` may hold the replica (see the module documentation). The failure
/// domain of a `taken` server is looked up in `candidates`; a taken server that is
/// not among them (crashed since, say) excludes only itself.
fn eligible(
    c: &Candidate<'_>,
    candidates: &[Candidate<'_>],
    master: (u64, &str),
    taken: &[u64],
    excluded: &[u64],
    rule: &Rule<'_>,
) -> bool {
    if taken.contains(&c.server_id) || excluded.contains(&c.server_id) || !(rule.wanted)(c) {
        return false;
    }
    if c.server_id == master.0
        || (!rule.allow_master_domain
            && same_domain(c.server_id, c.failure_domain, master.0, master.1))
    {
        return false;
    }
    !taken.iter().any(|&t| {
        let t_domain = candidates
            .iter()
            .find(|o| o.server_id == t)
            .map_or("", |o| o.failure_domain);
        same_domain(c.server_id, c.failure_domain, t, t_domain)
    })
}

/// Whether `a` would finish reading its share sooner than `b`:
/// `(a.replica_bytes + segment) / a.speed < (b.replica_bytes + segment) / b.speed`,
/// compared exactly by cross-multiplying.
fn finishes_sooner(a: &Candidate<'_>, b: &Candidate<'_>, segment_bytes: u64) -> bool {
    let work = |c: &Candidate<'_>| u128::from(c.replica_bytes) + u128::from(segment_bytes);
    let speed = |c: &Candidate<'_>| u128::from(c.backup_read_mbps.max(1));
    work(a) * speed(b) < work(b) * speed(a)
}

/// How a master chooses backups for its replicas (issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// RAMCloud's: scattered over the whole cluster at random, with
    /// refinement (R§7.1). The default.
    #[default]
    Scattered,
    /// RAMCube's: replicas one hop from the master (C§3.2, §4.2), still in
    /// distinct failure domains (C§4.3); see [`choose_backup_with`].
    Proximity,
}

/// Picks a backup for one replica: PLACEMENT_CANDIDATES random eligible candidates, keep the one whose disk would finish reading its share of this master's replicas (replica_bytes + segment_bytes)/read speed soonest.
///
/// `candidates` holds only UP servers with a backup service (the caller filters);
/// `taken` the servers already holding a replica of this segment; `excluded` those
/// that refused (full) or failed for this replica. Returns `None` when no candidate
/// is eligible. With [`PLACEMENT_CANDIDATES`] or fewer eligible candidates, all of
/// them are compared; ties go to the first drawn (at random).
pub fn choose_backup<R: Rng>(
    candidates: &[Candidate<'_>],
    master_id: u64,
    master_domain: &str,
    taken: &[u64],
    excluded: &[u64],
    segment_bytes: u64,
    rng: &mut R,
) -> Option<u64> {
    let rule = Rule {
        allow_master_domain: false,
        wanted: &|_| true,
    };
    let request = Request {
        candidates,
        master: (master_id, master_domain),
        taken,
        excluded,
        segment_bytes,
    };
    choose_under(&request, &rule, rng)
}

/// One replica's placement question: who may hold it and who already does.
struct Request<'q, 'a> {
    candidates: &'q [Candidate<'a>],
    master: (u64, &'q str),
    taken: &'q [u64],
    excluded: &'q [u64],
    segment_bytes: u64,
}

/// Randomization with refinement (R§7.1) among the candidates `rule` admits.
fn choose_under<R: Rng>(q: &Request<'_, '_>, rule: &Rule<'_>, rng: &mut R) -> Option<u64> {
    let eligible: Vec<&Candidate<'_>> = q
        .candidates
        .iter()
        .filter(|c| eligible(c, q.candidates, q.master, q.taken, q.excluded, rule))
        .collect();
    let drawn = PLACEMENT_CANDIDATES.min(eligible.len());
    let mut best: Option<&Candidate<'_>> = None;
    for i in sample(rng, eligible.len(), drawn) {
        let c = eligible[i];
        if best.is_none_or(|b| finishes_sooner(c, b, q.segment_bytes)) {
            best = Some(c);
        }
    }
    best.map(|c| c.server_id)
}

/// [`choose_backup`] under `placement`. [`Placement::Proximity`] tries, in
/// order (C§3.2, §4.2–4.3; docs/design-notes.md, "Topology and
/// proximity-aware placement"):
///
/// 1. a backup one hop from the master (sharing a switch with it, [`Location`])
///    that keeps every failure-domain rule: in a BCube(n, 1) whose failure
///    domains are the level-0 groups, the master's level-1 neighbours — every
///    replica one hop away and in a domain of its own, as C§3 asks;
/// 2. if no replica of the segment is one hop away yet, a backup one hop away
///    in the master's own domain: in a tree of racks (the rack is the domain
///    and its ToR the only switch) no one-hop backup is outside the master's
///    domain, so one replica stays in the rack — recovery reads one replica
///    per segment (R§7.4, C§4.3's dominant copy), and this one can be read
///    within one hop — while the others still leave it;
/// 3. otherwise any eligible backup, as [`Placement::Scattered`] would: a
///    replica is never refused a place scattered placement would give it.
///
/// The price of step 2: a segment survives R − 1 failure-domain losses, not R
/// (the master's rack holds the master and one replica).
pub fn choose_backup_with<R: Rng>(
    placement: Placement,
    candidates: &[Candidate<'_>],
    master: (u64, &str),
    taken: &[u64],
    excluded: &[u64],
    segment_bytes: u64,
    rng: &mut R,
) -> Option<u64> {
    let q = Request {
        candidates,
        master,
        taken,
        excluded,
        segment_bytes,
    };
    let anyone = |_: &Candidate<'_>| true;
    let scattered = Rule {
        allow_master_domain: false,
        wanted: &anyone,
    };
    if placement == Placement::Scattered {
        return choose_under(&q, &scattered, rng);
    }
    let home = Location::parse(master.1);
    let near = |c: &Candidate<'_>| home.shares_switch(&Location::parse(c.failure_domain));
    let one_hop = Rule {
        allow_master_domain: false,
        wanted: &near,
    };
    if let Some(id) = choose_under(&q, &one_hop, rng) {
        return Some(id);
    }
    let has_near = taken
        .iter()
        .filter_map(|t| candidates.iter().find(|c| c.server_id == *t))
        .any(&near);
    let in_home_domain = Rule {
        allow_master_domain: true,
        wanted: &near,
    };
    if !has_near {
        if let Some(id) = choose_under(&q, &in_home_domain, rng) {
            return Some(id);
        }
    }
    choose_under(&q, &scattered, rng)
}

#[cfg(test)]
mod proximity_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use std::collections::BTreeSet;

    const SEGMENT: u64 = 8 << 20;

    fn c(server_id: u64, failure_domain: &str) -> Candidate<'_> {
        Candidate {
            server_id,
            failure_domain,
            backup_read_mbps: 100,
            replica_bytes: 0,
        }
    }

    /// Every server `choose_backup` returns over many draws.
    fn chosen(
        candidates: &[Candidate<'_>],
        master_id: u64,
        master_domain: &str,
        taken: &[u64],
        excluded: &[u64],
    ) -> BTreeSet<Option<u64>> {
        let mut rng = StdRng::seed_from_u64(7);
        (0..500)
            .map(|_| {
                choose_backup(
                    candidates,
                    master_id,
                    master_domain,
                    taken,
                    excluded,
                    SEGMENT,
                    &mut rng,
                )
            })
            .collect()
    }

    fn ids(ids: &[u64]) -> BTreeSet<Option<u64>> {
        ids.iter().map(|&i| Some(i)).collect()
    }

    #[test]
    fn never_the_master() {
        let cands = [c(1, ""), c(2, ""), c(3, "")];
        assert_eq!(chosen(&cands, 1, "", &[], &[]), ids(&[2, 3]));
        assert_eq!(chosen(&cands[..1], 1, "", &[], &[]), [None].into());
    }

    #[test]
    fn never_a_taken_or_excluded_server() {
        let cands = [c(1, ""), c(2, ""), c(3, ""), c(4, "")];
        assert_eq!(chosen(&cands, 9, "", &[1], &[3]), ids(&[2, 4]));
        assert_eq!(chosen(&cands, 9, "", &[1, 2], &[3, 4]), [None].into());
    }

    #[test]
    fn never_in_the_masters_domain() {
        let cands = [c(1, "rack-a"), c(2, "rack-a"), c(3, "rack-b"), c(4, "")];
        assert_eq!(chosen(&cands, 9, "rack-a", &[], &[]), ids(&[3, 4]));
        // The master itself among the candidates, in its domain.
        assert_eq!(chosen(&cands, 1, "rack-a", &[], &[]), ids(&[3, 4]));
        let same = [c(1, "rack-a"), c(2, "rack-a")];
        assert_eq!(chosen(&same, 9, "rack-a", &[], &[]), [None].into());
    }

    #[test]
    fn never_in_the_domain_of_another_replica() {
        let cands = [
            c(1, "rack-a"),
            c(2, "rack-a"),
            c(3, "rack-b"),
            c(4, "rack-c"),
        ];
        assert_eq!(chosen(&cands, 9, "", &[1], &[]), ids(&[3, 4]));
        assert_eq!(chosen(&cands, 9, "", &[1, 3], &[]), ids(&[4]));
        assert_eq!(chosen(&cands, 9, "", &[1, 3, 4], &[]), [None].into());
    }

    #[test]
    fn an_empty_domain_is_the_servers_own() {
        // Empty domains conflict with nobody: not with each other, nor with an
        // empty master domain, nor with a named one.
        let cands = [c(1, ""), c(2, ""), c(3, ""), c(4, "rack-a")];
        assert_eq!(chosen(&cands, 9, "", &[1], &[]), ids(&[2, 3, 4]));
        assert_eq!(chosen(&cands, 9, "rack-a", &[1, 2], &[]), ids(&[3]));
        // A master with no domain excludes only itself.
        assert_eq!(chosen(&cands, 4, "", &[], &[]), ids(&[1, 2, 3]));
    }

    #[test]
    fn a_taken_server_not_among_the_candidates_excludes_only_itself() {
        let cands = [c(1, "rack-a"), c(2, "rack-b")];
        assert_eq!(chosen(&cands, 9, "", &[5], &[]), ids(&[1, 2]));
    }

    #[test]
    fn no_candidates_no_backup() {
        assert_eq!(chosen(&[], 1, "", &[], &[]), [None].into());
    }

    #[test]
    fn refinement_keeps_the_backup_that_finishes_soonest() {
        // All five candidates are drawn; times to read (MB / MB/s, SEGMENT = 8 MiB):
        // 1: (0 + 8) / 10   = 0.84 s   (slow disk, empty)
        // 2: (64 + 8) / 100 = 0.75 s   (fast disk, much of this master's log)
        // 3: (16 + 8) / 50  = 0.50 s   <- soonest
        // 4: (8 + 8) / 30   = 0.56 s
        // 5: (0 + 8) / 0    = taken as 1 MB/s: 8.4 s
        let mib = 1 << 20;
        let cands = [
            Candidate {
                server_id: 1,
                failure_domain: "",
                backup_read_mbps: 10,
                replica_bytes: 0,
            },
            Candidate {
                server_id: 2,
                failure_domain: "",
                backup_read_mbps: 100,
                replica_bytes: 64 * mib,
            },
            Candidate {
                server_id: 3,
                failure_domain: "",
                backup_read_mbps: 50,
                replica_bytes: 16 * mib,
            },
            Candidate {
                server_id: 4,
                failure_domain: "",
                backup_read_mbps: 30,
                replica_bytes: 8 * mib,
            },
            Candidate {
                server_id: 5,
                failure_domain: "",
                backup_read_mbps: 0,
                replica_bytes: 0,
            },
        ];
        assert_eq!(cands.len(), PLACEMENT_CANDIDATES);
        assert_eq!(chosen(&cands, 9, "", &[], &[]), ids(&[3]));
        // Without 3, server 4 is the soonest; refinement only among eligible ones.
        assert_eq!(chosen(&cands, 9, "", &[], &[3]), ids(&[4]));
        // The master's share on a backup grows: the choice moves on.
        let mut grown = cands;
        grown[2].replica_bytes = 64 * mib;
        assert_eq!(chosen(&grown, 9, "", &[], &[]), ids(&[4]));
    }

    #[test]
    fn with_many_candidates_every_one_is_chosen_sometimes() {
        // Equal candidates: the choice is random, so the replicas of a master spread
        // over the whole cluster.
        let cands: Vec<_> = (1..=20).map(|i| c(i, "")).collect();
        assert_eq!(
            chosen(&cands, 99, "", &[], &[]),
            ids(&(1..=20).collect::<Vec<_>>())
        );
    }

    /// A domain from a small set, "" (own domain) included.
    const DOMAINS: [&str; 5] = ["", "a", "b", "c", ""];

    /// Brute force: is `id` eligible, checked straight from the rules.
    fn brute_eligible(
        cands: &[Candidate<'_>],
        id: u64,
        master: (u64, &str),
        taken: &[u64],
        excluded: &[u64],
    ) -> bool {
        let Some(me) = cands.iter().find(|x| x.server_id == id) else {
            return false;
        };
        let domain_of = |s: u64| {
            cands
                .iter()
                .find(|x| x.server_id == s)
                .map_or("", |x| x.failure_domain)
        };
        let conflicts = |other: u64, other_domain: &str| {
            other == id || (!me.failure_domain.is_empty() && me.failure_domain == other_domain)
        };
        !excluded.contains(&id)
            && !taken.contains(&id)
            && !conflicts(master.0, master.1)
            && taken.iter().all(|&t| !conflicts(t, domain_of(t)))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn placement_respects_every_rule(
            servers in prop::collection::vec(
                (0..DOMAINS.len(), 0u32..2000, 0u64..(1 << 30)),
                1..60,
            ),
            master_pick in any::<prop::sample::Index>(),
            master_in_list in any::<bool>(),
            master_domain in 0..DOMAINS.len(),
            taken_bits in any::<u64>(),
            excluded_bits in any::<u64>(),
            replicas in 1usize..=4,
            seed in any::<u64>(),
        ) {
            let cands: Vec<Candidate<'_>> = servers
                .iter()
                .enumerate()
                .map(|(i, &(d, mbps, bytes))| Candidate {
                    server_id: i as u64 + 1,
                    failure_domain: DOMAINS[d],
                    backup_read_mbps: mbps,
                    replica_bytes: bytes,
                })
                .collect();
            // The master is one of the candidates (it runs a backup too) or not.
            let (master_id, master_domain) = if master_in_list {
                let m = &cands[master_pick.index(cands.len())];
                (m.server_id, m.failure_domain)
            } else {
                (cands.len() as u64 + 1, DOMAINS[master_domain])
            };
            // Random sets (possibly overlapping, possibly breaking the domain
            // rules among themselves: earlier placements may predate a change).
            let mut taken: Vec<u64> = (1..=cands.len() as u64)
                .filter(|id| taken_bits & (1 << (id % 64)) != 0 && id % 3 == 0)
                .collect();
            let excluded: Vec<u64> = (1..=cands.len() as u64)
                .filter(|id| excluded_bits & (1 << (id % 64)) != 0 && id % 2 == 0)
                .collect();
            let first_new = taken.len();
            let mut rng = StdRng::seed_from_u64(seed);
            for _ in 0..replicas {
                let any_eligible = cands.iter().any(|x| {
                    brute_eligible(&cands, x.server_id, (master_id, master_domain), &taken, &excluded)
                });
                let pick = choose_backup(
                    &cands, master_id, master_domain, &taken, &excluded, SEGMENT, &mut rng,
                );
                let Some(id) = pick else {
                    prop_assert!(!any_eligible, "None although a candidate is eligible");
                    break;
                };
                prop_assert!(any_eligible);
                prop_assert!(id != master_id, "picked the master");
                prop_assert!(!taken.contains(&id), "picked a taken server");
                prop_assert!(!excluded.contains(&id), "picked an excluded server");
                let me = cands.iter().find(|x| x.server_id == id).expect("a candidate");
                if !me.failure_domain.is_empty() {
                    prop_assert!(me.failure_domain != master_domain, "in the master's domain");
                    for &t in &taken {
                        let td = cands.iter().find(|x| x.server_id == t).map_or("", |x| x.failure_domain);
                        prop_assert!(me.failure_domain != td, "in the domain of replica on {}", t);
                    }
                }
                prop_assert!(brute_eligible(&cands, id, (master_id, master_domain), &taken, &excluded));
                taken.push(id);
            }
            // The replicas placed here: pairwise distinct servers and non-empty
            // domains, none with the master's.
            let placed = &taken[first_new..];
            for (i, &a) in placed.iter().enumerate() {
                let da = cands.iter().find(|x| x.server_id == a).map_or("", |x| x.failure_domain);
                prop_assert!(a != master_id);
                prop_assert!(da.is_empty() || da != master_domain);
                for &b in &placed[i + 1..] {
                    let db = cands.iter().find(|x| x.server_id == b).map_or("", |x| x.failure_domain);
                    prop_assert!(a != b);
                    prop_assert!(da.is_empty() || da != db);
                }
            }
        }
    }
}
