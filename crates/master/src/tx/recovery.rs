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

/// A transaction prepared here and still undecided, as a recovery loop sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecided {
    pub id: TxId,
    /// Every object of the transaction (table id, key hash), in op-index
    /// order; empty if this master never learned the list.
    pub participants: Vec<(u64, u64)>,
    /// Whether this master holds the transaction's first op (op index 0): the
    /// one participant that drives its recovery first.
    pub holds_first_op: bool,
}

impl Transactions {
    /// The transactions prepared here and not yet decided, with what a
    /// recovery manager needs to finish them, in id order (the simulator's
    /// runs must not depend on a hash order).
    pub fn undecided(&self) -> Vec<Undecided> {
        let mut all: Vec<Undecided> = self
            .prepared
            .lock()
            .iter()
            .map(|(&id, tx)| Undecided {
                id,
                participants: tx.participants.clone(),
                holds_first_op: tx.ops.iter().any(|op| op.op_index == 0),
            })
            .collect();
        all.sort_by_key(|u| u.id);
        all
    }

    /// Whether every op of `id` prepared here has its prepared record in the
    /// log (false while a prepare is still appending them, and for a
    /// transaction not prepared here). A PREPARED vote for a manager waits for
    /// this, as the client's does: a vote must not outlive its ops.
    pub fn is_recorded(&self, id: TxId) -> bool {
        self.prepared
            .lock()
            .get(&id)
            .is_some_and(|tx| tx.recorded == tx.ops.len())
    }

    /// The outcome this master remembers for `id`: `Some(true)` committed,
    /// `Some(false)` aborted, `None` undecided here or forgotten.
    pub fn outcome(&self, id: TxId) -> Option<bool> {
        self.decided.lock().outcome.get(&id).copied()
    }
}

/// A recovery manager's decision from the votes of every participant (SOSP'15
/// §6.4): COMMIT (`Some(true)`) only if none voted ABORT, so every vote was
/// PREPARED or COMMITTED (a COMMITTED vote means some decider saw every vote
/// PREPARED); ABORT (`Some(false)`) if one did. `None` for no votes.
///
/// A COMMITTED and an ABORT vote together would mean two deciders disagreed;
/// votes are sticky (a participant's first outcome stays), so that cannot
/// happen between correct servers; the votes come from the network, so it is
/// not asserted, and ABORT is answered.
pub fn decision_of(votes: &[TxVote]) -> Option<bool> {
    if votes.is_empty() {
        return None;
    }
    Some(!votes.contains(&TxVote::Abort))
}
