//! `ramstore`: run a development cluster, a coordinator or a storage server, and talk
//! to a cluster from the shell.

mod allocator;
mod bench;
mod cluster;
mod config;
mod data;
mod migrate;
mod output;
mod reach;
mod size;
mod value;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use ramstore_coordinator::failure_detector::MAX_DETECTOR_MS;
use ramstore_coordinator::partition::PartitionLimits;
use ramstore_coordinator::{
    FailureDetectorConfig, StoreSpec, DEFAULT_FAILURE_TIMEOUT_MS, DEFAULT_PING_INTERVAL_MS,
    DEFAULT_PING_TIMEOUT_MS, DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
};
use ramstore_server::failure_monitor::MAX_MONITOR_MS;
use ramstore_server::{
    MonitorConfig, ServerOptions, SyncMode, DEFAULT_BACKUP_FRAMES, DEFAULT_OPEN_BUFFERS,
    DEFAULT_REPLICAS, MAX_FRAME_COUNT, MAX_OPEN_BUFFERS, MAX_REPLICAS,
};

#[derive(Parser)]
#[command(
    name = "ramstore",
    version,
    about = "ramstore: a distributed in-memory key-value store"
)]
struct Cli {
    /// The coordinator's address for the data, admin, server and bench commands, or
    /// several separated by commas (the active coordinator and its standbys); the
    /// same flag after the subcommand wins [default: 127.0.0.1:7000].
    #[arg(long, value_name = "ADDR", env = "RAMSTORE_COORDINATOR")]
    coordinator: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// The coordinator's failure detector (R§7.2, R§7.3; in `ramstore dev` the servers'
/// pings use the same interval and timeout).
#[derive(clap::Args, Clone, Copy)]
struct DetectorArgs {
    /// How often the coordinator pings each UP server, in milliseconds.
    #[arg(long, default_value_t = DEFAULT_PING_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    ping_interval_ms: u64,
    /// How long a ping may take before it counts as failed, in milliseconds (a
    /// crashed server's refused connection fails at once).
    #[arg(long, default_value_t = DEFAULT_PING_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    ping_timeout_ms: u64,
    /// A suspected server that no path reaches is declared crashed only once it has
    /// answered none of the coordinator's pings for this many milliseconds (at least
    /// the ping interval).
    #[arg(long, default_value_t = DEFAULT_FAILURE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    failure_timeout_ms: u64,
    /// The same when its pings only time out (no refused connection: the process
    /// may be alive but slow), in milliseconds; at least --failure-timeout-ms
    /// counts.
    #[arg(long, default_value_t = DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    unresponsive_timeout_ms: u64,
}

impl From<DetectorArgs> for FailureDetectorConfig {
    fn from(a: DetectorArgs) -> Self {
        FailureDetectorConfig {
            ping_interval_ms: a.ping_interval_ms,
            ping_timeout_ms: a.ping_timeout_ms,
            failure_timeout_ms: a.failure_timeout_ms,
            unresponsive_timeout_ms: a.unresponsive_timeout_ms,
        }
    }
}

impl From<DetectorArgs> for MonitorConfig {
    fn from(a: DetectorArgs) -> Self {
        MonitorConfig {
            ping_interval_ms: a.ping_interval_ms,
            ping_timeout_ms: a.ping_timeout_ms,
        }
    }
}

/// How crash recovery splits a crashed master's tablets (R§7.5).
#[derive(clap::Args, Clone, Copy)]
struct RecoveryArgs {
    /// Most bytes of log entries one recovery master replays for one crashed
    /// master (tablets above it are split) [default: 512 MiB].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    recovery_partition_bytes: Option<u64>,
    /// Most log entries one recovery master replays for one crashed master
    /// [default: 4000000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    recovery_partition_entries: Option<u64>,
}

impl From<RecoveryArgs> for PartitionLimits {
    fn from(a: RecoveryArgs) -> Self {
        let d = PartitionLimits::default();
        PartitionLimits {
            max_bytes: a.recovery_partition_bytes.unwrap_or(d.max_bytes),
            max_entries: a.recovery_partition_entries.unwrap_or(d.max_entries),
        }
    }
}

/// A storage server's randomized pings (R§7.2).
#[derive(clap::Args, Clone, Copy)]
struct MonitorArgs {
    /// How often this server pings a random other server, in milliseconds.
    #[arg(long, default_value_t = ramstore_server::failure_monitor::DEFAULT_PING_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_MONITOR_MS))]
    ping_interval_ms: u64,
    /// How long a ping may take before the server reports the target to the
    /// coordinator, in milliseconds.
    #[arg(long, default_value_t = ramstore_server::failure_monitor::DEFAULT_PING_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_MONITOR_MS))]
    ping_timeout_ms: u64,
}

/// A storage server's time limits per connection, shared by `ramstore server` and
/// `ramstore dev` so both have the same flags, defaults and help (issue 17:
/// partial frames and idle connections time out).
#[derive(clap::Args, Clone, Copy)]
struct TimeoutArgs {
    /// Milliseconds a request (native frame or Redis command) may take to
    /// arrive once its first byte has, and a reply write may stall, before the
    /// connection is closed: a client sending a byte a second is dropped
    /// (0: never).
    #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_REQUEST_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_CONNECTION_TIMEOUT_MS))]
    request_timeout_ms: u64,
    /// Milliseconds a client connection may sit idle before it is closed, on
    /// the native and Redis ports (0: never; at --max-connections the oldest
    /// idle connection is evicted instead).
    #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_CONNECTION_TIMEOUT_MS))]
    idle_timeout_ms: u64,
}

impl From<MonitorArgs> for MonitorConfig {
    fn from(a: MonitorArgs) -> Self {
        MonitorConfig {
            ping_interval_ms: a.ping_interval_ms,
            ping_timeout_ms: a.ping_timeout_ms,
        }
    }
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
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
        servers: u16,
        /// Log memory per storage server (e.g. 512MiB, 4GiB).
        #[arg(long, default_value = "512MiB", value_parser = size::parse_size)]
        memory: usize,
        /// Coordinator port; servers use the ports after it.
        #[arg(long, default_value_t = 7000, value_parser = clap::value_parser!(u16).range(1..))]
        port: u16,
        /// Frames in each server's backup file (DIR/server-N/backup/replicas.frames);
        /// each frame holds one 8 MiB segment replica and is allocated on disk up
        /// front.
        #[arg(long, default_value_t = DEFAULT_BACKUP_FRAMES,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_FRAME_COUNT)))]
        backup_frames: u32,
        /// When the backups acknowledge writes (see `ramstore server --help`).
        #[arg(long, value_enum, default_value_t = BackupSync::Buffered)]
        backup_sync: BackupSync,
        /// Replicas of each log segment on other servers' backups; dev uses at most
        /// servers − 1 (a replica never sits with its master) and warns when that
        /// is below 3.
        #[arg(long, default_value_t = DEFAULT_REPLICAS as u8,
              value_parser = clap::value_parser!(u8).range(0..=MAX_REPLICAS as i64))]
        replicas: u8,
        #[command(flatten)]
        detector: DetectorArgs,
        /// Also serve the Redis protocol on 127.0.0.1:PORT (redis-cli -p PORT), from
        /// the server that owns database 0 (table db0).
        #[arg(long, value_name = "PORT")]
        resp_port: Option<u16>,
        /// The password Redis clients must give with AUTH (default: none).
        #[arg(long, value_name = "PASSWORD")]
        requirepass: Option<String>,
        /// How long the event loop keeps polling its sockets after the last
        /// request (native or Redis, a replication RPC between the servers
        /// included) before it sleeps, in µs: saves a wake-up per step of a
        /// durable write and per round of requests, costs up to this much CPU
        /// per request when requests are sparse, nothing when idle (0: sleep at
        /// once). `--resp-poll-us` is an older name.
        #[arg(long, value_name = "US", alias = "resp-poll-us",
              default_value_t = ramstore_resp::DEFAULT_POLL_BEFORE_SLEEP_US,
              value_parser = clap::value_parser!(u64).range(0..=ramstore_resp::MAX_POLL_BEFORE_SLEEP_US))]
        poll_us: u64,
        /// How long a write refused because the log is full is retried before
        /// Redis clients get -OOM, in ms (see `ramstore server --help`).
        #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_NO_SPACE_WAIT_MS,
              value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_NO_SPACE_WAIT_MS))]
        no_space_wait_ms: u64,
        #[command(flatten)]
        timeouts: TimeoutArgs,
    },
    /// Run a coordinator. With an etcd store, coordinators elect one active
    /// coordinator through a lease in etcd; the others stand by and take over when
    /// its lease expires (see docs/operations.md).
    #[command(args_override_self = true)]
    Coordinator {
        /// Read settings from this TOML file: the flags below without dashes
        /// (`listen = "0.0.0.0:7000"`); flags on the command line override it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The address to serve clients and servers on.
        #[arg(long, default_value = "127.0.0.1:7000")]
        listen: String,
        /// Where state lives: file:DIR (one coordinator), or
        /// etcd://HOST:PORT[,HOST:PORT][/CLUSTER] (an active coordinator and
        /// standbys; CLUSTER defaults to "default").
        #[arg(long, value_parser = parse_store)]
        store: StoreSpec,
        /// Start as a standby: wait, without listening, until the active
        /// coordinator's lease expires, then take over (etcd stores only).
        #[arg(long)]
        standby: bool,
        /// Lifetime of the active coordinator's lease in etcd, in milliseconds
        /// (whole seconds, 2000 to 60000; renewed every third of it). A standby
        /// takes over within about twice this after the active coordinator dies
        /// [default: 2000; etcd stores only].
        #[arg(long, value_parser = parse_lease_ttl_ms)]
        lease_ttl_ms: Option<u64>,
        #[command(flatten)]
        detector: DetectorArgs,
        #[command(flatten)]
        recovery: RecoveryArgs,
    },
    /// Run a storage server.
    #[command(args_override_self = true)]
    Server {
        /// Read settings from this TOML file: the flags below without dashes
        /// (`memory = "4GiB"`, `backup-dir = "/srv/ramstore"`); flags on the command
        /// line override it.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The coordinator's address, or several separated by commas (the active
        /// coordinator and its standbys) [env: RAMSTORE_COORDINATOR].
        #[arg(long, value_name = "ADDR")]
        coordinator: Option<String>,
        /// The address to serve clients and other servers on (port 0: any free
        /// port).
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
        /// Also run a backup: keep other masters' segment replicas in
        /// DIR/replicas.frames (created on first start, reopened with its replicas
        /// after a restart). Without it the server is a master only.
        #[arg(long, value_name = "DIR")]
        backup_dir: Option<PathBuf>,
        /// When the backup acknowledges a write: `buffered` once the bytes are in
        /// its memory — the page cache (RAMCloud's choice; survives a process crash,
        /// but power loss only if the machine can flush), `fsync` once they are
        /// synced to disk. Closed replicas are always synced. See docs/operations.md.
        #[arg(long, value_enum, default_value_t = BackupSync::Buffered)]
        backup_sync: BackupSync,
        /// Frames in the backup file: the most replicas it holds (8 MiB each,
        /// allocated on disk up front). Fixed when the file is made.
        #[arg(long, default_value_t = DEFAULT_BACKUP_FRAMES,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_FRAME_COUNT)))]
        backup_frames: u32,
        /// Replicas the backup keeps open (8 MiB of memory each) at once; when all
        /// are in use it refuses new ones and masters go elsewhere. At least 2: a
        /// master opens its next head before it closes the last (R§7.4), so one
        /// backup may need two of its replicas open at once.
        #[arg(long, default_value_t = DEFAULT_OPEN_BUFFERS,
              value_parser = clap::value_parser!(u32).range(2..=i64::from(MAX_OPEN_BUFFERS)))]
        backup_open_buffers: u32,
        /// Servers in one failure domain share a failure cause (a rack, a power
        /// supply): no two replicas of a segment, nor a replica and its master, are
        /// placed in one domain. At most 64 bytes, no spaces. Default: the server is
        /// its own domain.
        #[arg(long, value_name = "NAME", default_value = "", hide_default_value = true,
              value_parser = parse_failure_domain)]
        failure_domain: String,
        /// Replicas of each segment of this master's log, on other servers'
        /// backups (R§4.2). A write is acknowledged once all of them hold it; 0
        /// keeps data in this process's DRAM only.
        #[arg(long, default_value_t = DEFAULT_REPLICAS as u8,
              value_parser = clap::value_parser!(u8).range(0..=MAX_REPLICAS as i64))]
        replicas: u8,
        #[command(flatten)]
        monitor: MonitorArgs,
        /// Fault all log memory in on a background thread at start-up, so the
        /// kernel's zeroing of fresh pages never lands on writes or recovery replay
        /// (the process holds --memory resident from the start). It keeps a core
        /// busy for about a second per GiB: on a machine shared by several servers
        /// the others may miss pings meanwhile, so start them one at a time.
        #[arg(long)]
        prefault_memory: bool,
        /// Also serve the Redis protocol (RESP2/RESP3) here, e.g. 127.0.0.1:6379:
        /// keys this server owns are answered locally, others are forwarded to
        /// their master (one extra hop). See docs/operations.md.
        #[arg(long, value_name = "ADDR")]
        resp_listen: Option<String>,
        /// The password Redis clients must give with AUTH (default: none).
        #[arg(long, value_name = "PASSWORD")]
        requirepass: Option<String>,
        /// Masters a Redis database's table (db0, db1, …) spans when the Redis
        /// front end creates it.
        #[arg(long, default_value_t = 1)]
        resp_table_span: u32,
        /// How long the Redis front end keeps polling its sockets after the last
        /// request before it sleeps, in µs: saves a wake-up per round of requests
        /// under load, costs up to this much CPU per request when idle-ish
        /// (0: sleep at once).
        #[arg(long, value_name = "US", default_value_t = ramstore_resp::DEFAULT_POLL_BEFORE_SLEEP_US,
              value_parser = clap::value_parser!(u64).range(0..=ramstore_resp::MAX_POLL_BEFORE_SLEEP_US))]
        resp_poll_us: u64,
        /// Connections (clients and other servers) served at once; a connection
        /// beyond this evicts the one idle the longest, or, if none is idle, gets
        /// its first request answered RETRY and is closed.
        #[arg(long, default_value_t = ramstore_server::DEFAULT_MAX_CONNECTIONS as u32,
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        max_connections: u32,
        /// How long a write refused because the log is full is retried before
        /// Redis clients get -OOM, in ms; once the log has refused writes for this
        /// long, refused writes get -OOM at once. Also the forwarded writes'
        /// patience (0: answer -OOM at the first refusal).
        #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_NO_SPACE_WAIT_MS,
              value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_NO_SPACE_WAIT_MS))]
        no_space_wait_ms: u64,
        /// Pause between this master's replica checks, in ms: each asks one
        /// backup (the backups in turn) which replicas it holds, and a replica it
        /// lost (freed, a disk problem) is re-created from memory (R§8). 0: no
        /// periodic checks (a lost replica is then found only by the next write
        /// to it).
        #[arg(long, value_name = "MS",
              default_value_t = ramstore_server::replica_manager::DEFAULT_REPLICA_CHECK_INTERVAL_MS,
              value_parser = parse_replica_check_interval)]
        replica_check_interval_ms: u64,
        #[command(flatten)]
        timeouts: TimeoutArgs,
    },
    /// Create a table (no-op if it exists).
    CreateTable {
        /// The table's name.
        name: String,
        /// Masters to spread the table over (one tablet each).
        #[arg(long, default_value_t = 1)]
        span: u32,
        #[command(flatten)]
        at: At,
    },
    /// Drop a table and its objects.
    DropTable {
        /// The table's name.
        name: String,
        #[command(flatten)]
        at: At,
    },
    /// List tables.
    Tables {
        #[command(flatten)]
        at: At,
    },
    /// Write an object: the value is the argument, standard input (`-`) or a file
    /// (--value-file), at most 1 MiB.
    Put {
        /// The table's name.
        table: String,
        /// The object's key.
        key: String,
        /// The value; `-` reads it from standard input.
        #[arg(required_unless_present = "value_file", conflicts_with = "value_file")]
        value: Option<String>,
        /// Read the value from this file.
        #[arg(long, value_name = "PATH")]
        value_file: Option<PathBuf>,
        /// Only write if the object's current version is exactly this.
        #[arg(long, value_name = "VERSION", conflicts_with = "create_only")]
        if_version: Option<u64>,
        /// Only write if the object does not exist yet.
        #[arg(long)]
        create_only: bool,
        #[command(flatten)]
        at: At,
    },
    /// Read an object's value: escaped for the terminal by default, exact bytes with
    /// --raw (its version goes to stderr with --version).
    Get {
        /// The table's name.
        table: String,
        /// The object's key.
        key: String,
        /// Also print the object's version (on stderr).
        #[arg(long)]
        version: bool,
        #[command(flatten)]
        at: At,
    },
    /// Delete an object.
    Del {
        /// The table's name.
        table: String,
        /// The object's key.
        key: String,
        #[command(flatten)]
        at: At,
    },
    /// Add to a counter: a 64-bit integer stored as decimal text, as Redis's INCR
    /// stores it (created at 0 if missing).
    Incr {
        /// The table's name.
        table: String,
        /// The counter's key.
        key: String,
        /// What to add (negative to subtract).
        #[arg(default_value_t = 1, allow_hyphen_values = true)]
        delta: i64,
        #[command(flatten)]
        at: At,
    },
    /// Print every object of a table: key, value (escaped by default) and version.
    Scan {
        /// The table's name.
        table: String,
        /// Print at most this many objects.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        #[command(flatten)]
        at: At,
    },
    /// Show servers, their tablets and memory use, and recoveries in progress.
    Status {
        /// Also list removed servers and earlier runs of restarted ones (as
        /// ID.RUN).
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        at: At,
    },
    /// Ask the coordinator to treat a server as crashed: its tablets are recovered
    /// on other masters from its backups (a drill; the server, if alive, is fenced
    /// off and exits).
    CrashServer {
        /// The server id (see `ramstore status`): its current run is declared
        /// crashed.
        id: u64,
        #[command(flatten)]
        at: At,
    },
    /// Split a table's tablet so that one starts at key hash HASH (no data moves).
    Split {
        /// The table's name.
        table: String,
        /// The key hash the new tablet starts at (decimal, or hex with 0x).
        #[arg(long, value_name = "HASH", value_parser = migrate::parse_hash)]
        at: u64,
        #[command(flatten)]
        at_: At,
    },
    /// Move a tablet to another master while clients keep using it (live
    /// migration, K§2.3): waits until every record has moved and prints the bytes
    /// moved and MB/s.
    Migrate {
        /// The table's name.
        table: String,
        /// The server to move it to (its id, as `ramstore status` shows it).
        #[arg(long, value_name = "SERVER_ID")]
        to: u64,
        /// The key-hash range to move, START:END inclusive (decimal, or hex with
        /// 0x); split out of its tablet first if needed. Default: the table's
        /// only tablet.
        #[arg(long, value_name = "START:END", value_parser = migrate::parse_range)]
        range: Option<(u64, u64)>,
        /// Return once ownership has moved, without waiting for the records.
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        at: At,
    },
    /// List migrations in progress and those finished since the coordinator
    /// started.
    Migrations {
        #[command(flatten)]
        at: At,
    },
    /// Print a shell completion script (e.g. `ramstore completions bash >
    /// /etc/bash_completion.d/ramstore`).
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Measure latency and throughput: closed-loop clients running a workload.
    Bench(bench::BenchArgs),
}

