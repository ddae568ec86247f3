//! Flag groups the subcommands share (clap `Args` flattened into several commands)
//! and the value parsers of single flags: failure detection (R§7.2, R§7.3),
//! recovery partitions (R§7.4), server-side monitoring and connection timeouts.

use clap::ValueEnum;
use ramstore_coordinator::failure_detector::MAX_DETECTOR_MS;
use ramstore_coordinator::partition::PartitionLimits;
use ramstore_coordinator::{
    FailureDetectorConfig, StoreSpec, DEFAULT_FAILURE_TIMEOUT_MS, DEFAULT_PING_INTERVAL_MS,
    DEFAULT_PING_TIMEOUT_MS, DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
};
use ramstore_server::failure_monitor::MAX_MONITOR_MS;
use ramstore_server::{MonitorConfig, SyncMode};

/// The coordinator's failure detector (R§7.2, R§7.3; in `ramstore dev` the servers'
/// pings use the same interval and timeout).
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct DetectorArgs {
    /// How often the coordinator pings each UP server, in milliseconds.
    #[arg(long, default_value_t = DEFAULT_PING_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    pub(crate) ping_interval_ms: u64,
    /// How long a ping may take before it counts as failed, in milliseconds (a
    /// crashed server's refused connection fails at once).
    #[arg(long, default_value_t = DEFAULT_PING_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    pub(crate) ping_timeout_ms: u64,
    /// A suspected server that no path reaches is declared crashed only once it has
    /// answered none of the coordinator's pings for this many milliseconds (at least
    /// the ping interval).
    #[arg(long, default_value_t = DEFAULT_FAILURE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    pub(crate) failure_timeout_ms: u64,
    /// The same when its pings only time out (no refused connection: the process
    /// may be alive but slow), in milliseconds; at least --failure-timeout-ms
    /// counts.
    #[arg(long, default_value_t = DEFAULT_UNRESPONSIVE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_DETECTOR_MS))]
    pub(crate) unresponsive_timeout_ms: u64,
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
pub(crate) struct RecoveryArgs {
    /// Most bytes of log entries one recovery master replays for one crashed
    /// master (tablets above it are split) [default: 512 MiB].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) recovery_partition_bytes: Option<u64>,
    /// Most log entries one recovery master replays for one crashed master
    /// [default: 4000000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) recovery_partition_entries: Option<u64>,
    /// Which masters recover a crashed master's log: anywhere (R§7.4), or
    /// near the data — masters on the crashed master's switch holding most of
    /// its replicas, each segment read from a holder on that switch (C§4.2;
    /// needs servers started with --rack or --switches).
    #[arg(long, value_enum, default_value_t = RecoveryMasters::Anywhere)]
    pub(crate) recovery_masters: RecoveryMasters,
}

/// `--recovery-masters`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecoveryMasters {
    Anywhere,
    Near,
}

/// `--placement` (issue 22).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlacementArg {
    /// Over the whole cluster at random, with refinement (R§7.1).
    Scattered,
    /// One hop from the master where the failure domains allow (C§3.2).
    Proximity,
}

impl From<PlacementArg> for ramstore_server::placement::Placement {
    fn from(p: PlacementArg) -> Self {
        match p {
            PlacementArg::Scattered => Self::Scattered,
            PlacementArg::Proximity => Self::Proximity,
        }
    }
}

