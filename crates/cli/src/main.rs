//! `ramstore`: run a development cluster, a coordinator or a storage server, and talk
//! to a cluster from the shell.

mod allocator;
mod arg_groups;
mod args;
mod bench;
mod cluster;
mod config;
mod data;
mod expiry;
mod migrate;
mod migrate_cancel;
mod output;
mod reach;
mod rebalance;
mod size;
mod tx;
mod value;

use clap::{CommandFactory, Parser};
use ramstore_server::ServerOptions;

use args::{Cli, Command, DEFAULT_COORDINATOR};

fn main() {
    allocator::tune();
    let args = match config::expand::<Cli>(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(reach::EXIT_USAGE);
        }
    };
    let cli = Cli::parse_from(args);
    if let Err(e) = run(cli) {
        let code = reach::exit_code(&e);
        // A closed standard output (`ramstore scan t | head`) ends the command
        // quietly, as it does coreutils.
        if code != reach::EXIT_CLOSED_PIPE {
            eprintln!("error: {}", output::error_message(&e));
        }
        std::process::exit(code);
    }
}

/// The async runtime of `server` and `coordinator`: two worker threads by
/// default; RAMSTORE_WORKER_THREADS overrides (benchmarks compare thread counts
/// on small machines).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    multi_thread_runtime(worker_threads_override().unwrap_or(2))
}

/// The runtime of `ramstore dev`: one event loop (a current-thread runtime) for
/// the coordinator, every server and the Redis port. A durable write then runs
/// command, replication to the in-process backups and reply on one thread that
/// polls between its steps instead of handing off between threads, each hand-off
/// costing an idle CPU's wake-up on small machines (docs/benchmarks.md, issue 17,
/// durable-write latency). One poller keeps that loop polling while any of its
/// ports is busy (`cluster::dev`, `--poll-us`). Heavy work (recovery replay,
/// backup I/O) runs on the blocking pool as everywhere. RAMSTORE_WORKER_THREADS=N
/// gives N workers instead.
fn dev_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    match worker_threads_override() {
        Some(workers) => multi_thread_runtime(workers),
        None => Ok(tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?),
    }
}

