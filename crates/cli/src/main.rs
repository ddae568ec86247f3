//! `ramstore`: run a development cluster, a coordinator or a storage server, and talk
//! to a cluster from the shell.

mod bench;
mod cluster;
mod data;
mod size;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ramstore_coordinator::StoreSpec;
use ramstore_server::ServerOptions;

#[derive(Parser)]
#[command(
    name = "ramstore",
    version,
    about = "ramstore: a distributed in-memory key-value store"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a whole small cluster in this process: a coordinator and storage servers on
    /// 127.0.0.1 (the quickest way to try ramstore).
    Dev {
        /// Where the coordinator keeps its state [default: a ramstore-dev-PORT
        /// directory in the system temp dir].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Storage servers to run.
        #[arg(long, default_value_t = 2)]
        servers: usize,
        /// Log memory per storage server (e.g. 512MiB, 4GiB).
        #[arg(long, default_value = "512MiB", value_parser = size::parse_size)]
        memory: usize,
        /// Coordinator port; servers use the ports after it.
        #[arg(long, default_value_t = 7000)]
        port: u16,
    },
    /// Run a coordinator.
    Coordinator {
        #[arg(long, default_value = "127.0.0.1:7000")]
        listen: String,
        /// Where state lives: file:DIR.
        #[arg(long, value_parser = parse_store)]
        store: StoreSpec,
    },
    /// Run a storage server.
    Server {
        /// The coordinator's address.
        #[arg(long, env = "RAMSTORE_COORDINATOR")]
        coordinator: String,
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Address clients should use, if not the listen address.
        #[arg(long)]
        advertise: Option<String>,
        /// Log memory (e.g. 4GiB).
        #[arg(long, default_value = "1GiB", value_parser = size::parse_size)]
        memory: usize,
        /// Serve Prometheus metrics here (e.g. 127.0.0.1:9100).
        #[arg(long)]
        metrics_listen: Option<String>,
    },
    /// Create a table (no-op if it exists).
    CreateTable {
        name: String,
        /// Masters to spread the table over (one tablet each).
        #[arg(long, default_value_t = 1)]
        span: u32,
        #[command(flatten)]
        at: At,
    },
    /// Drop a table and its objects.
    DropTable {
        name: String,
        #[command(flatten)]
        at: At,
    },
    /// List tables.
    Tables {
        #[command(flatten)]
        at: At,
    },
    /// Write an object.
    Put {
        table: String,
        key: String,
        value: String,
        /// Only write if the object's current version is exactly this.
        #[arg(long)]
        if_version: Option<u64>,
        /// Only write if the object does not exist yet.
        #[arg(long)]
        create_only: bool,
        #[command(flatten)]
        at: At,
    },
    /// Read an object's value (its version goes to stderr with --version).
    Get {
        table: String,
        key: String,
        /// Also print the object's version (on stderr).
        #[arg(long)]
        version: bool,
        #[command(flatten)]
        at: At,
    },
    /// Delete an object.
    Del {
        table: String,
        key: String,
        #[command(flatten)]
        at: At,
    },
    /// Add to a 64-bit counter (created at 0 if missing).
    Incr {
        table: String,
        key: String,
        #[arg(default_value_t = 1, allow_hyphen_values = true)]
        delta: i64,
        #[command(flatten)]
        at: At,
    },
    /// Print every object of a table (key, value, version; tab-separated).
    Scan {
        table: String,
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        at: At,
    },
    /// Show servers, their tablets and memory use.
    Status {
        #[command(flatten)]
        at: At,
    },
    /// Measure latency and throughput: closed-loop clients running a workload.
    Bench(bench::BenchArgs),
}

/// Which cluster a data command talks to.
#[derive(clap::Args)]
struct At {
    /// The coordinator's address.
    #[arg(long, env = "RAMSTORE_COORDINATOR", default_value = "127.0.0.1:7000")]
    coordinator: String,
}

fn parse_store(s: &str) -> Result<StoreSpec, String> {
    s.parse()
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Dev {
            dir,
            servers,
            memory,
            port,
        } => runtime()?.block_on(cluster::dev(cluster::DevOptions {
            dir,
            servers,
            memory_bytes: memory,
            port,
        })),
        Command::Coordinator { listen, store } => {
            runtime()?.block_on(cluster::coordinator(listen, store))
        }
        Command::Server {
            coordinator,
            listen,
            advertise,
            memory,
            metrics_listen,
        } => runtime()?.block_on(cluster::server(ServerOptions {
            listen,
            advertise,
            coordinator,
            memory_bytes: memory,
            metrics_listen,
        })),
        Command::CreateTable { name, span, at } => {
            data::create_table(&data::connect(&at.coordinator)?, &name, span)
        }
        Command::DropTable { name, at } => {
            data::drop_table(&data::connect(&at.coordinator)?, &name)
        }
        Command::Tables { at } => data::tables(&data::connect(&at.coordinator)?, &at.coordinator),
        Command::Put {
            table,
            key,
            value,
            if_version,
            create_only,
            at,
        } => data::put(
            &data::connect(&at.coordinator)?,
            &table,
            &key,
            &value,
            data::PutOptions {
                if_version,
                create_only,
            },
        ),
        Command::Get {
            table,
            key,
            version,
            at,
        } => data::get(&data::connect(&at.coordinator)?, &table, &key, version),
        Command::Del { table, key, at } => {
            data::del(&data::connect(&at.coordinator)?, &table, &key)
        }
        Command::Incr {
            table,
            key,
            delta,
            at,
        } => data::incr(&data::connect(&at.coordinator)?, &table, &key, delta),
        Command::Scan { table, limit, at } => {
            data::scan(&data::connect(&at.coordinator)?, &table, limit)
        }
        Command::Status { at } => data::status(&data::connect(&at.coordinator)?, &at.coordinator),
        Command::Bench(args) => bench::run(args),
    }
}
