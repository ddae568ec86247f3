//! The command line's definition (clap): the top-level flags, every subcommand and
//! its flags, and `At`, the cluster a data or admin command talks to. What each
//! command does is in `main.rs`'s dispatch and the modules it calls.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ramstore_coordinator::StoreSpec;
use ramstore_server::{
    DEFAULT_BACKUP_FRAMES, DEFAULT_OPEN_BUFFERS, DEFAULT_REPLICAS, MAX_FRAME_COUNT,
    MAX_OPEN_BUFFERS, MAX_REPLICAS,
};

use crate::arg_groups::{
    parse_failure_domain, parse_lease_ttl_ms, parse_replica_check_interval, parse_store,
    BackupSync, DetectorArgs, MonitorArgs, PlacementArg, RecoveryArgs, TimeoutArgs,
};
use crate::{bench, migrate, output, reach, size};

#[derive(Parser)]
#[command(
    name = "ramstore",
    version,
    about = "ramstore: a distributed in-memory key-value store"
)]
pub(crate) struct Cli {
    /// The coordinator's address for the data, admin, server and bench commands, or
    /// several separated by commas (the active coordinator and its standbys); the
    /// same flag after the subcommand wins [default: 127.0.0.1:7000].
    #[arg(long, value_name = "ADDR", env = "RAMSTORE_COORDINATOR")]
    pub(crate) coordinator: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}