/// `--backup-sync`: when a backup acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackupSync {
    /// Once the bytes are in the backup's memory: written to its file, not synced
    /// (R§4.2).
    Buffered,
    /// Once the bytes are on disk and synced.
    Fsync,
}

impl From<BackupSync> for SyncMode {
    fn from(s: BackupSync) -> Self {
        match s {
            BackupSync::Buffered => SyncMode::Buffered,
            BackupSync::Fsync => SyncMode::Fsync,
        }
    }
}

/// Which cluster a data or admin command talks to, how long it tries, and how it
/// prints.
#[derive(clap::Args)]
struct At {
    /// The coordinator's address, or several separated by commas (the active
    /// coordinator and its standbys) [env: RAMSTORE_COORDINATOR; default:
    /// 127.0.0.1:7000].
    #[arg(long, value_name = "ADDR")]
    coordinator: Option<String>,
    /// How long to keep retrying (a coordinator taking over, a master being
    /// recovered) before giving up with exit code 3, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
    #[command(flatten)]
    output: output::OutputArgs,
}

/// The coordinator address when none is given.
const DEFAULT_COORDINATOR: &str = "127.0.0.1:7000";

impl At {
    /// The address: this command's `--coordinator`, else the one before the
    /// subcommand or in RAMSTORE_COORDINATOR, else the default.
    fn addr(&self, top: Option<&str>) -> String {
        self.coordinator
            .as_deref()
            .or(top)
            .unwrap_or(DEFAULT_COORDINATOR)
            .to_string()
    }

