//! Reaching the cluster from the shell, and the exit codes of every command.
//!
//! Exit codes (documented in docs/operations.md, "The command line"):
//! - 0: done;
//! - 1: refused or not found (no such table or object, a conditional write refused,
//!   too large, out of memory, a process that cannot start, …);
//! - 2: usage (a malformed command line or config file);
//! - 3: unreachable (the coordinator or a server cannot be reached, or did not
//!   answer within `--timeout`);
//! - 141 (128 + SIGPIPE), quietly: standard output was closed (`… | head -1`).
//!
//! When the coordinator cannot be reached the command says why, each cause in its
//! own words: the host name does not resolve, nothing listens on the port (refused),
//! no answer in time (timeout), or it accepted the connection and closed it unanswered
//! (busy: a coordinator at its connection limit does that).

use std::fmt;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use ramstore_client::{BlockingClient, ClientError, ClientOptions};

pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_UNREACHABLE: i32 = 3;
/// What a shell reports for a process killed by SIGPIPE (128 + 13), as coreutils'
/// `seq 1000000 | head -1` under `set -o pipefail`.
pub const EXIT_CLOSED_PIPE: i32 = 141;

/// How long the diagnosis of an unreachable coordinator waits for a TCP connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// An error with its own exit code (anything else exits 1).
#[derive(Debug)]
pub enum Exit {
    /// A malformed command line or address: exit 2.
    Usage(String),
    /// The cluster cannot be reached: exit 3.
    Unreachable(String),
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exit::Usage(m) | Exit::Unreachable(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Exit {}

/// The exit code for a command that failed with `e`.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    if crate::output::is_broken_pipe(e) {
        return EXIT_CLOSED_PIPE;
    }
    for cause in e.chain() {
        if let Some(exit) = cause.downcast_ref::<Exit>() {
            return match exit {
                Exit::Usage(_) => EXIT_USAGE,
                Exit::Unreachable(_) => EXIT_UNREACHABLE,
            };
        }
        if cause.downcast_ref::<crate::config::ConfigError>().is_some() {
            return EXIT_USAGE;
        }
        if let Some(ClientError::CoordinatorUnreachable(_) | ClientError::DeadlineExceeded { .. }) =
            cause.downcast_ref::<ClientError>()
        {
            return EXIT_UNREACHABLE;
        }
    }
    EXIT_FAILURE
}

/// Connects to the coordinator(s) at `addrs` (comma-separated), retrying for at most
/// `timeout`, sending mutations as exactly-once RPCs if `exactly_once` (RIFL); if
/// that fails, says why for each address.
pub fn connect(
    addrs: &str,
    timeout: Duration,
    exactly_once: bool,
) -> anyhow::Result<BlockingClient> {
    let list: Vec<&str> = addrs
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .collect();
    if list.is_empty() {
        return Err(Exit::Usage("--coordinator is empty (give HOST:PORT)".into()).into());
    }
    for addr in &list {
        check_host_port(addr).map_err(Exit::Usage)?;
    }
    let options = ClientOptions {
        operation_deadline: timeout,
        exactly_once,
        ..ClientOptions::new(addrs.to_string())
    };
    match BlockingClient::connect(options) {
        Ok(client) => Ok(client),
        Err(
            e @ (ClientError::CoordinatorUnreachable(_) | ClientError::DeadlineExceeded { .. }),
        ) => {
            let why: Vec<String> = list
                .iter()
                .map(|addr| format!("cannot reach coordinator at {addr}: {}", diagnose(addr, &e)))
                .collect();
            Err(Exit::Unreachable(why.join("; ")).into())
        }
        Err(e) => Err(anyhow::anyhow!(
            "cannot use the coordinator at {addrs}: {e}"
        )),
    }
}

/// `HOST:PORT` with a port that is a number (1–65535); `[V6]:PORT` too.
fn check_host_port(addr: &str) -> Result<(), String> {
    let example = "e.g. 127.0.0.1:7000";
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(format!(
            "coordinator address '{addr}' has no port ({example})"
        ));
    };
    if host.is_empty() {
        return Err(format!(
            "coordinator address '{addr}' has no host ({example})"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!(
            "coordinator address '{addr}' has no valid port: '{port}' ({example})"
        )),
    }
}

/// Why `addr` could not be used, found by trying it again: does the name resolve,
/// does a TCP connection open, and what the client saw after that (`seen`).
fn diagnose(addr: &str, seen: &ClientError) -> String {
    let resolved = match addr.to_socket_addrs() {
        Ok(mut a) => a.next(),
        Err(e) => {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            return format!("cannot resolve the host name '{host}' ({e}); check the address");
        }
    };
    let Some(socket) = resolved else {
        return "the host name resolves to no address; check the address".into();
    };
    let hint = "is `ramstore dev` running? set --coordinator or RAMSTORE_COORDINATOR";
    match TcpStream::connect_timeout(&socket, PROBE_TIMEOUT) {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            format!("connection refused: nothing listens on {socket} ({hint})")
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) =>
        {
            format!(
                "timed out: no answer to a connection within {}s (host down, or a firewall \
                 drops the packets?)",
                PROBE_TIMEOUT.as_secs()
            )
        }
        Err(e) => format!("cannot connect to {socket}: {e}"),
        Ok(_) => {
            let text = seen.to_string();
            if text.contains("closed") {
                "busy: it accepted the connection and closed it without answering (a \
                 coordinator at its connection limit does; try again later)"
                    .into()
            } else {
                "timed out: it accepted the connection but did not answer in time (stuck, \
                 or not a ramstore coordinator?)"
                    .into()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_host_port_cases() {
        assert!(check_host_port("127.0.0.1:7000").is_ok());
        assert!(check_host_port("localhost:1").is_ok());
        assert!(check_host_port("[::1]:7000").is_ok());
        assert!(check_host_port("127.0.0.1")
            .unwrap_err()
            .contains("has no port"));
        assert!(check_host_port(":7000")
            .unwrap_err()
            .contains("has no host"));
        assert!(check_host_port("h:0")
            .unwrap_err()
            .contains("no valid port"));
        assert!(check_host_port("h:x")
            .unwrap_err()
            .contains("no valid port"));
        assert!(check_host_port("h:70000")
            .unwrap_err()
            .contains("no valid port"));
    }

    #[test]
    fn exit_code_by_cause() {
        let code = |e: anyhow::Error| exit_code(&e);
        assert_eq!(code(anyhow::anyhow!("not found")), EXIT_FAILURE);
        assert_eq!(code(Exit::Usage("u".into()).into()), EXIT_USAGE);
        assert_eq!(
            code(anyhow::Error::from(Exit::Unreachable("x".into())).context("c")),
            EXIT_UNREACHABLE
        );
        assert_eq!(
            code(ClientError::CoordinatorUnreachable("x".into()).into()),
            EXIT_UNREACHABLE
        );
        assert_eq!(code(ClientError::ObjectDoesntExist.into()), EXIT_FAILURE);
        assert_eq!(
            code(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into()),
            EXIT_CLOSED_PIPE
        );
    }
}
