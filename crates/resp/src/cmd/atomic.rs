//! Commands that read then write a key, or touch several keys, run outside
//! MULTI as a transaction of their own (SOSP'15 §6; design notes "Redis
//! MULTI/EXEC"): GETDEL, SETRANGE, SETBIT, MSETNX, RENAME, RENAMENX, COPY, and
//! LCS (two keys read at one moment). Redis
//! runs each on one thread, so nothing gets in between; here their MULTI form
//! (`queued.rs`) runs in a fresh transaction and commits, and a conflicting
//! writer's abort runs it again. One code path for both: a command behaves the
//! same inside and outside MULTI. Keys on several masters stay atomic (a
//! multi-server commit); keys on one master commit in one round trip after
//! the reads.

use ramstore_client::ClientError;

use super::queued::run_queued;
use super::{Command, Connection, MAX_CAS_ATTEMPTS};
use crate::backend::StoreError;
use crate::protocol::Encoder;
use crate::sink::Sink;

impl Connection {
    /// Runs `command` on `table` as its own transaction and sends its reply
    /// once committed (an error reply of the command itself commits nothing).
    pub(super) async fn run_atomically(&self, table: u64, command: Command<'_>, sink: &mut Sink) {
        let client = self.shared.backend.client();
        for _ in 0..MAX_CAS_ATTEMPTS {
            let mut tx = client.transaction();
            let mut reply = Vec::new();
            let ran = run_queued(
                &mut tx,
                table,
                command,
                &mut Encoder::new(&mut reply, self.version),
            )
            .await;
            if let Err(e) = ran {
                return self.store_error(sink, &StoreError::Client(e));
            }
            match tx.commit().await {
                Ok(()) => return sink.reply(self.version, |e| e.out.extend_from_slice(&reply)),
                // Another writer changed a key read: run it again.
                Err(ClientError::Aborted) => continue,
                Err(e) => return self.store_error(sink, &StoreError::Client(e)),
            }
        }
        self.error(
            sink,
            &format!("TRYAGAIN keys changed concurrently {MAX_CAS_ATTEMPTS} times in a row"),
        );
    }
}
