//! `ramstore ttl` and `ramstore persist`: an object's time left before it
//! expires, and making it never expire (`ramstore put --ttl` sets one). The
//! expiry time lives in the object's log entry (R§4), as an absolute
//! wall-clock time; the time left is measured with this client's clock.

use std::io::Write;

use anyhow::Result;
use ramstore_client::{BlockingClient, ClientError};
use serde_json::json;

use crate::data::{explain, table_id};
use crate::output::{escape, print_json, Format};

/// Prints the time `key` has left: seconds (ms precision) in the table
/// format, ms in JSON and raw (-1 for no expiry, as Redis's PTTL; a missing
/// object is an error).
pub fn ttl(client: &BlockingClient, table: &str, key: &str, format: Format) -> Result<()> {
    let id = table_id(client, table)?;
    let shown = escape(key.as_bytes());
    let expiry = client.expiry(id, key.as_bytes()).map_err(|e| match e {
        ClientError::ObjectDoesntExist => anyhow::anyhow!("'{shown}' does not exist"),
        e => explain(e),
    })?;
    let left_ms = expiry.map(|at| at.saturating_sub(client.wall_ms()));
    let mut out = std::io::stdout().lock();
    match (format, left_ms) {
        (Format::Table, Some(ms)) => {
            writeln!(out, "'{shown}' expires in {}.{:03} s", ms / 1000, ms % 1000)?
        }
        (Format::Table, None) => writeln!(out, "'{shown}' never expires")?,
        (Format::Json, _) => print_json(
            &mut out,
            &json!({"ttl_ms": left_ms, "expires_at_ms": expiry}),
        )?,
        (Format::Raw, Some(ms)) => writeln!(out, "{ms}")?,
        (Format::Raw, None) => writeln!(out, "-1")?,
    }
    Ok(())
}

/// Makes `key` never expire; says whether it had an expiry time.
pub fn persist(client: &BlockingClient, table: &str, key: &str, format: Format) -> Result<()> {
    let id = table_id(client, table)?;
    let shown = escape(key.as_bytes());
    let had = client.persist(id, key.as_bytes()).map_err(explain)?;
    let mut out = std::io::stdout().lock();
    match (format, had) {
        (Format::Table, true) => writeln!(out, "'{shown}' no longer expires")?,
        (Format::Table, false) => {
            writeln!(out, "'{shown}' had no expiry time (or does not exist)")?
        }
        (Format::Json, _) => print_json(&mut out, &json!({"persisted": had}))?,
        (Format::Raw, _) => writeln!(out, "{}", u8::from(had))?,
    }
    Ok(())
}
