//! The coordinator's `key=value` statistics (`GetServerStats`, `ramstore
//! status`): servers, tables and recoveries. Reads the core and the recovery
//! driver's progress; changes nothing.

use crate::cluster::Cluster;
use crate::recovery::Recoveries;
use crate::server_list::ServerStatus;

/// `key=value` lines describing the cluster: servers, tables and recoveries.
pub fn stats_text(cluster: &Cluster, recoveries: &Recoveries) -> String {
    let core = cluster.core();
    let mut text = String::from("role=coordinator\n");
    let (list_version, servers) = core.server_list();
    text.push_str(&format!("server_list_version={list_version}\n"));
    for s in &servers {
        let status = match s.status {
            ServerStatus::Up => "up",
            ServerStatus::Crashed => "crashed",
            _ => "removed",
        };
        text.push_str(&format!(
            "server.{}={} {} memory_bytes={} services={} failure_domain={} backup_read_mbps={}{}\n",
            s.id.0,
            s.address,
            status,
            s.memory_bytes,
            s.services,
            s.failure_domain,
            s.backup_read_mbps,
            if s.stopped_cleanly {
                " stopped_cleanly=1"
            } else {
                ""
            }
        ));
    }
    // The name goes last in the value: it may contain '=' or spaces (never a
    // line break: names with control characters are refused).
    for t in core.tables() {
        text.push_str(&format!("table.{}={} {}\n", t.id, t.tablets.len(), t.name));
    }
    drop(core);
    text.push_str(&format!(
        "recoveries_completed={}\n",
        recoveries.completed()
    ));
    for (id, p) in recoveries.in_progress() {
        text.push_str(&format!(
            "recovery.{id}=attempt={} partitions_done={} partitions_total={} entries_replayed={} bytes_replayed={} state={}\n",
            p.attempt, p.partitions_done, p.partitions_total, p.entries_replayed, p.bytes_replayed, p.state
        ));
    }
    text
}
