//! The harness's own parts: error sorting for the checker, the delaying proxy, and
//! (as root) network namespace partitions.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use ramstore_checker::{Call, Outcome, Refusal, RejectRules};
use ramstore_client::ClientError;
use ramstore_harness::netns::{self, Netns};
use ramstore_harness::proxy::DelayProxy;
use ramstore_harness::workload::outcome_of_error;

#[test]
fn outcome_of_error_sorts_refusals_as_definite_and_failures_as_unknown() {
    let write = Call::Write {
        value: b"v".to_vec(),
        rules: RejectRules::default(),
    };
    assert_eq!(
        outcome_of_error(&Call::Read, &ClientError::ObjectDoesntExist),
        Outcome::NotFound
    );
    assert_eq!(
        outcome_of_error(&write, &ClientError::ObjectDoesntExist),
        Outcome::Refused(Refusal::DoesntExist)
    );
    assert_eq!(
        outcome_of_error(&write, &ClientError::WrongVersion { current: 9 }),
        Outcome::Refused(Refusal::WrongVersion { current: 9 })
    );
    let timeout = ClientError::DeadlineExceeded {
        elapsed: Duration::from_secs(1),
        last_attempt: "no response".into(),
    };
    assert!(!outcome_of_error(&write, &timeout).is_definite());
    assert!(!outcome_of_error(&Call::Read, &ClientError::Internal("x".into())).is_definite());
}

/// An echo server on a free port; returns its address.
fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            thread::spawn(move || {
                let mut buf = [0u8; 1024];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 || conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    addr
}

fn round_trip(addr: &str, msg: &[u8]) -> (Vec<u8>, Duration) {
    let mut s = TcpStream::connect(addr).expect("connect through the proxy");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let start = Instant::now();
    s.write_all(msg).expect("write");
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).expect("echo");
    (got, start.elapsed())
}

#[test]
fn proxy_forwards_in_order_and_delays_both_ways_when_told() {
    let target = echo_server();
    let proxy = DelayProxy::start("127.0.0.1:0", &target, None).expect("proxy starts");
    let (got, _) = round_trip(proxy.addr(), b"hello");
    assert_eq!(got, b"hello");

    // 100 ms each way: a round trip takes at least 200 ms (a lower bound the proxy
    // must guarantee, not a speed goal).
    proxy.set_delay(Duration::from_millis(100), Duration::ZERO);
    let (got, took) = round_trip(proxy.addr(), b"slow and in order");
    assert_eq!(got, b"slow and in order");
    assert!(took >= Duration::from_millis(200), "took {took:?}");

    proxy.set_delay(Duration::ZERO, Duration::ZERO);
    let (got, _) = round_trip(proxy.addr(), b"healed");
    assert_eq!(got, b"healed");
}

#[test]
fn netns_partition_drops_traffic_until_healed() {
    if let Err(why) = netns::available() {
        eprintln!("needs root with ip and nft ({why}); nothing checked");
        return;
    }
    let ns = Netns::create(2).expect("namespaces");
    // A listener inside server 0's namespace (the proxy's accept thread enters it
    // before binding); a connection from the root namespace crosses the bridge.
    let target = format!("{}:7300", ns.ip(0));
    let _listener =
        DelayProxy::start(&target, "127.0.0.1:9", Some(ns.namespace(0))).expect("listener");
    let reachable = |timeout_ms| {
        TcpStream::connect_timeout(
            &target.parse().expect("an address"),
            Duration::from_millis(timeout_ms),
        )
        .is_ok()
    };
    assert!(
        reachable(2_000),
        "the namespace is reachable over the bridge"
    );
    ns.partition(0, &[]).expect("partition");
    assert!(!reachable(300), "a partitioned namespace answered");
    ns.heal(0).expect("heal");
    assert!(reachable(2_000), "the healed namespace is reachable again");
}

/// Regression (CI, session 28): a test that saw a process exit read its transcript
/// before the reader threads had drained the pipes, so the process's last error
/// line was missing. 200 KB of stderr overflows the pipe, so the last line is still
/// unread when the process ends.
#[test]
fn transcript_after_exit_holds_everything_the_process_wrote() {
    use std::path::Path;

    use ramstore_harness::process::{Proc, Spawn};

    let script = "head -c 200000 /dev/zero | tr '\\0' x >&2; echo >&2; \
                  echo 'error: the last line' >&2; echo out-last; exit 3";
    let args = ["-c".to_string(), script.to_string()];
    for _ in 0..20 {
        let mut proc = Proc::start(Spawn {
            name: "writer",
            program: Path::new("/bin/sh"),
            args: &args,
            envs: &[],
            netns: None,
            log: None,
        })
        .expect("spawn /bin/sh");
        let status = proc
            .wait_timeout(Duration::from_secs(30))
            .expect("the writer ends");
        assert_eq!(status.code(), Some(3));
        let transcript = proc.transcript();
        assert!(
            transcript.contains("error: the last line"),
            "stderr drained"
        );
        assert!(proc.stdout_lines().iter().any(|l| l == "out-last"));
    }
}

/// Regression (CI, stop 28): a port picked by binding port 0 was taken by another
/// connection's source port before the proxy bound it. Ports handed out now lie
/// below the kernel's ephemeral range and are never handed out twice in a process.
#[test]
fn free_port_hands_out_distinct_ports_below_the_ephemeral_range() {
    let ephemeral_start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let port = ramstore_harness::local::free_port();
        assert!(
            port < ephemeral_start,
            "port {port} is in the ephemeral range"
        );
        assert!(seen.insert(port), "port {port} handed out twice");
    }
    // The run's ports were free when handed out (try_free_ports binds each); a
    // second bind here would race any other process on the machine (CI, stop 35:
    // "Address already in use"), so the test checks what the harness promises:
    // the run is below the ephemeral range and no port of it is handed out twice.
    let first = ramstore_harness::local::free_port_run(3);
    let run: Vec<u16> = (first..=first + 3).collect();
    for &p in &run {
        assert!(
            p < ephemeral_start,
            "run port {p} is in the ephemeral range"
        );
        assert!(seen.insert(p), "run port {p} was handed out before");
    }
    for _ in 0..200 {
        let port = ramstore_harness::local::free_port();
        assert!(seen.insert(port), "port {port} handed out twice");
    }
}
