//! What an exactly-once RPC answered, as its completion record saves it (RIFL
//! §4.1): small, fixed-size, and encoded into the record without allocating.

/// The answer of a mutating RPC that took effect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RpcOutcome {
    /// A write: the new version.
    Write { version: u64 },
    /// A delete: whether the object existed and the version it had.
    Remove { existed: bool, version: u64 },
    /// An integer increment: the new value and version.
    IncrementI64 { value: i64, version: u64 },
    /// A float increment: the new value and version.
    IncrementF64 { value: f64, version: u64 },
}

const WRITE: u8 = 1;
const REMOVE: u8 = 2;
const INCREMENT_I64: u8 = 3;
const INCREMENT_F64: u8 = 4;

/// Most bytes an encoded outcome takes.
pub const MAX_OUTCOME_BYTES: usize = 17;
const _: () = assert!(MAX_OUTCOME_BYTES <= ramstore_log::entry::MAX_RPC_RESULT_BYTES);

impl RpcOutcome {
    /// The outcome's bytes in `buf`; returns how many.
    pub fn encode(&self, buf: &mut [u8; MAX_OUTCOME_BYTES]) -> usize {
        let (tag, a, version): (u8, Option<[u8; 8]>, u64) = match *self {
            RpcOutcome::Write { version } => (WRITE, None, version),
            RpcOutcome::Remove { existed, version } => {
                buf[0] = REMOVE;
                buf[1] = u8::from(existed);
                buf[2..10].copy_from_slice(&version.to_le_bytes());
                return 10;
            }
            RpcOutcome::IncrementI64 { value, version } => {
                (INCREMENT_I64, Some(value.to_le_bytes()), version)
            }
            RpcOutcome::IncrementF64 { value, version } => {
                (INCREMENT_F64, Some(value.to_bits().to_le_bytes()), version)
            }
        };
        buf[0] = tag;
        buf[1..9].copy_from_slice(&version.to_le_bytes());
        match a {
            Some(a) => {
                buf[9..17].copy_from_slice(&a);
                17
            }
            None => 9,
        }
    }

    /// Parses an outcome saved by [`Self::encode`]; `None` for anything else.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        Some(match (*bytes.first()?, bytes.len()) {
            (WRITE, 9) => RpcOutcome::Write {
                version: u64_at(1)?,
            },
            (REMOVE, 10) => RpcOutcome::Remove {
                existed: match bytes[1] {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
                version: u64_at(2)?,
            },
            (INCREMENT_I64, 17) => RpcOutcome::IncrementI64 {
                version: u64_at(1)?,
                value: u64_at(9)? as i64,
            },
            (INCREMENT_F64, 17) => RpcOutcome::IncrementF64 {
                version: u64_at(1)?,
                value: f64::from_bits(u64_at(9)?),
            },
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_inverts_encode() {
        for o in [
            RpcOutcome::Write { version: 7 },
            RpcOutcome::Remove {
                existed: true,
                version: u64::MAX,
            },
            RpcOutcome::Remove {
                existed: false,
                version: 0,
            },
            RpcOutcome::IncrementI64 {
                value: -5,
                version: 3,
            },
            RpcOutcome::IncrementF64 {
                value: 2.5,
                version: 9,
            },
        ] {
            let mut buf = [0; MAX_OUTCOME_BYTES];
            let n = o.encode(&mut buf);
            assert_eq!(RpcOutcome::decode(&buf[..n]), Some(o));
        }
    }

    #[test]
    fn decode_rejects_unknown_tags_and_lengths() {
        assert_eq!(RpcOutcome::decode(&[]), None);
        assert_eq!(RpcOutcome::decode(&[9; 9]), None);
        assert_eq!(RpcOutcome::decode(&[WRITE; 10]), None);
        assert_eq!(
            RpcOutcome::decode(&[REMOVE, 2, 0, 0, 0, 0, 0, 0, 0, 0]),
            None
        );
    }
}