/// The failure-domain field a server enlists with (`DOMAIN@SWITCH,…`,
/// `ramstore_wire::location`): `--failure-domain` (or else `--rack`) as the
/// domain, and `--rack` (its ToR switch) and `--switches` as the switches.
pub(crate) fn location_field(
    failure_domain: &str,
    rack: Option<&str>,
    switches: &[String],
) -> Result<String, String> {
    let domain = match (failure_domain, rack) {
        ("", Some(r)) => r,
        (d, _) => d,
    };
    let mut all: Vec<&str> = rack.into_iter().collect();
    all.extend(switches.iter().map(String::as_str));
    let clean = |s: &str| !s.is_empty() && !s.contains(['@', ',']);
    if domain.contains('@') || !all.iter().all(|s| clean(s)) {
        return Err("rack, switch and domain names may not hold '@' or ','".into());
    }
    let field = ramstore_wire::location::location_field(domain, &all);
    parse_failure_domain(&field).map_err(|e| format!("--rack/--switches/--failure-domain: {e}"))
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
pub(crate) struct MonitorArgs {
    /// How often this server pings a random other server, in milliseconds.
    #[arg(long, default_value_t = ramstore_server::failure_monitor::DEFAULT_PING_INTERVAL_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_MONITOR_MS))]
    pub(crate) ping_interval_ms: u64,
    /// How long a ping may take before the server reports the target to the
    /// coordinator, in milliseconds.
    #[arg(long, default_value_t = ramstore_server::failure_monitor::DEFAULT_PING_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(1..=MAX_MONITOR_MS))]
    pub(crate) ping_timeout_ms: u64,
}

/// A storage server's time limits per connection, shared by `ramstore server` and
/// `ramstore dev` so both have the same flags, defaults and help (issue 17:
/// partial frames and idle connections time out).
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct TimeoutArgs {
    /// Milliseconds a request (native frame or Redis command) may take to
    /// arrive once its first byte has, and a reply write may stall, before the
    /// connection is closed: a client sending a byte a second is dropped
    /// (0: never).
    #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_REQUEST_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_CONNECTION_TIMEOUT_MS))]
    pub(crate) request_timeout_ms: u64,
    /// Milliseconds a client connection may sit idle before it is closed, on
    /// the native and Redis ports (0: never; at --max-connections the oldest
    /// idle connection is evicted instead).
    #[arg(long, value_name = "MS", default_value_t = ramstore_server::DEFAULT_IDLE_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(0..=ramstore_server::MAX_CONNECTION_TIMEOUT_MS))]
    pub(crate) idle_timeout_ms: u64,
}

impl From<MonitorArgs> for MonitorConfig {
    fn from(a: MonitorArgs) -> Self {
        MonitorConfig {
            ping_interval_ms: a.ping_interval_ms,
            ping_timeout_ms: a.ping_timeout_ms,
        }
    }
}

/// `--backup-sync`: when a backup acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackupSync {
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

pub(crate) fn parse_store(s: &str) -> Result<StoreSpec, String> {
    s.parse()
}

pub(crate) fn parse_lease_ttl_ms(s: &str) -> Result<u64, String> {
    let ms: u64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of milliseconds"))?;
    ramstore_coordinator::validate_lease_ttl_ms(ms)?;
    Ok(ms)
}

pub(crate) fn parse_failure_domain(s: &str) -> Result<String, String> {
    if ramstore_coordinator::valid_failure_domain(s) {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "at most {} bytes, no spaces or control characters",
            ramstore_coordinator::MAX_FAILURE_DOMAIN_BYTES
        ))
    }
}

pub(crate) fn parse_replica_check_interval(s: &str) -> Result<u64, String> {
    use ramstore_server::replica_manager::{
        MAX_REPLICA_CHECK_INTERVAL_MS as MAX, MIN_REPLICA_CHECK_INTERVAL_MS as MIN,
    };
    match s.parse::<u64>() {
        Ok(ms) if ms == 0 || (MIN..=MAX).contains(&ms) => Ok(ms),
        _ => Err(format!("0 (off) or {MIN} to {MAX} milliseconds")),
    }
}

#[cfg(test)]
mod location_tests {
    use super::location_field;

    #[test]
    fn location_field_rack_is_domain_and_switch() {
        assert_eq!(location_field("", Some("r3"), &[]).as_deref(), Ok("r3@r3"));
        let extra = vec!["l1-2".to_string()];
        assert_eq!(
            location_field("g1", Some("l0-1"), &extra).as_deref(),
            Ok("g1@l0-1,l1-2")
        );
        assert_eq!(location_field("rack-a", None, &[]).as_deref(), Ok("rack-a"));
        assert!(location_field("", Some("a@b"), &[]).is_err());
        assert!(location_field("", Some(&"x".repeat(40)), &[]).is_err());
    }
}
