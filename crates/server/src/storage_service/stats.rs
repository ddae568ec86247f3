//! The server's statistics as `key=value` lines: GetServerStats on the native
//! front end, `INFO` on the Redis front end (through
//! [`ramstore_resp::backend::LocalObjects::stats_text`]), and the tests.

use std::sync::atomic::Ordering;

use super::StorageService;

impl StorageService {
    /// The server's statistics as `key=value` lines (GetServerStats).
    pub fn stats_text(&self) -> String {
        let s = self.store.stats();
        let mut text = String::new();
        let mut line = |k: &str, v: String| {
            text.push_str(k);
            text.push('=');
            text.push_str(&v);
            text.push('\n');
        };
        line("server_id", self.server_id().to_string());
        match &self.replicas {
            Some(m) => {
                let r = m.stats();
                line("durability", format!("R={}", r.replicas_per_segment));
                line("replication_rounds", r.rounds.to_string());
                line("replication_bytes", r.bytes_sent.to_string());
                line("replication_failures", r.rpc_failures.to_string());
                line("rereplications", r.rereplications.to_string());
                line("replicas_found_lost", r.replicas_found_lost.to_string());
                line("replica_checks", r.replica_checks.to_string());
                line("replicated_segments", r.segments.to_string());
            }
            None => line("durability", "dram-only".into()),
        }
        line("memory_bytes", s.log.memory_bytes.to_string());
        line("live_object_bytes", s.log.live_object_bytes.to_string());
        line("tombstone_bytes", s.log.tombstone_bytes.to_string());
        line("free_seglets", s.log.seglets_free.to_string());
        line("total_seglets", s.log.seglets_total.to_string());
        line("objects", s.objects.to_string());
        // A lower bound for the ctime of a tablet this master takes from now
        // on (design notes "Tablet ctime"): the coordinator records it before
        // a migration moves ownership here.
        line("log_tenure_floor", self.store.tenure_floor().to_string());
        // Where the process's resident memory is (issue 17): the log, the hash
        // table, and the rest, which docs/design-notes.md bounds.
        crate::resident::ResidentSplit::measure(&self.store).stats_lines(&mut line);
        line("tablets", s.tablets.len().to_string());
        line("compactions", s.log.compactions.to_string());
        line("combined_passes", s.log.combined_passes.to_string());
        line("no_space_answers", self.full_log.answers().to_string());
        // Refusing writes for lack of memory: 1 while the writes since the last
        // accepted one were all answered NO_SPACE (L§7); for how long, in ms.
        let refusing = self.full_log.refusing_for(self.clock.now());
        line("refusing_writes", u8::from(refusing.is_some()).to_string());
        line(
            "refusing_writes_ms",
            refusing.map_or(0, |d| d.as_millis()).to_string(),
        );
        line(
            "connections_refused",
            self.connections_refused.load(Ordering::Relaxed).to_string(),
        );
        if let Some(conns) = &self.conns {
            let c = &conns.counters;
            line("connections_open", conns.len().to_string());
            line(
                "connections_evicted",
                c.evicted.load(Ordering::Relaxed).to_string(),
            );
            line(
                "connection_request_timeouts",
                c.request_timeouts.load(Ordering::Relaxed).to_string(),
            );
            line(
                "connection_idle_timeouts",
                c.idle_timeouts.load(Ordering::Relaxed).to_string(),
            );
        }
        match &self.backup {
            Some(backup) => backup.stats_lines(&mut line),
            None => line("backup", "off".into()),
        }
        // Migrations coming in: what has arrived so far (issue 20's progress).
        for p in self.incoming_progress() {
            let id = p.id;
            line(&format!("migration.{id}.bytes"), p.bytes.to_string());
            line(&format!("migration.{id}.objects"), p.objects.to_string());
            line(&format!("migration.{id}.arrived"), p.arrived.to_string());
        }
        for t in &s.tablets {
            line(
                &format!("tablet.{}.{:#018x}", t.table_id, t.start_hash),
                format!(
                    "{:#018x} entries={} bytes={}",
                    t.end_hash, t.entry_count, t.bytes
                ),
            );
        }
        text
    }
}
