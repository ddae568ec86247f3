//! Network namespaces for the servers (root only): each server runs in its own
//! namespace (`ip netns`), joined by a veth pair to a bridge in the root namespace
//! whose address serves the coordinators and the clients. Addresses exist only
//! inside this set-up (10.N.0.0/16, N chosen per set-up), so partitions are real
//! packet drops, not process tricks:
//!
//! - partition: nftables rules inside a server's namespace drop every packet that
//!   does not come from (or go to) the allowed peers — nobody (a full partition of
//!   one server) or the other members of a group;
//! - packet loss: `numgen random mod 100 < N drop` on its input and output;
//! - heal: the rules' table is deleted.
//!
//! Everything is removed on drop (namespaces take their veth ends with them).

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::HarnessError;

/// Distinguishes set-ups made by one process (the chaos and partition tests may
/// run at once).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// nftables table the harness puts its rules in, inside a server's namespace.
const TABLE: &str = "ramstore_harness";

/// The bridge, the namespaces and their addresses.
pub struct Netns {
    prefix: String,
    bridge: String,
    subnet: u8,
    /// One per server.
    namespaces: Vec<String>,
    /// The client workers' namespace, so a server can be cut off from the cluster
    /// while clients still reach it.
    clients: String,
}

fn run(cmd: &str, args: &[&str]) -> Result<(), HarnessError> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| HarnessError::Netns(format!("{cmd}: {e}")))?;
    if !out.status.success() {
        return Err(HarnessError::Netns(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Whether namespaces can be used here: root, with `ip` and `nft` installed, and
/// allowed to make a namespace.
pub fn available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root".into());
    }
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            return Err(format!(
                "`{tool}` is not installed (apt-get install -y iproute2 nftables)"
            ));
        }
    }
    // Root inside a container may still lack the right to make namespaces.
    let probe = format!("rprobe{}", std::process::id() % 100_000);
    run("ip", &["netns", "add", &probe]).map_err(|e| format!("cannot make a namespace: {e}"))?;
    let _ = run("ip", &["netns", "del", &probe]);
    Ok(())
}

impl Netns {
    /// A bridge and `n` namespaces, each with one address on the bridge's subnet.
    pub fn create(n: usize) -> Result<Netns, HarnessError> {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // Interface names are at most 15 bytes: "r" + 5 digits + 1 digit + kind + index.
        let prefix = format!("r{:05}{}", pid % 100_000, k % 10);
        let subnet = u8::try_from(100 + (pid + k) % 150).unwrap_or(100);
        let mut me = Netns {
            bridge: format!("{prefix}b"),
            clients: format!("{prefix}c"),
            prefix,
            subnet,
            namespaces: Vec::new(),
        };
        let host = format!("{}/16", me.host_ip());
        run("ip", &["link", "add", &me.bridge, "type", "bridge"])?;
        run("ip", &["addr", "add", &host, "dev", &me.bridge])?;
        run("ip", &["link", "set", &me.bridge, "up"])?;
        for i in 0..n {
            let ns = format!("{}n{i}", me.prefix);
            me.join(&ns, &i.to_string(), &me.ip(i))?;
            me.namespaces.push(ns);
        }
        let clients = me.clients.clone();
        me.join(&clients, "c", &me.client_ip())?;
        Ok(me)
    }

    /// Makes namespace `ns` with a veth pair (`tag` names its ends) on the bridge
    /// and address `ip`.
    fn join(&self, ns: &str, tag: &str, ip: &str) -> Result<(), HarnessError> {
        run("ip", &["netns", "add", ns])?;
        let (h, p) = (
            format!("{}h{tag}", self.prefix),
            format!("{}p{tag}", self.prefix),
        );
        run(
            "ip",
            &["link", "add", &h, "type", "veth", "peer", "name", &p],
        )?;
        run("ip", &["link", "set", &h, "master", &self.bridge])?;
        run("ip", &["link", "set", &h, "up"])?;
        run("ip", &["link", "set", &p, "netns", ns])?;
        let addr = format!("{ip}/16");
        run("ip", &["-n", ns, "addr", "add", &addr, "dev", &p])?;
        run("ip", &["-n", ns, "link", "set", &p, "up"])?;
        run("ip", &["-n", ns, "link", "set", "lo", "up"])
    }

