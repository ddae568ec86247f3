//! Scenario `resp-replay`: one workload of L Table 1 replayed through the Redis
//! protocol by one pipelined client (SET and DEL), against any server that speaks
//! it — ramstore's front end or Redis itself. `scripts/bench-memory-vs-redis`
//! starts the servers, runs this once per workload and server, and reads each
//! server's peak RSS.
//!
//! Keys are fresh and 16 bytes long (the object's counter in hex), so every SET
//! creates an object and the live key + value bytes are known exactly; values are
//! the generator's sizes. Replies are read a batch at a time: the client writes up
//! to `--pipeline` commands, then reads as many replies, so the server never holds
//! more than one batch of unread replies.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;

use crate::workload::{self, Executor, Generator, LiveObj, Scale};

const MIB: u64 = 1 << 20;
/// Bytes of every key sent.
const KEY_BYTES: usize = 16;

/// `resp-replay`: replay one workload over RESP.
#[derive(Debug, clap::Args)]
pub struct RespReplayArgs {
    /// The server, HOST:PORT.
    #[arg(long)]
    pub addr: String,
    /// The workload (W1–W8).
    #[arg(long)]
    pub workload: String,
    /// Most live key + value bytes at any time, in MiB.
    #[arg(long, default_value_t = 128)]
    pub live_mib: u64,
    /// Key + value bytes written in each allocation phase, in MiB.
    #[arg(long, default_value_t = 640)]
    pub alloc_mib: u64,
    /// Commands sent before their replies are read.
    #[arg(long, default_value_t = 256)]
    pub pipeline: usize,
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
}

/// What a replay did, printed as JSON on stdout.
#[derive(Debug, Default, Serialize)]
pub struct RespReplayReport {
    pub workload: String,
    pub sets: u64,
    pub dels: u64,
    /// Live key + value bytes at the end, as sent.
    pub live_kv_bytes: u64,
    /// Most live key + value bytes at any time, as sent.
    pub peak_live_kv_bytes: u64,
    pub seconds: f64,
}

/// A pipelined RESP connection that checks every reply.
struct RespExecutor {
    out: Vec<u8>,
    pending: usize,
    pipeline: usize,
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    line: String,
    live_kv: u64,
    report: RespReplayReport,
}

impl RespExecutor {
    fn key(id: u32) -> [u8; KEY_BYTES] {
        let mut k = [0u8; KEY_BYTES];
        let hex = format!("{:016x}", u64::from(id));
        k.copy_from_slice(hex.as_bytes());
        k
    }

    fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<()> {
        write!(self.out, "*{}\r\n", args.len())?;
        for a in args {
            write!(self.out, "${}\r\n", a.len())?;
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
        self.pending += 1;
        if self.pending >= self.pipeline {
            self.flush()?;
        }
        Ok(())
    }

    /// Sends the batch and reads every reply; any error reply ends the run.
    fn flush(&mut self) -> anyhow::Result<()> {
        self.writer.write_all(&self.out).context("send")?;
        self.out.clear();
        for _ in 0..self.pending {
            self.line.clear();
            self.reader.read_line(&mut self.line).context("reply")?;
            match self.line.as_bytes().first() {
                Some(b'+') | Some(b':') => {}
                Some(b'$') => {
                    // A bulk reply (not expected from SET/DEL): skip its body.
                    let n: i64 = self.line[1..].trim().parse().unwrap_or(-1);
                    if n >= 0 {
                        let mut body = vec![0u8; n as usize + 2];
                        self.reader.read_exact(&mut body)?;
                    }
                }
                Some(b'-') => bail!("the server answered {}", self.line.trim_end()),
                _ => bail!("connection closed or garbled reply {:?}", self.line),
            }
        }
        self.pending = 0;
        Ok(())
    }
}

impl Executor for RespExecutor {
    type Error = anyhow::Error;

    fn write(&mut self, obj: &mut LiveObj, _key: &[u8], value: &[u8]) -> anyhow::Result<()> {
        let key = Self::key(obj.id);
        self.command(&[b"SET", &key, value])?;
        self.live_kv += (KEY_BYTES + value.len()) as u64;
        self.report.peak_live_kv_bytes = self.report.peak_live_kv_bytes.max(self.live_kv);
        self.report.sets += 1;
        Ok(())
    }

    fn delete(&mut self, obj: &LiveObj, _key: &[u8]) -> anyhow::Result<()> {
        let key = Self::key(obj.id);
        self.command(&[b"DEL", &key])?;
        self.live_kv -= (KEY_BYTES + obj.value_len as usize) as u64;
        self.report.dels += 1;
        Ok(())
    }
}

pub fn run(args: &RespReplayArgs) -> anyhow::Result<()> {
    let spec = workload::find(&args.workload)
        .with_context(|| format!("unknown workload {}", args.workload))?;
    let stream =
        TcpStream::connect(&args.addr).with_context(|| format!("connect {}", args.addr))?;
    stream.set_nodelay(true)?;
    let mut exec = RespExecutor {
        out: Vec::with_capacity(1 << 20),
        pending: 0,
        pipeline: args.pipeline.max(1),
        writer: stream.try_clone()?,
        reader: BufReader::with_capacity(1 << 16, stream),
        line: String::new(),
        live_kv: 0,
        report: RespReplayReport {
            workload: spec.name.to_string(),
            ..Default::default()
        },
    };
    let started = Instant::now();
    let mut live = Vec::new();
    let scale = Scale {
        live_target: args.live_mib * MIB,
        alloc_bytes: args.alloc_mib * MIB,
        seed: args.seed,
        key_bytes: Some(KEY_BYTES),
    };
    Generator::new(spec, args.seed, &mut live).run(spec, scale, &mut exec)?;
    exec.flush()?;
    exec.report.live_kv_bytes = exec.live_kv;
    exec.report.seconds = started.elapsed().as_secs_f64();
    println!("{}", serde_json::to_string(&exec.report)?);
    Ok(())
}