#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// The term of the leases clients hold for exactly-once writes (RIFL), in
        /// milliseconds: a client that stops renewing for this long loses its
        /// completion records, and its late retries get STALE_RPC.
        #[arg(long, value_name = "MS",
              default_value_t = ramstore_coordinator::client_leases::CLIENT_LEASE_TERM_MS,
              value_parser = clap::value_parser!(u64).range(
                  ramstore_coordinator::client_leases::MIN_CLIENT_LEASE_TERM_MS
                      ..=ramstore_coordinator::client_leases::MAX_CLIENT_LEASE_TERM_MS))]
        client_lease_term_ms: u64,
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
        /// The rack this server sits in (issue 22): its failure domain (unless
        /// --failure-domain names one) and its ToR switch, so servers of one
        /// rack are one hop apart (C§3.2).
        #[arg(long, value_name = "ID")]
        rack: Option<String>,
        /// Further switches this server is attached to (a multi-homed,
        /// BCube-like network, C§2.2: e.g. its level-1 switch), comma-separated.
        #[arg(long, value_name = "SWITCH", value_delimiter = ',')]
        switches: Vec<String>,
        /// How this master places its replicas: scattered (R§7.1) or proximity
        /// (one hop away where failure domains allow, C§3.2; needs --rack or
        /// --switches on the servers).
        #[arg(long, value_enum, default_value_t = PlacementArg::Scattered)]
        placement: PlacementArg,
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
        /// Pause between this master's checks of idle client leases, in ms:
        /// the records of exactly-once RPCs of clients whose lease expired are
        /// dropped (RIFL). 0: never checked (records then wait for their
        /// clients' acknowledgements).
        #[arg(long, value_name = "MS",
              default_value_t = ramstore_server::client_lease_expiry::DEFAULT_CLIENT_LEASE_CHECK_MS)]
        client_lease_check_ms: u64,
        /// How long a transaction may stay prepared on this master, undecided
        /// (its client crashed mid-commit, say), before this master asks every
        /// participant for its vote and decides it, in ms. The master holding
        /// the transaction's first object acts after this; the others after 4
        /// times this. 0: never (a crashed client's locks are then held until
        /// someone decides them).
        #[arg(long, value_name = "MS",
              default_value_t = ramstore_server::tx_recovery::DEFAULT_TX_RECOVERY_TIMEOUT_MS)]
        tx_recovery_timeout_ms: u64,
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
        /// The object expires this many seconds from now (reads then find
        /// nothing); without it the object never expires.
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
        ttl: Option<u64>,
        #[command(flatten)]
        at: At,
    },
    /// Show how long an object has left before it expires.
    Ttl {
        /// The table's name.
        table: String,
        /// The object's key.
        key: String,
        #[command(flatten)]
        at: At,
    },
    /// Make an object never expire.
    Persist {
        /// The table's name.
        table: String,
        /// The object's key.
        key: String,
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
    /// Run a small script from stdin as one transaction: one operation a line
    /// (`get TABLE KEY`, `put TABLE KEY VALUE...`, `del TABLE KEY`, `incr TABLE
    /// KEY [N]`); prints the reads' results, then `committed`, or fails with
    /// `aborted` and nothing applied.
    Tx {
        /// Run the script again up to N more times when another client's write
        /// aborts the commit.
        #[arg(long, value_name = "N", default_value_t = 0)]
        retry: u32,
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
        #[arg(required_unless_present = "cancel")]
        table: Option<String>,
        /// The server to move it to (its id, as `ramstore status` shows it).
        #[arg(long, value_name = "SERVER_ID", required_unless_present = "cancel")]
        to: Option<u64>,
        /// Cancel migration ID instead (see `ramstore migrations`): the range
        /// ends on its source, every write acknowledged meanwhile kept.
        #[arg(long, value_name = "ID", conflicts_with_all = ["table", "to", "range"])]
        cancel: Option<u64>,
        /// The key-hash range to move, START:END inclusive (decimal, or hex with
        /// 0x); split out of its tablet first if needed. Default: the table's
        /// only tablet.
        #[arg(long, value_name = "START:END", value_parser = migrate::parse_range)]
        range: Option<(u64, u64)>,
        /// Return once ownership has moved, without waiting for the records.
        #[arg(long)]
        no_wait: bool,
        /// Benchmark baseline (scripts/bench-migration): the target never sends
        /// PriorityPulls, so a read of a key not pulled yet waits for the
        /// background pulls. Not for production use.
        #[arg(long, conflicts_with = "stop_and_copy")]
        no_priority_pulls: bool,
        /// Benchmark baseline (scripts/bench-migration): the range stays locked
        /// on the source (clients retry) until every record is copied, and only
        /// then does ownership move. Not for production use.
        #[arg(long)]
        stop_and_copy: bool,
        #[command(flatten)]
        at: At,
    },
    /// List migrations in progress and those finished since the coordinator
    /// started.
    Migrations {
        #[command(flatten)]
        at: At,
    },
    /// Even out the masters' memory use: split and migrate tablets live until
    /// every master holds within --band of the mean (never filling one past
    /// 90% of its memory).
    Rebalance {
        /// Print the plan (splits and migrations) and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// The band around the mean, in percent.
        #[arg(long, value_name = "PCT", default_value_t = 10.0)]
        band: f64,
        /// Migrations in flight at once.
        #[arg(long, value_name = "N", default_value_t = 2)]
        parallel: usize,
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

/// Which cluster a data or admin command talks to, how long it tries, and how it
/// prints.
#[derive(clap::Args)]
pub(crate) struct At {
    /// The coordinator's address, or several separated by commas (the active
    /// coordinator and its standbys) [env: RAMSTORE_COORDINATOR; default:
    /// 127.0.0.1:7000].
    #[arg(long, value_name = "ADDR")]
    pub(crate) coordinator: Option<String>,
    /// How long to keep retrying (a coordinator taking over, a master being
    /// recovered) before giving up with exit code 3, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) timeout: u64,
    /// Send writes, deletes and increments without an RPC id (at-least-once: a
    /// retry after a lost reply may apply them twice) instead of as exactly-once
    /// RPCs under a client lease (RIFL, the default).
    #[arg(long)]
    pub(crate) at_least_once: bool,
    #[command(flatten)]
    pub(crate) output: output::OutputArgs,
}

/// The coordinator address when none is given.
pub(crate) const DEFAULT_COORDINATOR: &str = "127.0.0.1:7000";

impl At {
    /// The address: this command's `--coordinator`, else the one before the
    /// subcommand or in RAMSTORE_COORDINATOR, else the default.
    pub(crate) fn addr(&self, top: Option<&str>) -> String {
        self.coordinator
            .as_deref()
            .or(top)
            .unwrap_or(DEFAULT_COORDINATOR)
            .to_string()
    }

    pub(crate) fn connect(
        &self,
        top: Option<&str>,
    ) -> anyhow::Result<ramstore_client::BlockingClient> {
        reach::connect(
            &self.addr(top),
            std::time::Duration::from_secs(self.timeout),
            !self.at_least_once,
        )
    }

    pub(crate) fn format(&self) -> output::Format {
        self.output.format()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
