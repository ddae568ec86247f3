//! `ramstore-pingpong`: the TCP round-trip floor of a machine.
//!
//! `server` echoes every byte it receives, on plain blocking sockets with
//! TCP_NODELAY and one thread per connection; `client` sends a `--size`-byte message,
//! waits for all of it to come back, and repeats: after a warm-up, `--count` round
//! trips are timed one by one and their percentiles printed.
//!
//! Both ends block in `read` like a typical RPC client and server would: no busy
//! polling, no spinning. Any TCP RPC (ramstore's included) pays at least this much
//! per request on the same machine, so `ramstore bench` latencies are read against it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ramstore-pingpong",
    version,
    about = "TCP ping-pong over blocking sockets: the round-trip floor for any TCP RPC"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Echo everything received, one thread per connection.
    Server {
        #[arg(long, default_value = "127.0.0.1:7100")]
        listen: String,
    },
    /// Time round trips against a server.
    Client {
        #[arg(long, default_value = "127.0.0.1:7100")]
        connect: String,
        /// Round trips timed (after the warm-up).
        #[arg(long, default_value_t = 100_000)]
        count: usize,
        /// Round trips before timing starts (not measured).
        #[arg(long, default_value_t = 10_000)]
        warmup: usize,
        /// Bytes per message.
        #[arg(long, default_value_t = 100)]
        size: usize,
        /// Also write the results here as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Server { listen } => server(&listen),
        Command::Client {
            connect,
            count,
            warmup,
            size,
            json,
        } => client(&connect, count, warmup, size, json),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn server(listen: &str) -> Result<(), String> {
    let listener = TcpListener::bind(listen).map_err(|e| format!("binding {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    println!("ramstore-pingpong server listening on {addr}");
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                std::thread::spawn(move || echo(stream));
            }
            Err(e) => eprintln!("accept: {e}"),
        }
    }
    Ok(())
}

/// Sends back whatever arrives until the peer closes.
fn echo(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stream.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

fn client(
    addr: &str,
    count: usize,
    warmup: usize,
    size: usize,
    json: Option<PathBuf>,
) -> Result<(), String> {
    if count == 0 || size == 0 {
        return Err("--count and --size must be at least 1".into());
    }
    let mut stream = TcpStream::connect(addr).map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let message: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut reply = vec![0u8; size];
    let mut round_trip = |stream: &mut TcpStream| -> Result<(), String> {
        stream
            .write_all(&message)
            .and_then(|()| stream.read_exact(&mut reply))
            .map_err(|e| format!("round trip to {addr}: {e}"))
    };
    for _ in 0..warmup {
        round_trip(&mut stream)?;
    }
    let mut ns = Vec::with_capacity(count);
    let started = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        round_trip(&mut stream)?;
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let elapsed = started.elapsed();
    if reply != message {
        return Err("the echo did not match what was sent".into());
    }
    ns.sort_unstable();
    let pct = |q: f64| -> f64 {
        let rank = ((q * ns.len() as f64).ceil() as usize).clamp(1, ns.len());
        ns[rank - 1] as f64 / 1000.0
    };
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0;
    let (p50, p90, p99, p999) = (pct(0.50), pct(0.90), pct(0.99), pct(0.999));
    let max = *ns.last().unwrap_or(&0) as f64 / 1000.0;
    let per_sec = count as f64 / elapsed.as_secs_f64();
    println!(
        "{:<10} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "PINGPONG", "SIZE", "COUNT", "RT/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs"
    );
    println!(
        "{:<10} {size:>6} {count:>10} {per_sec:>9.0} {p50:>9.1} {p90:>9.1} {p99:>9.1} {p999:>9.1} {max:>9.1}",
        "tcp"
    );
    if let Some(path) = json {
        let text = format!(
            "{{\n  \"workload\": \"pingpong\",\n  \"clients\": 1,\n  \"value_size\": {size},\n  \
             \"count\": {count},\n  \"ops_per_sec\": {per_sec:.1},\n  \"p50_us\": {p50:.3},\n  \
             \"p90_us\": {p90:.3},\n  \"p99_us\": {p99:.3},\n  \"p999_us\": {p999:.3},\n  \
             \"max_us\": {max:.3},\n  \"mean_us\": {mean:.3},\n  \"machine\": {}\n}}\n",
            machine_json()
        );
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// nproc, CPU model, kernel and load average, as a JSON object.
fn machine_json() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let model = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "{{\"nproc\": {nproc}, \"model\": \"{}\", \"kernel\": \"{}\", \"loadavg\": \"{}\"}}",
        escape(&model),
        escape(read("/proc/sys/kernel/osrelease").trim()),
        escape(read("/proc/loadavg").trim())
    )
}

fn escape(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}
