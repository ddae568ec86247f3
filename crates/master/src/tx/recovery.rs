//! A participant's answer to a transaction recovery manager (Lee et al.
//! SOSP'15 §6.4; RAMCloud's TxRequestAbort): when a client vanishes mid-commit,
//! a participant that held a lock too long asks every participant listed in
//! its op-0 record for its vote, then sends the decision to all. A participant
//! that never saw the prepare answers ABORT and remembers it, so the prepare,
//! arriving late, is refused (`prepare.rs` re-checks under the same lock).

use ramstore_wire::TxVote;

use super::locks::TxId;
use super::prepare::Transactions;

impl Transactions {
    /// This participant's vote on `id` for a recovery manager: PREPARED if it
    /// holds `id` prepared, COMMITTED or ABORT if it decided `id` already;
    /// otherwise it decides ABORT now (it never voted PREPARED, so no
    /// participant can have been told to commit) and answers ABORT.
    pub fn request_vote(&self, id: TxId) -> TxVote {
        // Held while deciding: a prepare inserts under this lock and checks the
        // decided outcomes first (`prepare.rs`), so it cannot slip in between.
        let prepared = self.prepared.lock();
        if prepared.contains_key(&id) {
            return TxVote::Prepared;
        }
        let mut decided = self.decided.lock();
        match decided.outcome.get(&id) {
            Some(true) => TxVote::Committed,
            Some(false) => TxVote::Abort,
            None => {
                decided.remember(id, false);
                TxVote::Abort
            }
        }
    }
}