fn worker_threads_override() -> Option<usize> {
    std::env::var("RAMSTORE_WORKER_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| (1..=256).contains(&n))
}

fn multi_thread_runtime(workers: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let top = cli.coordinator.as_deref();
    match cli.command {
        Command::Dev {
            dir,
            servers,
            memory,
            port,
            backup_frames,
            backup_sync,
            replicas,
            detector,
            resp_port,
            requirepass,
            poll_us,
            no_space_wait_ms,
            timeouts,
        } => dev_runtime()?.block_on(cluster::dev(cluster::DevOptions {
            poll_us,
            no_space_wait_ms,
            request_timeout_ms: timeouts.request_timeout_ms,
            idle_timeout_ms: timeouts.idle_timeout_ms,
            resp_port,
            require_pass: requirepass,
            replicas: replicas.into(),
            dir,
            servers: servers.into(),
            memory_bytes: memory,
            port,
            backup_frames,
            backup_sync: backup_sync.into(),
            monitor: detector.into(),
            detector: detector.into(),
        })),
        Command::Coordinator {
            config: _,
            listen,
            store,
            standby,
            lease_ttl_ms,
            client_lease_term_ms,
            detector,
            recovery,
        } => runtime()?.block_on(cluster::coordinator(cluster::CoordinatorArgs {
            listen,
            store,
            standby,
            lease_ttl_ms,
            client_lease_term_ms,
            detector: detector.into(),
            recovery: recovery.into(),
            recovery_near: recovery.recovery_masters == arg_groups::RecoveryMasters::Near,
        })),
        Command::Server {
            config: _,
            coordinator,
            listen,
            advertise,
            memory,
            metrics_listen,
            backup_dir,
            backup_sync,
            backup_frames,
            backup_open_buffers,
            failure_domain,
            rack,
            switches,
            placement,
            replicas,
            monitor,
            prefault_memory,
            resp_listen,
            requirepass,
            resp_table_span,
            resp_poll_us,
            max_connections,
            no_space_wait_ms,
            replica_check_interval_ms,
            client_lease_check_ms,
            tx_recovery_timeout_ms,
            timeouts,
        } => runtime()?.block_on(cluster::server(ServerOptions {
            replica_check_interval_ms,
            client_lease_check_ms,
            expire_interval_ms: ramstore_server::key_expiry::DEFAULT_EXPIRE_INTERVAL_MS,
            tx_recovery_timeout_ms,
            resp_poll_us,
            no_space_wait_ms,
            max_connections: max_connections as usize,
            request_timeout_ms: timeouts.request_timeout_ms,
            idle_timeout_ms: timeouts.idle_timeout_ms,
            resp_listen,
            resp_require_pass: requirepass,
            resp_table_span,
            replicas: replicas.into(),
            listen,
            advertise,
            coordinator: coordinator.or(cli.coordinator).ok_or_else(|| {
                reach::Exit::Usage(
                    "ramstore server needs the coordinator's address: --coordinator ADDR \
                     (or RAMSTORE_COORDINATOR, or `coordinator` in --config)"
                        .into(),
                )
            })?,
            memory_bytes: memory,
            metrics_listen,
            backup_dir,
            backup_sync: backup_sync.into(),
            backup_frames,
            backup_open_buffers,
            failure_domain: arg_groups::location_field(&failure_domain, rack.as_deref(), &switches)
                .map_err(reach::Exit::Usage)?,
            placement: placement.into(),
            monitor: monitor.into(),
            // R§7.11: a server declared crashed exits.
            on_zombie: Some(cluster::exit_as_zombie()),
            // Its own multi-thread runtime: the native port does not poll (the
            // Redis port's dedicated loop does, `--resp-poll-us`).
            loop_poller: None,
            prefault_memory,
            // The process is where real time and randomness enter.
            clock: ramstore_clock::system_clock(),
            rng: ramstore_clock::system_rng(),
        })),
        Command::CreateTable { name, span, at } => {
            data::create_table(&at.connect(top)?, &name, span, at.format())
        }
        Command::DropTable { name, at } => data::drop_table(&at.connect(top)?, &name, at.format()),
        Command::Tables { at } => data::tables(&at.connect(top)?, &at.addr(top), at.format()),
        Command::Put {
            table,
            key,
            value,
            value_file,
            if_version,
            create_only,
            ttl,
            at,
        } => {
            // Read the value first: a bad file or an oversized input fails before
            // the cluster is contacted.
            let value = value::read(value.as_deref(), value_file.as_deref())?;
            data::put(
                &at.connect(top)?,
                &table,
                &key,
                &value,
                data::PutOptions {
                    if_version,
                    create_only,
                    ttl_secs: ttl,
                },
                at.format(),
            )
        }
        Command::Get {
            table,
            key,
            version,
            at,
        } => data::get(&at.connect(top)?, &table, &key, version, at.format()),
        Command::Del { table, key, at } => data::del(&at.connect(top)?, &table, &key, at.format()),
        Command::Ttl { table, key, at } => {
            expiry::ttl(&at.connect(top)?, &table, &key, at.format())
        }
        Command::Persist { table, key, at } => {
            expiry::persist(&at.connect(top)?, &table, &key, at.format())
        }
        Command::Incr {
            table,
            key,
            delta,
            at,
        } => data::incr(&at.connect(top)?, &table, &key, delta, at.format()),
        Command::Tx { retry, at } => tx::run(&at.connect(top)?, retry, at.format()),
        Command::Scan { table, limit, at } => {
            data::scan(&at.connect(top)?, &table, limit, at.format())
        }
        Command::Status { all, at } => {
            data::status(&at.connect(top)?, &at.addr(top), all, at.format())
        }
        Command::CrashServer { id, at } => {
            data::crash_server(&at.connect(top)?, &at.addr(top), id, at.format())
        }
        Command::Split { table, at, at_ } => {
            migrate::split(&at_.connect(top)?, &table, at, at_.format())
        }
        Command::Migrate {
            cancel: Some(id),
            no_wait,
            at,
            ..
        } => migrate_cancel::cancel(&at.connect(top)?, id, !no_wait, at.format()),
        Command::Migrate {
            table,
            to,
            range,
            no_wait,
            no_priority_pulls,
            stop_and_copy,
            at,
            ..
        } => {
            // clap requires both unless --cancel is given (handled above).
            let (Some(table), Some(to)) = (table, to) else {
                anyhow::bail!("migrate needs TABLE and --to SERVER_ID (or --cancel ID)");
            };
            let mode = if stop_and_copy {
                ramstore_client::MigrationMode::StopAndCopy
            } else if no_priority_pulls {
                ramstore_client::MigrationMode::NoPriorityPulls
            } else {
                ramstore_client::MigrationMode::Rocksteady
            };
            let args = migrate::MigrateArgs {
                table: &table,
                to,
                range,
                wait: !no_wait,
                mode,
            };
            migrate::migrate(&at.connect(top)?, &at.addr(top), args, at.format())
        }
        Command::Migrations { at } => migrate::list(&at.connect(top)?, at.format()),
        Command::Rebalance {
            dry_run,
            band,
            parallel,
            at,
        } => {
            let args = rebalance::RebalanceArgs {
                dry_run,
                band_pct: band,
                parallel,
            };
            rebalance::rebalance(&at.connect(top)?, &at.addr(top), args, at.format())
        }
        Command::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write, and a
            // closed pipe must end the command quietly.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "ramstore", &mut script);
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, &script)?;
            std::io::Write::flush(&mut out)?;
            Ok(())
        }
        Command::Bench(mut args) => {
            args.coordinator = Some(
                args.coordinator
                    .or(cli.coordinator)
                    .unwrap_or_else(|| DEFAULT_COORDINATOR.to_string()),
            );
            bench::run(args)
        }
    }
}