    /// The client workers' address (inside their namespace).
    pub fn client_ip(&self) -> String {
        format!("10.{}.0.5", self.subnet)
    }

    /// The client workers' namespace.
    pub fn clients_namespace(&self) -> &str {
        &self.clients
    }

    /// The root namespace's address on the bridge (coordinators, clients).
    pub fn host_ip(&self) -> String {
        format!("10.{}.0.1", self.subnet)
    }

    /// Server `i`'s address (inside its namespace).
    pub fn ip(&self, i: usize) -> String {
        format!("10.{}.{}.{}", self.subnet, 1 + i / 200, 10 + i % 200)
    }

    /// Server `i`'s namespace.
    pub fn namespace(&self, i: usize) -> &str {
        &self.namespaces[i]
    }

    fn apply(&self, i: usize, rules: &str) -> Result<(), HarnessError> {
        self.heal(i)?;
        let script = format!(
            "table inet {TABLE} {{\n chain input {{ type filter hook input priority 0; policy accept;\n{rules}\n }}\n chain output {{ type filter hook output priority 0; policy accept;\n{}\n }}\n}}\n",
            rules.replace("saddr", "daddr").replace("iifname", "oifname")
        );
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.namespaces[i], "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| HarnessError::Netns(format!("nft: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(script.as_bytes())
                .map_err(|e| HarnessError::Netns(format!("nft: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| HarnessError::Netns(format!("nft: {e}")))?;
        if !out.status.success() {
            return Err(HarnessError::Netns(format!(
                "nft in {}: {}\n{script}",
                self.namespaces[i],
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Cuts server `i` off from every address but `allowed` (other servers'
    /// [`Netns::ip`], or [`Netns::client_ip`]).
    pub fn partition(&self, i: usize, allowed: &[String]) -> Result<(), HarnessError> {
        let rule = if allowed.is_empty() {
            "  iifname != \"lo\" drop".to_string()
        } else {
            format!(
                "  iifname != \"lo\" ip saddr != {{ {} }} drop",
                allowed.join(", ")
            )
        };
        self.apply(i, &rule)
    }

    /// Drops `percent`% of server `i`'s packets, each way, at random.
    pub fn packet_loss(&self, i: usize, percent: u8) -> Result<(), HarnessError> {
        self.apply(
            i,
            &format!("  iifname != \"lo\" numgen random mod 100 < {percent} drop"),
        )
    }

    /// Removes server `i`'s rules (idempotent).
    pub fn heal(&self, i: usize) -> Result<(), HarnessError> {
        // Deleting a table that is not there fails; that is the healed state.
        let _ = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespaces[i],
                "nft",
                "delete",
                "table",
                "inet",
                TABLE,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        Ok(())
    }
}

/// Deletes every namespace and link named for process `pid` ([`Netns::create`]'s
/// prefixes), e.g. after the process was interrupted before its `Drop` ran.
pub fn remove_stale_for_pid(pid: u32) {
    let prefix = format!("r{:05}", pid % 100_000);
    let listed = |args: &[&str]| -> Vec<String> {
        Command::new("ip")
            .args(args)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                // `ip netns list`: "NAME (id: N)"; `ip -o link`: "N: NAME: ..." or
                // "N: NAME@peer: ...".
                let name = if args[0] == "netns" {
                    l.split_whitespace().next()?
                } else {
                    l.split(": ").nth(1)?.split('@').next()?
                };
                name.starts_with(&prefix).then(|| name.to_string())
            })
            .collect()
    };
    for ns in listed(&["netns", "list"]) {
        let _ = run("ip", &["netns", "del", &ns]);
    }
    for link in listed(&["-o", "link", "show"]) {
        let _ = run("ip", &["link", "del", &link]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for ns in self.namespaces.iter().chain([&self.clients]) {
            let _ = run("ip", &["netns", "del", ns]);
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
    }
}
