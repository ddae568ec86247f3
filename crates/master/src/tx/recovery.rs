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
    /// This participant's vote on `id` for a recovery manager that asks
    /// about `objects` (table id, key hash), the ones this master owns:
    /// PREPARED if it holds `id` prepared with an op on every one of them,
    /// COMMITTED or ABORT if it decided `id` already (a held commit answers
    /// COMMITTED however long ago it was); otherwise it decides ABORT now and
    /// answers ABORT. That is safe: a prepare votes PREPARED only after all
    /// its ops' records are durable, so an asked object with no op here was
    /// never voted PREPARED, and no participant can have been told to commit.
    pub fn request_vote(&self, id: TxId, objects: &[(u64, u64)]) -> TxVote {
        // Held while deciding: a prepare inserts under this lock and checks the
        // decided outcomes first (`prepare.rs`), so it cannot slip in between.
        let prepared = self.prepared.lock();
        let outcome = self.outcome(id);
        if let (Some(tx), None) = (prepared.get(&id), outcome) {
            if tx.has_ops_on(objects) {
                return TxVote::Prepared;
            }
        }
        match outcome {
            Some(true) => TxVote::Committed,
            Some(false) => TxVote::Abort,
            None => {
                self.decided.lock().remember(id, false);
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
    /// The outcome this master already knows (a replay found another
    /// participant's decided marks or held commit beside these undecided
    /// ops): the loop applies it at once, asking no one.
    pub known_outcome: Option<bool>,
}

impl Transactions {
    /// The transactions prepared here and not yet decided, with what a
    /// recovery manager needs to finish them, in id order (the simulator's
    /// runs must not depend on a hash order).
    pub fn undecided(&self) -> Vec<Undecided> {
        let prepared = self.prepared.lock();
        let mut all: Vec<Undecided> = prepared
            .iter()
            .map(|(&id, tx)| Undecided {
                id,
                participants: tx.participants.clone(),
                holds_first_op: tx.ops.iter().any(|op| op.op_index == 0),
                known_outcome: self.outcome(id),
            })
            .collect();
        drop(prepared);
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

    /// The outcome this master remembers for `id`: `Some(true)` committed
    /// (a held commit, or a remembered decision), `Some(false)` aborted,
    /// `None` undecided here or forgotten.
    pub fn outcome(&self, id: TxId) -> Option<bool> {
        if self.held.lock().contains_key(&id) {
            return Some(true);
        }
        self.decided.lock().outcome.get(&id).copied()
    }
}

/// A recovery manager's decision from the votes of every participant (SOSP'15
/// §6.4): COMMIT (`Some(true)`) if one voted COMMITTED (some decider saw
/// every vote PREPARED) or none voted ABORT; ABORT (`Some(false)`) otherwise.
/// `None` for no votes.
///
/// A COMMITTED and an ABORT vote together cannot mean two deciders disagreed
/// (votes are sticky: a participant's first outcome stays): the ABORT is a
/// participant that applied the commit and forgot it, so COMMIT is answered.
pub fn decision_of(votes: &[TxVote]) -> Option<bool> {
    if votes.is_empty() {
        return None;
    }
    // A COMMITTED vote is a decision already taken from all-PREPARED votes
    // and applied somewhere: an ABORT beside it can only come from a
    // participant that forgot it (design notes "Transaction recovery", *Held
    // outcomes*), and must not undo it.
    if votes.contains(&TxVote::Committed) {
        return Some(true);
    }
    Some(!votes.contains(&TxVote::Abort))
}
