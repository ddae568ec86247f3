//! Redis 7's rule for ranges given as two offsets (GETRANGE's bytes, BITCOUNT's
//! bytes or bits), shared by both families; a leaf module, so neither imports
//! the other for it.

/// Redis 7's offset rule for a range of `total` units (GETRANGE's bytes,
/// BITCOUNT's bytes or bits): two negative offsets with start after end are
/// empty; an offset below 0 counts from the end; both are clamped into
/// `0..total`. `None` when nothing is left (`start > end`, or `total` 0).
pub(super) fn clamp_range(total: i64, start: i64, end: i64) -> Option<(i64, i64)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let start = if start < 0 {
        total.saturating_add(start)
    } else {
        start
    }
    .max(0);
    let end = if end < 0 {
        total.saturating_add(end)
    } else {
        end
    }
    .max(0)
    .min(total - 1);
    (total > 0 && start <= end).then_some((start, end))
}
