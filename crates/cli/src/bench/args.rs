//! The flags of `ramstore bench` and how its clients are driven (`--mode`).

use std::path::PathBuf;

use serde::Serialize;

use super::workload::Workload;

/// How the clients are driven (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A thread per client, each with its own current-thread runtime.
    Threads,
    /// A task per client on one multi-thread runtime.
    Tasks,
    /// A thread per client, each with its own BlockingClient.
    Blocking,
}

#[derive(clap::Args)]
pub struct BenchArgs {
    /// The coordinator's address [env: RAMSTORE_COORDINATOR; default:
    /// 127.0.0.1:7000] (`main` fills it in before [`run`]).
    #[arg(long, value_name = "ADDR")]
    pub coordinator: Option<String>,
    #[arg(long, value_enum, default_value_t = Workload::Read)]
    pub(super) workload: Workload,
    /// Objects each transaction of `--workload tx` writes (1 to 1024).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(super) tx_objects: u16,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    pub(super) value_size: usize,
    /// Objects in the key space.
    #[arg(long, default_value_t = 100_000)]
    pub(super) keys: u64,
    /// Closed-loop clients (each has one operation outstanding at a time).
    #[arg(long, default_value_t = 1)]
    pub(super) clients: usize,
    /// Seconds measured (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub(super) duration: f64,
    /// Seconds run before measuring starts (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub(super) warmup: f64,
    /// The table to use (created if missing).
    #[arg(long, default_value = "bench")]
    pub(super) table: String,
    /// Also write the results here as JSON.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Write every key before running (the default).
    #[arg(long, overrides_with = "no_load")]
    pub(super) load: bool,
    /// Do not load: the keys were written by an earlier run.
    #[arg(long, overrides_with = "load")]
    pub(super) no_load: bool,
    /// How clients are driven: a thread with its own runtime each, tasks on one
    /// multi-thread runtime, or a thread with a BlockingClient each.
    #[arg(long, value_enum, default_value_t = Mode::Threads)]
    pub(super) mode: Mode,
    /// All clients share one Client (one connection per master) instead of one each.
    #[arg(long)]
    pub(super) shared_client: bool,
    /// Seed of the key and operation choices.
    #[arg(long, default_value_t = 1)]
    pub(super) seed: u64,
    /// Send writes, deletes and increments as exactly-once RPCs (RIFL; the
    /// client's default).
    #[arg(long, overrides_with = "at_least_once")]
    pub(super) exactly_once: bool,
    /// Send them without an RPC id (at-least-once), to measure what RIFL costs.
    #[arg(long, overrides_with = "exactly_once")]
    pub(super) at_least_once: bool,
    /// µs each RPC polls for its reply before the client's thread may sleep
    /// (0: never, the client's default; see `ClientOptions::reply_poll_us`).
    #[arg(long, default_value_t = ramstore_client::DEFAULT_REPLY_POLL_US)]
    pub(super) reply_poll_us: u64,
}
impl BenchArgs {
    /// The coordinator's address (`main` resolves the default).
    pub(super) fn coordinator(&self) -> &str {
        self.coordinator.as_deref().unwrap_or("127.0.0.1:7000")
    }

    /// Whether the clients send exactly-once RPCs: the client's default unless a
    /// flag says otherwise (the last one given wins).
    pub(super) fn exactly_once(&self) -> bool {
        if self.at_least_once {
            false
        } else {
            self.exactly_once || ramstore_client::DEFAULT_EXACTLY_ONCE
        }
    }
}
