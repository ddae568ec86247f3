//! `ramstore tx` (issue 21): a script from stdin run as one transaction against
//! real servers; its output in each format, an abort with nothing applied, and a
//! malformed script refused before the cluster is contacted.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{ramstore_bin, CliOutput, Cluster};

/// Runs `ramstore tx ARGS --coordinator ADDR` with `script` on stdin.
fn tx(cluster: &Cluster, args: &[&str], script: &str) -> CliOutput {
    let mut child = Command::new(ramstore_bin())
        .arg("tx")
        .args(args)
        .args(["--coordinator", cluster.addr(), "--timeout", "20"])
        .env_remove("RAMSTORE_COORDINATOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("ramstore tx starts");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(script.as_bytes())
        .expect("script written");
    let out = child.wait_with_output().expect("ramstore tx ends");
    CliOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn tx_commits_a_script_across_servers_and_prints_its_reads() {
    let cluster = Cluster::start(3);
    cluster.cli(&["create-table", "bank", "--span", "3"]).ok();
    cluster.cli(&["put", "bank", "alice", "100"]).ok();
    cluster.cli(&["put", "bank", "bob", "5"]).ok();
    cluster.cli(&["put", "bank", "carol", "x"]).ok();
    let script = "# move 30 from alice to bob\n\
                  incr bank alice -30\n\
                  incr bank bob 30\n\
                  get bank alice\n\
                  put bank note moved 30\n\
                  get bank note\n\
                  get bank nobody\n\
                  del bank carol\n";
    let out = tx(&cluster, &[], script);
    assert_eq!(
        out.ok(),
        "bank\talice\t70\nbank\tbob\t35\nbank\talice\t70\nbank\tnote\tmoved 30\n\
         bank\tnobody\t(not found)\ncommitted\n"
    );
    assert_eq!(cluster.cli(&["get", "bank", "bob"]).ok(), "35\n");
    assert_eq!(cluster.cli(&["get", "bank", "note"]).ok(), "moved 30\n");
    let gone = cluster.cli(&["get", "bank", "carol"]);
    assert!(gone.one_line_error().contains("not found"), "{gone:?}");
}

#[test]
fn tx_json_lists_results_and_attempts() {
    let cluster = Cluster::start(1);
    cluster.cli(&["create-table", "t"]).ok();
    let out = tx(&cluster, &["--json"], "put t k v\nget t k\nincr t n 2\n");
    let v: serde_json::Value = serde_json::from_str(out.ok()).expect("json");
    assert_eq!(v["committed"], true);
    assert_eq!(v["attempts"], 1);
    assert_eq!(v["results"][0]["op"], "get");
    assert_eq!(v["results"][0]["value"], "v");
    assert_eq!(v["results"][1]["op"], "incr");
    assert_eq!(v["results"][1]["value"], 2);
}

#[test]
fn tx_refuses_a_malformed_script_with_usage_exit_code() {
    let cluster = Cluster::start(1);
    cluster.cli(&["create-table", "t"]).ok();
    let out = tx(&cluster, &[], "put t k v\nfrob t k\n");
    let line = out.error_line(2);
    assert!(line.contains("line 2"), "{line}");
    // Nothing of the script ran.
    assert!(cluster
        .cli(&["get", "t", "k"])
        .one_line_error()
        .contains("not found"));
}

#[test]
fn tx_fails_without_applying_anything_when_an_incr_is_not_numeric() {
    let cluster = Cluster::start(2);
    cluster.cli(&["create-table", "t", "--span", "2"]).ok();
    cluster.cli(&["put", "t", "word", "hello"]).ok();
    let out = tx(&cluster, &[], "put t a 1\nincr t word\n");
    assert!(
        out.one_line_error().contains("nothing was applied"),
        "{out:?}"
    );
    assert!(cluster
        .cli(&["get", "t", "a"])
        .one_line_error()
        .contains("not found"));
}

#[test]
fn tx_unknown_table_is_a_clear_error() {
    let cluster = Cluster::start(1);
    let out = tx(&cluster, &[], "get nosuch k\n");
    assert!(
        out.one_line_error().contains("unknown table 'nosuch'"),
        "{out:?}"
    );
}
