//! `--topology FILE`: a topology in TOML (issue 22; docs/operations.md,
//! "Network topology"). Three forms:
//!
//! ```toml
//! kind = "tree"     # racks of consecutive servers behind ToR switches
//! racks = 10
//! ```
//! ```toml
//! kind = "bcube"    # BCube(n, 1), C§2.2: two switches per server
//! n = 10            # optional: ⌈√servers⌉
//! ```
//! ```toml
//! [[server]]        # explicit, one table per host in host order
//! domain = "r0"
//! switches = ["t0"]
//! ```

use crate::topology::{HostPlace, Topology, TopologyError};

/// Reads the topology of `servers` hosts from the TOML file at `path`.
pub fn read(path: &std::path::Path, servers: usize) -> Result<Topology, TopologyError> {
    let text = std::fs::read_to_string(path).map_err(|error| TopologyError::Read {
        path: path.display().to_string(),
        error,
    })?;
    parse(&text, servers)
}

/// Parses a topology file's text (see the module documentation).
pub fn parse(text: &str, servers: usize) -> Result<Topology, TopologyError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| TopologyError::Toml(e.to_string()))?;
    let number = |key: &str| -> Result<Option<usize>, TopologyError> {
        match table.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_integer()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| TopologyError::Bad(format!("{key} must be a count"))),
        }
    };
    match table.get("kind").and_then(toml::Value::as_str) {
        Some("tree") => Topology::tree(
            servers,
            number("racks")?.unwrap_or(crate::topology::default_racks(servers)),
        ),
        Some("bcube") => Topology::bcube(servers, number("n")?.unwrap_or(0)),
        Some(other) => Err(TopologyError::Bad(format!("unknown kind {other:?}"))),
        None => explicit(&table, servers),
    }
}

/// The `[[server]]` form: exactly one table per host.
fn explicit(table: &toml::Table, servers: usize) -> Result<Topology, TopologyError> {
    let list = table
        .get("server")
        .and_then(toml::Value::as_array)
        .ok_or_else(|| TopologyError::Bad("no kind and no [[server]] tables".into()))?;
    if list.len() != servers {
        return Err(TopologyError::Bad(format!(
            "{} [[server]] tables for {servers} servers",
            list.len()
        )));
    }
    let hosts = list.iter().map(host).collect::<Result<Vec<_>, _>>()?;
    Ok(Topology::explicit(hosts))
}

fn host(v: &toml::Value) -> Result<HostPlace, TopologyError> {
    let domain = v
        .get("domain")
        .and_then(toml::Value::as_str)
        .unwrap_or("")
        .to_string();
    let switches = v
        .get("switches")
        .and_then(toml::Value::as_array)
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .unwrap_or(Some(Vec::new()))
        .ok_or_else(|| TopologyError::Bad("switches must be strings".into()))?;
    let place = HostPlace { domain, switches };
    let field = ramstore_wire::location::location_field(
        &place.domain,
        &place
            .switches
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    let clean = |s: &str| !s.is_empty() && !s.contains([',', '@']);
    if !ramstore_coordinator::valid_failure_domain(&field)
        || place.domain.contains(['@', ','])
        || !place.switches.iter().all(|s| clean(s))
    {
        return Err(TopologyError::Bad(format!(
            "{field:?} is not a valid failure-domain field (≤ 64 bytes, no spaces, \
             no '@' or ',' inside names)"
        )));
    }
    Ok(place)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::{Hops, Topology};

    #[test]
    fn parse_tree_deals_racks_of_consecutive_hosts() {
        let t = parse("kind = \"tree\"\nracks = 2\n", 4).expect("parses");
        assert_eq!(t.field(0), "r0@t0");
        assert_eq!(t.field(3), "r1@t1");
        assert_eq!(t.hops(0, 1), Hops::One);
        assert_eq!(t.hops(1, 2), Hops::More);
    }

    #[test]
    fn parse_bcube_gives_two_switches_per_server() {
        let t = parse("kind = \"bcube\"\n", 9).expect("parses");
        assert_eq!(t.field(4), "g1@l0-1,l1-1");
        assert_eq!(t.hops(0, 3), Hops::One, "same level-1 switch");
        assert_eq!(t.hops(0, 4), Hops::More);
    }

    #[test]
    fn check_domains_wants_one_per_replica_and_the_master() {
        let small = parse("kind = \"bcube\"\n", 9).expect("parses");
        assert!(small.check_domains(3).is_err(), "BCube(3, 1) has 3 groups");
        assert!(small.check_domains(2).is_ok());
        assert!(Topology::flat().check_domains(3).is_ok());
    }

    #[test]
    fn parse_explicit_needs_one_table_per_host() {
        let text = "[[server]]\ndomain = \"a\"\nswitches = [\"x\"]\n\
                    [[server]]\ndomain = \"b\"\nswitches = [\"x\", \"y\"]\n";
        let t = parse(text, 2).expect("parses");
        assert_eq!(t.field(1), "b@x,y");
        assert_eq!(t.hops(0, 1), Hops::One);
        assert!(parse(text, 3).is_err());
        assert!(parse("[[server]]\nswitches = [\"a@b\"]\n", 1).is_err());
        assert!(parse("kind = \"ring\"\n", 3).is_err());
    }
}
