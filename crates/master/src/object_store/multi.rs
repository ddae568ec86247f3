//! Multi-operations of an object store: one result per item, in order (R§4.1's
//! multiRead, multiWrite and multiRemove).

use ramstore_wire::RejectRules;

use super::{MultiWrite, ObjectStore};
use crate::error::{ReadError, WriteError};

impl ObjectStore {
    /// Reads several objects; one result per key, in order.
    pub fn multi_read(&self, items: &[(u64, &[u8])]) -> Vec<Result<(Vec<u8>, u64), ReadError>> {
        items
            .iter()
            .map(|&(table_id, key)| {
                let mut value = Vec::new();
                self.read(table_id, key, &mut value).map(|v| (value, v))
            })
            .collect()
    }

    /// Writes several objects; one result per item, in order.
    pub fn multi_write(&self, items: &[MultiWrite<'_>]) -> Vec<Result<u64, WriteError>> {
        items
            .iter()
            .map(|w| self.write(w.table_id, w.key, w.value, &w.rules))
            .collect()
    }

    /// Deletes several objects; one result per item, in order.
    pub fn multi_remove(
        &self,
        items: &[(u64, &[u8], RejectRules)],
    ) -> Vec<Result<Option<u64>, WriteError>> {
        items
            .iter()
            .map(|(table_id, key, rules)| self.remove(*table_id, key, rules))
            .collect()
    }
}
