//! Where a server sits in the network: the syntax of the failure-domain field
//! a server enlists with (issue 22, C§3).
//!
//! The field is `DOMAIN` or `DOMAIN@SWITCH[,SWITCH…]`. `DOMAIN` is the failure
//! domain as before (servers sharing it share a failure cause; empty: the
//! server is its own domain). The switches after `@` are those the server is
//! attached to: one ToR switch in a two-level tree, two in a BCube(n, 1)
//! (C§2.2, §3: each server on a level-0 and a level-1 switch). Two servers
//! sharing a switch are one hop apart (C§3.2's "one-hop neighbours"); a field
//! without `@` names no switch, so such a server is near no one and proximity
//! rules leave it to today's placement. Carrying the switches in the existing
//! field keeps the wire format, the coordinator's stored state and the server
//! list unchanged: old servers' domains parse as domains.

/// A parsed failure-domain field (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Location<'a> {
    /// The failure domain (empty: the server is its own).
    pub domain: &'a str,
    /// The switch list after `@`, comma-separated (empty: none named).
    switches: &'a str,
}

impl<'a> Location<'a> {
    /// Parses a failure-domain field; every string parses (a field without
    /// `@` is a domain with no switches).
    pub fn parse(field: &'a str) -> Self {
        match field.split_once('@') {
            Some((domain, switches)) => Self { domain, switches },
            None => Self {
                domain: field,
                switches: "",
            },
        }
    }

    /// The switches this server is attached to.
    pub fn switches(&self) -> impl Iterator<Item = &'a str> {
        self.switches.split(',').filter(|s| !s.is_empty())
    }

    /// Whether this server is attached to `switch`.
    pub fn is_on(&self, switch: &str) -> bool {
        self.switches().any(|s| s == switch)
    }

    /// Whether the two servers share a switch: one hop apart (C§3.2).
    pub fn shares_switch(&self, other: &Location<'_>) -> bool {
        self.switches().any(|s| other.is_on(s))
    }
}

/// The failure-domain field for `domain` attached to `switches`: what
/// [`Location::parse`] reads back.
pub fn location_field(domain: &str, switches: &[&str]) -> String {
    if switches.is_empty() {
        domain.to_string()
    } else {
        format!("{domain}@{}", switches.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_plain_domain_names_no_switch() {
        let l = Location::parse("rack3");
        assert_eq!(l.domain, "rack3");
        assert_eq!(l.switches().count(), 0);
        assert!(!l.shares_switch(&l));
    }

    #[test]
    fn parse_domain_with_switches_round_trips() {
        let field = location_field("g2", &["l0-2", "l1-1"]);
        assert_eq!(field, "g2@l0-2,l1-1");
        let l = Location::parse(&field);
        assert_eq!(l.domain, "g2");
        assert_eq!(l.switches().collect::<Vec<_>>(), ["l0-2", "l1-1"]);
        assert_eq!(location_field("r1", &[]), "r1");
    }

    #[test]
    fn shares_switch_one_common_switch_is_enough() {
        let a = Location::parse("g0@l0-0,l1-1");
        let b = Location::parse("g1@l0-1,l1-1");
        let c = Location::parse("g1@l0-1,l1-2");
        assert!(a.shares_switch(&b));
        assert!(!a.shares_switch(&c));
        assert!(Location::parse("@tor").shares_switch(&Location::parse("x@tor")));
    }
}
