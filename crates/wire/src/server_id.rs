//! Server ids: a stable *index* and an *incarnation* in one `u64` (R§7.3).
//!
//! A server keeps its index across restarts of the same directory, so operators see
//! one server id for one machine's server, however often it restarts; each run is a
//! new incarnation of that index, so the `u64` a process enlists under is never
//! reused (R§7.3: "once a server has been marked CRASHED, it will never again be
//! UP"), and fencing zombies by id — backups, server lists, leases — works on the
//! `u64` exactly as before. The layout follows RAMCloud's ServerId (index and
//! generation):
//!
//! ```text
//! bits 63 ........ 32 31 ......... 0
//!      incarnation       index (≥ 1)
//! ```
//!
//! A server's first run is incarnation 0, so its `u64` is just its index. As text
//! an id is `INDEX` for incarnation 0 and `INDEX.INCARNATION` after that (`3`,
//! `3.1`): [`Show`]. The coordinator hands out ids (`ramstore_coordinator`'s server
//! list); everyone else only compares them.

/// The largest index (indexes count from 1).
pub const MAX_INDEX: u64 = u32::MAX as u64;
/// The largest incarnation.
pub const MAX_INCARNATION: u64 = u32::MAX as u64;

/// The stable part of `id`: the same for every run of one server.
pub const fn index(id: u64) -> u64 {
    id & MAX_INDEX
}

/// Which run of its index `id` is: 0 for the first.
pub const fn incarnation(id: u64) -> u64 {
    id >> 32
}

/// The id of run `incarnation` of server `index`, or `None` if either is out of
/// range (or `index` is 0, which is no server).
pub const fn compose(index: u64, incarnation: u64) -> Option<u64> {
    if index == 0 || index > MAX_INDEX || incarnation > MAX_INCARNATION {
        return None;
    }
    Some(incarnation << 32 | index)
}

/// An id from its text form: `INDEX` or `INDEX.INCARNATION`.
pub fn parse(text: &str) -> Option<u64> {
    let (index, incarnation) = match text.split_once('.') {
        Some((i, n)) => (i.parse().ok()?, n.parse().ok()?),
        None => (text.parse().ok()?, 0),
    };
    compose(index, incarnation)
}

/// Shows an id as text: `3`, or `3.1` for a later incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Show(pub u64);

impl std::fmt::Display for Show {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match incarnation(self.0) {
            0 => write!(f, "{}", index(self.0)),
            n => write!(f, "{}.{n}", index(self.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_splits_back_into_index_and_incarnation() {
        assert_eq!(compose(3, 0), Some(3), "a first run's id is its index");
        let id = compose(3, 2).unwrap();
        assert_eq!((index(id), incarnation(id)), (3, 2));
        assert_eq!(compose(0, 1), None);
        assert_eq!(compose(MAX_INDEX + 1, 0), None);
        assert_eq!(compose(1, MAX_INCARNATION + 1), None);
        assert_eq!(compose(MAX_INDEX, MAX_INCARNATION), Some(u64::MAX));
    }

    #[test]
    fn show_and_parse_round_trip() {
        assert_eq!(Show(3).to_string(), "3");
        let id = compose(3, 1).unwrap();
        assert_eq!(Show(id).to_string(), "3.1");
        assert_eq!(parse("3.1"), Some(id));
        assert_eq!(parse("3"), Some(3));
        for bad in ["", "0", "x", "3.", ".1", "3.1.1", "-1", "4294967296"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
