//! Issue 22's topology experiments as CI runs them: small clusters, fixed
//! seeds, each point in a process of its own (the binary's `getrandom`
//! override is process-wide).

use std::process::Command;

use ramstore_sim::scaling::Point;
use ramstore_sim::spread::SpreadPoint;
use ramstore_sim::topology_experiments::{SPREAD_MUST, TRAFFIC_MUST};

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ramstore-sim"))
        .args(args)
        .output()
        .expect("the simulator binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}: {stdout}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// One placement point: 30 servers, host 0's replicas 20 per backup on average.
fn spread(topology: &str, placement: &str, seed: u64) -> SpreadPoint {
    let seed = seed.to_string();
    let out = run(&[
        "spread-point",
        "--servers",
        "30",
        "--seed",
        &seed,
        "--topology",
        topology,
        "--placement",
        placement,
    ]);
    out.lines()
        .find_map(SpreadPoint::from_line)
        .unwrap_or_else(|| panic!("no spread line: {out}"))
}

/// One recovery point: 40 servers, 64 KiB per recovery master.
fn recovery(topology: &str, placement: &str, masters: &str, seed: u64) -> Point {
    let seed = seed.to_string();
    let out = run(&[
        "recovery-point",
        "--servers",
        "40",
        "--seed",
        &seed,
        "--data-per-server-bytes",
        "65536",
        "--topology",
        topology,
        "--placement",
        placement,
        "--recovery-masters",
        masters,
    ]);
    out.lines()
        .find_map(Point::from_line)
        .unwrap_or_else(|| panic!("no point line: {out}"))
}

#[test]
fn spread_point_scattered_keeps_the_busiest_backup_within_the_tolerance() {
    let p = spread("tree", "scattered", 1);
    assert_eq!((p.violations, p.domain_breaks), (0, 0), "{p:?}");
    assert!(p.replicas.mean >= 15.0, "{p:?}");
    assert!(p.replicas.max_over_mean <= SPREAD_MUST, "{p:?}");
    assert_eq!(p.one_hop, 0.0, "scattered never uses the master's rack");
}

#[test]
fn spread_point_proximity_puts_replicas_one_hop_away() {
    // Tree: one replica of three in the master's rack (its ToR).
    let tree = spread("tree", "proximity", 1);
    assert_eq!((tree.violations, tree.domain_breaks), (0, 0), "{tree:?}");
    // Printed to 4 decimals.
    assert!((tree.one_hop - 1.0 / 3.0).abs() < 1e-3, "{tree:?}");
    // BCube(6, 1): every replica on a level-1 neighbour, each in its own
    // level-0 group (C§3.2, §4.3).
    let bcube = spread("bcube", "proximity", 1);
    assert_eq!((bcube.violations, bcube.domain_breaks), (0, 0), "{bcube:?}");
    assert_eq!(bcube.one_hop, 1.0, "{bcube:?}");
}

#[test]
fn spread_point_same_seed_gives_the_same_spread() {
    let (a, b) = (
        spread("bcube", "scattered", 3),
        spread("bcube", "scattered", 3),
    );
    let strip = |p: &SpreadPoint| SpreadPoint {
        wall_s: 0.0,
        max_rss_bytes: 0,
        ..p.clone()
    };
    assert_eq!(strip(&a), strip(&b));
}

#[test]
fn recovery_point_near_recovery_cuts_multi_hop_traffic_at_least_5x() {
    let scattered = recovery("tree", "scattered", "anywhere", 1);
    let near = recovery("tree", "proximity", "near", 1);
    for p in [&scattered, &near] {
        assert_eq!(p.violations, 0, "{p:?}");
        assert!(p.hops_buckets.iter().sum::<u64>() > 0, "{p:?}");
    }
    // Both recoveries move about the same shuffle; the near one keeps it
    // under one switch.
    assert!(
        near.hops_buckets[2] as f64 * TRAFFIC_MUST <= scattered.hops_buckets[2] as f64,
        "scattered {:?}, near {:?}",
        scattered.hops_buckets,
        near.hops_buckets
    );
}

#[test]
fn recovery_point_with_a_topology_same_seed_gives_the_same_traffic() {
    let a = recovery("bcube", "proximity", "near", 2);
    let b = recovery("bcube", "proximity", "near", 2);
    assert_eq!(a.violations, 0, "{a:?}");
    assert_eq!(
        (a.recovery_s, a.hops_buckets, a.hops_replication, a.phases_s),
        (b.recovery_s, b.hops_buckets, b.hops_replication, b.phases_s)
    );
}

/// The fault schedule (crashes, partitions, loss, full and slow disks,
/// coordinator failover) with proximity placement and near recovery: the
/// checker finds no violation, and the seed gives its trace again.
#[test]
fn run_with_proximity_and_near_recovery_under_faults_has_no_violations() {
    let args = [
        "--servers",
        "12",
        "--seed",
        "3",
        "--sim-seconds",
        "20",
        "--topology",
        "tree",
        "--racks",
        "4",
        "--placement",
        "proximity",
        "--recovery-masters",
        "near",
    ];
    let last = |out: String| out.lines().last().unwrap_or_default().to_string();
    let a = last(run(&args));
    assert!(a.contains(" violations=0 "), "{a}");
    assert_eq!(a, last(run(&args)));
}