    fn connect(&self, top: Option<&str>) -> anyhow::Result<ramstore_client::BlockingClient> {
        reach::connect(
            &self.addr(top),
            std::time::Duration::from_secs(self.timeout),
        )
    }

    fn format(&self) -> output::Format {
        self.output.format()
    }
}

fn parse_store(s: &str) -> Result<StoreSpec, String> {
    s.parse()
}

fn parse_lease_ttl_ms(s: &str) -> Result<u64, String> {
    let ms: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    ramstore_coordinator::validate_lease_ttl_ms(ms)?;
    Ok(ms)
}

fn parse_failure_domain(s: &str) -> Result<String, String> {
    if ramstore_coordinator::valid_failure_domain(s) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "at most {} bytes, no spaces or control characters",
            ramstore_coordinator::MAX_FAILURE_DOMAIN_BYTES
        ))
    }
}

fn parse_replica_check_interval(s: &str) -> Result<u64, String> {
    use ramstore_server::replica_manager::{
        MAX_REPLICA_CHECK_INTERVAL_MS as MAX, MIN_REPLICA_CHECK_INTERVAL_MS as MIN,
    };
    match s.parse::<u64>() {
        Ok(ms) if ms == 0 || (MIN..=MAX).contains(&ms) => Ok(ms),
        _ => Err(format!("0 (off) or {MIN} to {MAX} milliseconds")),
    }
}

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
            detector,
            recovery,
        } => runtime()?.block_on(cluster::coordinator(cluster::CoordinatorArgs {
            listen,
            store,
            standby,
            lease_ttl_ms,
            detector: detector.into(),
            recovery: recovery.into(),
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
            timeouts,
        } => runtime()?.block_on(cluster::server(ServerOptions {
            replica_check_interval_ms,
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
            failure_domain,
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
        Command::Incr {
            table,
            key,
            delta,
            at,
        } => data::incr(&at.connect(top)?, &table, &key, delta, at.format()),
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
            table,
            to,
            range,
            no_wait,
            at,
        } => {
            let args = migrate::MigrateArgs {
                table: &table,
                to,
                range,
                wait: !no_wait,
            };
            migrate::migrate(&at.connect(top)?, &at.addr(top), args, at.format())
        }
        Command::Migrations { at } => migrate::list(&at.connect(top)?, at.format()),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks (duplicate flags, conflicting names) on the
    /// whole command line, which otherwise fire only when a command is parsed.
    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `--config` expands for `server` and `coordinator` (which must exist).
    #[test]
    fn config_subcommands_exist() {
        let command = Cli::command();
        for name in ["server", "coordinator"] {
            let sub = command.find_subcommand(name).expect(name);
            assert!(sub.get_arguments().any(|a| a.get_long() == Some("config")));
        }
    }

    /// `ramstore dev` takes the connection timeouts `ramstore server` takes, with
    /// the same defaults and help, and passes what it is given through.
    #[test]
    fn dev_timeouts_match_server() {
        let command = Cli::command();
        let arg = |sub: &str, long: &str| {
            let sub = command.find_subcommand(sub).expect(sub);
            let arg = sub
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .unwrap_or_else(|| panic!("{long} missing"));
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            (defaults, arg.get_help().map(|h| h.to_string()))
        };
        for long in ["request-timeout-ms", "idle-timeout-ms"] {
            let server = arg("server", long);
            assert!(server.1.is_some(), "{long} has help");
            assert_eq!(arg("dev", long), server, "{long}");
        }
        let parsed = Cli::try_parse_from([
            "ramstore",
            "dev",
            "--request-timeout-ms",
            "1500",
            "--idle-timeout-ms",
            "9000",
        ])
        .expect("dev accepts the timeouts");
        let Command::Dev { timeouts, .. } = parsed.command else {
            panic!("parsed as another command");
        };
        assert_eq!(
            (timeouts.request_timeout_ms, timeouts.idle_timeout_ms),
            (1500, 9000)
        );
        let defaults = Cli::try_parse_from(["ramstore", "dev"]).expect("defaults parse");
        let Command::Dev { timeouts, .. } = defaults.command else {
            panic!("parsed as another command");
        };
        assert_eq!(
            (timeouts.request_timeout_ms, timeouts.idle_timeout_ms),
            (
                ramstore_server::DEFAULT_REQUEST_TIMEOUT_MS,
                ramstore_server::DEFAULT_IDLE_TIMEOUT_MS
            )
        );
    }
}
