//! The recovery-scaling experiment as CI runs it (issue 22): small clusters,
//! one fixed seed, each point in a process of its own.

use std::process::Command;

use ramstore_sim::scaling::Point;

/// One point of the experiment at its defaults (256 KiB per recovery master
/// standing for 512 MiB, cost model on, R = 3).
fn point(servers: usize, seed: u64) -> Point {
    let out = Command::new(env!("CARGO_BIN_EXE_ramstore-sim"))
        .args([
            "recovery-point",
            "--servers",
            &servers.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .output()
        .expect("the simulator binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(Point::from_line)
        .unwrap_or_else(|| {
            panic!(
                "no point line (exit {:?}): {stdout}{}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// How much slower a 50-server recovery may be than a 10-server one with the
/// same data per recovery master: 25%. R Fig. 16 grew 12% from 6 to 80 nodes;
/// issue 22's Must is ±20% from 50 to 1,000 servers, too large for CI. Seed 1
/// reads 4.83 s at 10 servers and 5.28 s at 50 (1.09×) since session 39:
/// staggered round-by-round fetch orders, refined first holders, 64 fetches in
/// flight, each replica read once per backup, concurrent hand-outs and
/// server-list pushes (before:
/// 4.57 s and 6.56 s, 1.44×, with the tolerance at 50%). The 10-server point
/// spends a larger share in its fixed costs, so 25% leaves room for the seed.
const TOLERANCE: f64 = 1.25;

/// The phases of a point sum to its recovery time: five phases printed to
/// 0.1 ms each.
const PHASE_SUM_SLACK_S: f64 = 0.001;

/// The busiest backup's disk reads may take this much longer than the mean's:
/// each backup holds a few replicas of the crashed log, so its share as first
/// holder cannot be exactly even (1.38× at 10 servers, 1.43× at 50, seed 1).
const BUSIEST_DISK_TOLERANCE: f64 = 1.6;

/// The mean backup's disk work may differ by this much: each backup holds the
/// same share of the crashed log whatever the cluster size.
const MEAN_DISK_TOLERANCE: f64 = 0.1;

#[test]
fn recovery_point_50_servers_is_not_slower_than_10_beyond_the_tolerance() {
    let small = point(10, 1);
    let large = point(50, 1);
    assert_eq!(
        (small.violations, large.violations),
        (0, 0),
        "{small:?} {large:?}"
    );
    assert_eq!(
        small.objects * 49,
        large.objects * 9,
        "same data per server"
    );
    // The recovery did work the cost model charged: replay happened.
    assert!(large.charged_s[6] > 0.0, "{large:?}");
    assert!(small.recovery_s > 0.0, "{small:?}");
    let mean_ratio = large.disk_read_mean_s / small.disk_read_mean_s;
    assert!(
        (mean_ratio - 1.0).abs() <= MEAN_DISK_TOLERANCE,
        "mean backup disk read: {:.3} s at 50, {:.3} s at 10",
        large.disk_read_mean_s,
        small.disk_read_mean_s
    );
    // Recovery waits for the busiest disk, and the busiest backup serves at
    // most BUSIEST_DISK_TOLERANCE × the mean share (balanced first holders,
    // `fetch_order`; a random first holder gave 2.0–2.3×).
    for p in [&small, &large] {
        assert!(p.recovery_s >= p.disk_read_max_s, "{p:?}");
        let phases: f64 = p.phases_s.iter().sum();
        assert!(
            (phases - p.recovery_s).abs() <= PHASE_SUM_SLACK_S,
            "phases {:?} sum to {phases:.4} s, recovery {:.4} s",
            p.phases_s,
            p.recovery_s
        );
        assert!(
            p.disk_read_max_s <= p.disk_read_mean_s * BUSIEST_DISK_TOLERANCE,
            "{p:?}"
        );
    }
    assert!(
        large.recovery_s <= small.recovery_s * TOLERANCE,
        "50 servers recovered in {:.3} s, 10 in {:.3} s",
        large.recovery_s,
        small.recovery_s
    );
}

#[test]
fn recovery_point_same_seed_gives_the_same_times() {
    let a = point(10, 7);
    let b = point(10, 7);
    assert_eq!(a.violations, 0, "{a:?}");
    // Wall time and resident memory come from the OS; everything simulated
    // is a function of the arguments.
    assert_eq!(
        (
            a.detection_s,
            a.recovery_s,
            a.objects,
            a.charged_s,
            a.phases_s
        ),
        (
            b.detection_s,
            b.recovery_s,
            b.objects,
            b.charged_s,
            b.phases_s
        )
    );
}

#[test]
fn point_line_round_trips() {
    let p = Point {
        servers: 20,
        data_per_server_bytes: 4096,
        detection_s: 0.25,
        recovery_s: 1.5,
        objects: 76,
        violations: 0,
        wall_s: 2.0,
        max_rss_bytes: 1 << 30,
        charged_s: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],
        disk_read_max_s: 0.9,
        disk_read_mean_s: 0.8,
        phases_s: [0.01, 1.0, 0.2, 0.25, 0.04],
        hops_buckets: [1, 2, 3],
        hops_replication: [4, 5, 6],
    };
    let back = Point::from_line(&p.to_line()).expect("parsed");
    assert_eq!(back.to_line(), p.to_line());
    assert!(Point::from_line("seed=1 servers=2").is_none());
}
