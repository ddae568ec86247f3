//! Key expiry at the owning master: writes that set or keep an expiry time,
//! changes of expiry (EXPIRE's conditions, PERSIST) and reads of it
//! (`ramstore_wire`'s key-expiry messages; R§4: the expiry lives in the
//! object's log entry).
//!
//! Expiry times are absolute wall-clock ms since the Unix epoch; the
//! relative forms read this client's wall clock ([`crate::ClientOptions`]'s
//! `clock`), so their deadlines are as good as the clocks' agreement.

use std::time::{Duration, UNIX_EPOCH};

use ramstore_wire::{
    encode_request, key_hash, ExpireCondition, ExpiryChange, Opcode, RejectRules, Request, Response,
};

use super::{Client, REQUEST_OVERHEAD_BYTES};
use crate::error::ClientError;

impl Client {
    /// The wall-clock time of this client's clock in ms since the Unix epoch.
    pub fn wall_ms(&self) -> u64 {
        self.inner
            .options
            .clock
            .wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    /// Writes an object that expires `ttl` from now (this client's wall
    /// clock); returns its new version. Reads treat it as absent from then on.
    pub async fn write_with_ttl(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        ttl: Duration,
    ) -> Result<u64, ClientError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let at = self.wall_ms().saturating_add(ttl_ms);
        self.write_expiring(
            table_id,
            key,
            value,
            &RejectRules::default(),
            ExpiryChange::At(at),
        )
        .await
    }

    /// Writes an object unless `rules` refuse it, changing its expiry as
    /// `expiry` says ([`ExpiryChange::Keep`] keeps the current one). Unlike
    /// [`Self::write`] it is at-least-once: a retry after a lost answer may
    /// write again (with a higher version and the same value).
    pub async fn write_expiring(
        &self,
        table_id: u64,
        key: &[u8],
        value: &[u8],
        rules: &RejectRules,
        expiry: ExpiryChange,
    ) -> Result<u64, ClientError> {
        let req = Request::WriteExpiring {
            table_id,
            rules: *rules,
            expiry,
            key,
            value,
        };
        self.inner
            .keyed(
                Opcode::WriteExpiring,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len() + value.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::WriteExpiring { version } => Some(version),
                    _ => None,
                },
            )
            .await
    }

    /// Gives an object expiry time `expires_at` (wall-clock ms; `None`: it
    /// never expires) if it exists and `condition` admits the change; returns
    /// whether it changed. A time already past makes it expire at once.
    pub async fn set_expiry(
        &self,
        table_id: u64,
        key: &[u8],
        expires_at: Option<u64>,
        condition: ExpireCondition,
    ) -> Result<bool, ClientError> {
        let req = Request::SetExpiry {
            table_id,
            condition,
            expires_at,
            key,
        };
        self.inner
            .keyed(
                Opcode::SetExpiry,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::SetExpiry { changed } => Some(changed),
                    _ => None,
                },
            )
            .await
    }

    /// Makes an object never expire; returns whether it had an expiry time
    /// (Redis's PERSIST).
    pub async fn persist(&self, table_id: u64, key: &[u8]) -> Result<bool, ClientError> {
        self.set_expiry(table_id, key, None, ExpireCondition::Xx)
            .await
    }

    /// An object's expiry time (wall-clock ms; `None`: it never expires);
    /// [`ClientError::ObjectDoesntExist`] if it is absent or expired.
    pub async fn expiry(&self, table_id: u64, key: &[u8]) -> Result<Option<u64>, ClientError> {
        let req = Request::GetExpiry { table_id, key };
        self.inner
            .keyed(
                Opcode::GetExpiry,
                table_id,
                key_hash(key),
                REQUEST_OVERHEAD_BYTES + key.len(),
                |out| encode_request(0, &req, out),
                |r| match r {
                    Response::GetExpiry { expires_at } => Some(expires_at),
                    _ => None,
                },
            )
            .await
    }
}
