//! Where simulated servers sit in the network (issue 22): flat (today's runs),
//! a two-level tree of racks behind ToR switches, or a BCube(n, 1) whose
//! servers each hang off two switches (C§2.2, §3). Each host's place becomes
//! the failure-domain field it enlists with (`DOMAIN@SWITCH,…`,
//! `ramstore_wire::location`), so the placement and recovery code the
//! simulator runs sees the topology exactly as real servers' `--rack` gives it.
//!
//! Hops: two servers sharing a switch are one hop apart (C§3.2's one-hop
//! neighbours); any other pair is more than one hop apart (ToR → aggregation →
//! ToR in a tree; through a relay server in BCube). The recovery-traffic
//! experiment counts bytes by that distinction only.

use ramstore_wire::location::location_field;

/// Why a topology could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("cannot read the topology file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("the topology file is not TOML: {0}")]
    Toml(String),
    #[error("bad topology: {0}")]
    Bad(String),
}

/// One host's place: its failure domain and the switches it is attached to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPlace {
    pub domain: String,
    pub switches: Vec<String>,
}

/// Racks of a tree when not given: racks of about 10 servers, and at least 4
/// so that R = 3 replicas and their master can each have a rack of their own
/// (scattered placement never shares one, R§7.1).
pub fn default_racks(servers: usize) -> usize {
    servers.div_ceil(10).max(4).min(servers.max(1))
}

/// How far apart two hosts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hops {
    /// The same host (a loopback copy).
    Local,
    /// Sharing a switch (C§3.2).
    One,
    /// Crossing more than one switch.
    More,
}

/// The hosts' places (see the module documentation); empty: flat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    hosts: Vec<HostPlace>,
    /// What it is, for tables: "flat", "tree(10 racks)", "bcube(10,1)", "file".
    pub name: String,
}

impl Topology {
    /// No topology: every server its own domain, no switches named, all one
    /// hop apart (one switch) — the runs before issue 22, traces unchanged.
    pub fn flat() -> Self {
        Self {
            hosts: Vec::new(),
            name: "flat".into(),
        }
    }

    /// `servers` hosts in `racks` racks of consecutive hosts (sizes differ by
    /// at most one); rack r is failure domain `r{r}` behind ToR `t{r}`.
    pub fn tree(servers: usize, racks: usize) -> Result<Self, TopologyError> {
        if racks == 0 || racks > servers {
            return Err(TopologyError::Bad(format!(
                "{racks} racks for {servers} servers"
            )));
        }
        let hosts = (0..servers)
            .map(|i| {
                let r = i * racks / servers;
                HostPlace {
                    domain: format!("r{r}"),
                    switches: vec![format!("t{r}")],
                }
            })
            .collect();
        Ok(Self {
            hosts,
            name: format!("tree({racks} racks)"),
        })
    }

    /// A BCube(n, 1) holding `servers` hosts (n = ⌈√servers⌉ when `n` is 0):
    /// host i is (a1, a0) = (i / n, i % n), on level-0 switch `l0-{a1}` and
    /// level-1 switch `l1-{a0}` (C§2.2). Its failure domain is its level-0
    /// group `g{a1}`, the servers racked with their level-0 switch (C§4.3:
    /// copies in different racks).
    pub fn bcube(servers: usize, n: usize) -> Result<Self, TopologyError> {
        let n = if n == 0 {
            (1..=servers).find(|k| k * k >= servers).unwrap_or(1)
        } else {
            n
        };
        if n < 2 || n * n < servers {
            return Err(TopologyError::Bad(format!(
                "BCube({n}, 1) holds {} servers, not {servers}",
                n * n
            )));
        }
        let hosts = (0..servers)
            .map(|i| HostPlace {
                domain: format!("g{}", i / n),
                switches: vec![format!("l0-{}", i / n), format!("l1-{}", i % n)],
            })
            .collect();
        Ok(Self {
            hosts,
            name: format!("bcube({n},1)"),
        })
    }

    /// Explicit places, host by host.
    pub fn explicit(hosts: Vec<HostPlace>) -> Self {
        Self {
            hosts,
            name: "file".into(),
        }
    }

    /// Hosts placed (0: flat).
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether this is the flat topology.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Host `i`'s failure-domain field; empty when flat (as before issue 22).
    pub fn field(&self, i: usize) -> String {
        self.hosts.get(i).map_or_else(String::new, |h| {
            let switches: Vec<&str> = h.switches.iter().map(String::as_str).collect();
            location_field(&h.domain, &switches)
        })
    }

    /// How far apart hosts `a` and `b` are (flat: everyone behind one switch).
    pub fn hops(&self, a: usize, b: usize) -> Hops {
        if a == b {
            return Hops::Local;
        }
        match (self.hosts.get(a), self.hosts.get(b)) {
            (Some(x), Some(y)) if !x.switches.iter().any(|s| y.switches.contains(s)) => Hops::More,
            _ => Hops::One,
        }
    }

    /// Whether `replicas` copies of a segment and their master can each have
    /// a failure domain of their own (the placement rule, R§7.1): otherwise
    /// no segment ever gets all its replicas and writes wait for good.
    pub fn check_domains(&self, replicas: usize) -> Result<(), TopologyError> {
        let mut named: Vec<&str> = self.hosts.iter().map(|h| h.domain.as_str()).collect();
        let unnamed = named.iter().filter(|d| d.is_empty()).count();
        named.retain(|d| !d.is_empty());
        named.sort_unstable();
        named.dedup();
        let domains = named.len() + unnamed;
        if self.hosts.is_empty() || domains > replicas {
            Ok(())
        } else {
            Err(TopologyError::Bad(format!(
                "{} has {domains} failure domains; {replicas} replicas and their master \
                 need {}",
                self.name,
                replicas + 1
            )))
        }
    }

    /// Host `i`'s failure domain (empty when flat or unnamed).
    pub fn domain(&self, i: usize) -> &str {
        self.hosts.get(i).map_or("", |h| h.domain.as_str())
    }
}
