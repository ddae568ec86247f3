//! `ramstore-checker HISTORY.jsonl [--at-least-once]`: checks a history saved by
//! the reliability harness (one JSON operation a line) and prints the report; exits
//! 0 when clean, 1 on a violation or an undecided key, 2 on bad input. Duplicates of
//! retried mutations are violations unless `--at-least-once` (a history of clients
//! without exactly-once RPCs); `--exactly-once`, the default, is still accepted.

use std::process::ExitCode;

use anyhow::Context;
use ramstore_checker::{check, CheckOptions, History};

fn run() -> anyhow::Result<bool> {
    let mut path = None;
    let mut options = CheckOptions::default();
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--exactly-once" => options.at_least_once = false,
            "--at-least-once" => options.at_least_once = true,
            "-h" | "--help" => {
                println!("usage: ramstore-checker HISTORY.jsonl [--at-least-once]");
                return Ok(true);
            }
            _ if path.is_none() => path = Some(arg),
            _ => anyhow::bail!("unexpected argument {arg:?}"),
        }
    }
    let path = path.context("usage: ramstore-checker HISTORY.jsonl [--at-least-once]")?;
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let history = History::read_jsonl(&text).with_context(|| format!("parsing {path}"))?;
    let report = check(&history, &options);
    print!("{report}");
    Ok(report.is_clean())
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
