//! What every fault-injection test asserts after its run (chaos.rs, partition.rs):
//! the run finished, it injected exactly the faults planned, the checker found no
//! violation, and every kind of operation completed. A failure leaves the run's
//! directory (histories and logs) in place; the caller removes it when all passed.

use std::path::Path;

use ramstore_harness::{HarnessError, RunReport};

/// Checks `result` of the run `name` (kept in `dir`) as described above and returns
/// its report.
pub fn check_run(
    name: &str,
    dir: &Path,
    result: Result<RunReport, HarnessError>,
    planned: &[&str],
) -> RunReport {
    let report =
        result.unwrap_or_else(|e| panic!("the {name} run failed (dir {}): {e}", dir.display()));
    for f in &report.faults {
        eprintln!("{name}: {f}");
    }
    eprintln!(
        "{name}: recoveries {}\n{}",
        report.recoveries, report.report
    );
    let kinds: Vec<&str> = report.faults.iter().map(|f| f.fault.name()).collect();
    assert_eq!(kinds, planned);
    assert!(
        report.report.is_clean(),
        "checker found violations (histories {:?}, logs in {}):\n{}\n{}",
        report.failed_histories,
        dir.display(),
        report.report,
        report.logs
    );
    // The load made progress through the faults: every kind of operation completed.
    let r = &report.report;
    assert!(
        r.reads > 0 && r.writes > 0 && r.removes > 0 && r.increments > 0,
        "{r}"
    );
    report
}
