//! Proximity-aware placement (issue 22, C§3.2, §4.3): replicas one hop from
//! the master where the failure domains allow, scattered otherwise.

use super::*;
use rand::rngs::StdRng;
use rand::SeedableRng;

fn c(server_id: u64, failure_domain: &str) -> Candidate<'_> {
    Candidate {
        server_id,
        failure_domain,
        backup_read_mbps: 100,
        replica_bytes: 0,
    }
}

/// Places `r` replicas of one segment, as the replica manager does: one
/// at a time, each seeing the ones before it as taken.
fn place(cands: &[Candidate<'_>], master: (u64, &str), r: usize, seed: u64) -> Vec<u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut taken = Vec::new();
    for _ in 0..r {
        let id = choose_backup_with(
            Placement::Proximity,
            cands,
            master,
            &taken,
            &[],
            1 << 20,
            &mut rng,
        )
        .expect("a backup is eligible");
        taken.push(id);
    }
    taken
}

fn domain_of<'a>(cands: &[Candidate<'a>], id: u64) -> &'a str {
    Location::parse(
        cands
            .iter()
            .find(|x| x.server_id == id)
            .expect("known")
            .failure_domain,
    )
    .domain
}

/// A BCube(4, 1): server (a1, a0) is id 4·a1 + a0, on switches l0-a1 and
/// l1-a0, in failure domain g{a1} (its level-0 group, C§4.3's rack).
fn bcube() -> Vec<(u64, String)> {
    (0..16u64)
        .map(|i| (i, format!("g{}@l0-{},l1-{}", i / 4, i / 4, i % 4)))
        .collect()
}

#[test]
fn choose_backup_with_proximity_bcube_puts_every_replica_one_hop_in_its_own_domain() {
    let fields = bcube();
    let cands: Vec<Candidate<'_>> = fields.iter().map(|(i, f)| c(*i, f)).collect();
    let master = (5u64, fields[5].1.as_str());
    let home = Location::parse(master.1);
    for seed in 0..50 {
        let placed = place(&cands, master, 3, seed);
        let mut domains: Vec<&str> = placed.iter().map(|&id| domain_of(&cands, id)).collect();
        for &id in &placed {
            let field = fields[id as usize].1.as_str();
            assert!(
                home.shares_switch(&Location::parse(field)),
                "{id} not one hop"
            );
        }
        domains.push("g1");
        domains.sort_unstable();
        domains.dedup();
        assert_eq!(domains.len(), 4, "domains repeat: {placed:?}");
    }
}

#[test]
fn choose_backup_with_proximity_tree_keeps_one_replica_in_the_rack() {
    // Four racks of four: rack r is domain r and ToR t{r}.
    let fields: Vec<(u64, String)> = (0..16u64)
        .map(|i| (i, format!("r{}@t{}", i / 4, i / 4)))
        .collect();
    let cands: Vec<Candidate<'_>> = fields.iter().map(|(i, f)| c(*i, f)).collect();
    let master = (1u64, fields[1].1.as_str());
    for seed in 0..50 {
        let placed = place(&cands, master, 3, seed);
        let in_rack = placed.iter().filter(|&&id| id / 4 == 0).count();
        assert_eq!(in_rack, 1, "{placed:?}");
        assert_eq!(placed[0] / 4, 0, "the first replica is the near one");
        assert_ne!(domain_of(&cands, placed[1]), domain_of(&cands, placed[2]));
    }
}

#[test]
fn choose_backup_with_proximity_without_switches_is_scattered() {
    let fields: Vec<(u64, String)> = (0..8u64).map(|i| (i, format!("d{i}"))).collect();
    let cands: Vec<Candidate<'_>> = fields.iter().map(|(i, f)| c(*i, f)).collect();
    let placed = place(&cands, (0, "d0"), 3, 7);
    assert_eq!(placed.len(), 3);
    assert!(!placed.contains(&0));
}

#[test]
fn choose_backup_with_scattered_ignores_switches_but_not_domains() {
    let fields: Vec<(u64, String)> = (0..16u64)
        .map(|i| (i, format!("r{}@t{}", i / 4, i / 4)))
        .collect();
    let cands: Vec<Candidate<'_>> = fields.iter().map(|(i, f)| c(*i, f)).collect();
    let mut rng = StdRng::seed_from_u64(3);
    for _ in 0..100 {
        let id = choose_backup_with(
            Placement::Scattered,
            &cands,
            (1, &fields[1].1),
            &[],
            &[],
            1 << 20,
            &mut rng,
        )
        .expect("eligible");
        assert_ne!(
            id / 4,
            0,
            "scattered placement never uses the master's rack"
        );
    }
}
