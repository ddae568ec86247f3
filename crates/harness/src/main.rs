//! `ramstore-harness soak --minutes M --seed S`: a cluster of real processes under a
//! mixed load from client workers, with a random fault every few seconds (master
//! kill, backup kill, zombie master, coordinator kill, delay; as root, with the
//! servers in network namespaces, also partitions of a master or a group, a master
//! cut off from the cluster but not from clients, and packet loss); at the end
//! prints the operations done, faults injected, recoveries and the checker's
//! verdict, and exits 1 on any violation (2 when the run itself failed, e.g. the
//! cluster did not heal). `scripts/soak` builds and runs it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ramstore_checker::CheckOptions;
use ramstore_harness::{run, ClusterConfig, Fault, FaultPlan, RunConfig, WorkloadConfig};

#[derive(Parser)]
#[command(name = "ramstore-harness", about = "ramstore reliability harness")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mixed load with a random fault every few seconds, then check the history.
    Soak {
        /// How long the load runs, in minutes (fractions allowed).
        #[arg(long, default_value_t = 5.0)]
        minutes: f64,
        /// Seed of the fault schedule and of the workers' choices.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Storage servers.
        #[arg(long, default_value_t = 5)]
        servers: usize,
        /// Client workers.
        #[arg(long, default_value_t = 4)]
        clients: usize,
        /// Most operations per second, all clients together (0: as fast as the
        /// cluster answers).
        #[arg(long, default_value_t = 0)]
        rate: u32,
        /// Shortest and longest pause between faults, in milliseconds.
        #[arg(long, default_value_t = 3_000)]
        min_pause_ms: u64,
        #[arg(long, default_value_t = 8_000)]
        max_pause_ms: u64,
        /// The history is checked (and dropped) in windows of this many seconds,
        /// each with its own table, so memory stays bounded on long runs.
        #[arg(long, default_value_t = 30)]
        window_seconds: u64,
        /// Keep every server on 127.0.0.1 (no network namespaces, so no
        /// partition or packet-loss faults) even when running as root.
        #[arg(long)]
        no_netns: bool,
        /// Run the coordinators on a file store (no etcd, no standby: a killed
        /// coordinator restarts in place) instead of etcd.
        #[arg(long)]
        no_etcd: bool,
        /// The `ramstore` binary [default: beside this program].
        #[arg(long)]
        ramstore: Option<PathBuf>,
        /// Keep logs, disks and the history here [default: a temporary directory,
        /// kept when the run fails].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match real_main() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> anyhow::Result<bool> {
    let Command::Soak {
        minutes,
        seed,
        servers,
        clients,
        rate,
        min_pause_ms,
        max_pause_ms,
        window_seconds,
        no_netns,
        no_etcd,
        ramstore,
        dir,
    } = Cli::parse().command;
    let ramstore = match ramstore {
        Some(p) => p,
        None => std::env::current_exe()
            .context("locating this program")?
            .with_file_name("ramstore"),
    };
    anyhow::ensure!(
        ramstore.exists(),
        "{} not found: build it first (cargo build -p ramstore-cli) or pass --ramstore",
        ramstore.display()
    );
    let keep_dir = dir.is_some();
    let dir = match dir {
        Some(d) => d,
        None => {
            std::env::temp_dir().join(format!("ramstore-soak-{}-seed{seed}", std::process::id()))
        }
    };
    // Before any thread starts: Ctrl-C stops the servers and removes namespaces and
    // mounts instead of leaving them behind.
    ramstore_harness::interrupt::install(dir.clone()).context("installing the Ctrl-C handler")?;
    let mut cluster = ClusterConfig::new(&ramstore, servers);
    cluster.etcd = !no_etcd;
    // Network faults need root, ip and nft: use them whenever they are there.
    let netns = !no_netns && ramstore_harness::netns::available().is_ok();
    cluster.netns = netns;
    // Full-disk faults need root too (tmpfs mounts); they go with the netns faults.
    cluster.small_disks = netns;
    cluster.delay_proxy = true;
    let mut kinds = vec![
        Fault::KillMaster,
        Fault::KillBackup,
        Fault::ZombieMaster { stopped_ms: 2_000 },
        Fault::KillCoordinator,
        Fault::Delay {
            delay_ms: 20,
            jitter_ms: 80,
            ms: 3_000,
        },
    ];
    if netns {
        kinds.extend([
            Fault::PartitionMaster { ms: 2_000 },
            Fault::PartitionGroup { ms: 2_000 },
            Fault::IsolateMaster { ms: 2_000 },
            Fault::PacketLoss {
                percent: 20,
                ms: 3_000,
            },
            Fault::FillDisk { ms: 3_000 },
        ]);
    }
    cluster.dir = Some(dir.clone());
    // A master stopped for 2 s is declared crashed after 1 s of unanswered pings,
    // so the zombie fault makes a zombie (as in the chaos test).
    cluster.coordinator_args = vec!["--unresponsive-timeout-ms".into(), "1000".into()];
    let config = RunConfig {
        cluster,
        workload: WorkloadConfig {
            workers: clients,
            seed,
            max_ops_per_sec: (rate > 0).then_some(rate),
            // One worker follows the tablet map at once, one only reads: a zombie
            // still reachable by clients shows what it serves (R§7.11).
            zombie_probe: Some(Duration::from_millis(300)),
            ..WorkloadConfig::default()
        },
        faults: FaultPlan::Random {
            kinds: kinds.clone(),
            pause_ms: (min_pause_ms, max_pause_ms),
        },
        duration: Duration::from_secs_f64(minutes * 60.0),
        window: Some(Duration::from_secs(window_seconds.max(1))),
        seed,
        patience: Duration::from_secs(120),
        table_span: u32::try_from(servers.saturating_sub(2).max(1)).unwrap_or(1),
        client_deadline: Duration::from_secs(60),
        check: CheckOptions::default(),
    };
    println!(
        "faults: {}{}",
        kinds
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", "),
        if netns {
            " (servers in network namespaces)"
        } else {
            " (no network namespaces: not root, no ip/nft, or --no-netns)"
        }
    );
    println!(
        "soak: {minutes} min, seed {seed}, {servers} servers, {clients} clients, a fault every {:.1}-{:.1} s; reproduce with scripts/soak --minutes {minutes} --seed {seed}",
        min_pause_ms as f64 / 1000.0,
        max_pause_ms as f64 / 1000.0
    );
    let result = run(&config, |line| println!("{line}"));
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            println!(
                "run failed; logs, disks and history kept in {}",
                dir.display()
            );
            return Err(e.into());
        }
    };
    let mut by_kind = std::collections::BTreeMap::new();
    for f in &report.faults {
        *by_kind.entry(f.fault.name()).or_insert(0) += 1;
    }
    println!("elapsed: {:.1} s", report.elapsed.as_secs_f64());
    println!(
        "ops done: {} (checked in {} windows)",
        report.report.ops, report.windows
    );
    println!(
        "faults injected: {} ({})",
        report.faults.len(),
        by_kind
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("recoveries: {}", report.recoveries);
    print!("{}", report.report);
    let clean = report.report.is_clean();
    if clean && !keep_dir {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        if !clean {
            println!("{}", report.logs);
            for h in &report.failed_histories {
                println!(
                    "history with violations: {} (ramstore-checker FILE re-checks it)",
                    h.display()
                );
            }
        }
        println!("logs, disks and history kept in {}", dir.display());
    }
    Ok(clean)
}
