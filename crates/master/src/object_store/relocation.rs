//! What the log's cleaner asks of the object store when it moves live objects
//! (L§4): whether an entry is live, and re-pointing its hash table reference under
//! the bucket lock once it has been copied.

use ramstore_log::entry::TxRecordScan;
use ramstore_log::{LogRef, ObjectView};

use super::{hash_of, Inner};

impl ramstore_log::Relocator for Inner {
    fn hash(&self, object: &ObjectView<'_>) -> u64 {
        hash_of(object)
    }

    fn prefetch(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    fn is_live(&self, object: &ObjectView<'_>, hash: u64) -> bool {
        // Comparing references is comparing keys: a log position holds one object,
        // so an entry of another bucket (a lookup can pass some) never names it.
        let at = object.location().0;
        self.index.lookup(hash, |r| r == at).is_some()
    }

    fn relocate(
        &self,
        object: &ObjectView<'_>,
        hash: u64,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        let mut guard = self.index.lock(hash);
        match guard.find_ref(object.location().0) {
            Some(slot) => {
                let new = copy();
                guard.replace(slot, new.0);
                true
            }
            None => false,
        }
    }

    fn record_is_live(&self, lease_id: u64, seq: u64, at: LogRef) -> bool {
        self.rpc_results.is_live(lease_id, seq, at)
    }

    fn relocate_record(
        &self,
        lease_id: u64,
        seq: u64,
        at: LogRef,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        self.rpc_results.relocate(lease_id, seq, at, copy)
    }

    fn tx_record_is_live(&self, r: &TxRecordScan, at: LogRef) -> bool {
        self.tx_records
            .is_live((r.lease_id, r.tx_seq, r.op_index), at)
    }

    fn relocate_tx_record(
        &self,
        r: &TxRecordScan,
        at: LogRef,
        copy: &mut dyn FnMut() -> LogRef,
    ) -> bool {
        self.tx_records
            .relocate((r.lease_id, r.tx_seq, r.op_index), at, copy)
    }
}
