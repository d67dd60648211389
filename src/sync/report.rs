//! What one sync did, for logs and for the metrics the metrics server exports.
//!
//! Plain values built by the runner after each sync, successful or not. Observers registered
//! with [`super::Runner::on_report`] receive every report in order; nothing here touches a
//! metrics registry.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::schedule::Reason;
use crate::cluster::ChangeCounts;
use crate::dataplane::{SyncError, SyncReport};

/// One sync attempt.
#[derive(Clone, Debug)]
pub struct Report {
    /// 1 for the first sync of this process, counting failures.
    pub number: u64,
    pub reason: Reason,
    /// Compared against the kernel (`sync_full_proxy_rules_duration_seconds`) rather than
    /// against what was last programmed (`sync_partial_...`).
    pub full: bool,
    /// Wall-clock start and end (`sync_proxy_rules_last_timestamp_seconds` on success).
    pub started_at: Timestamp,
    pub ended_at: Timestamp,
    /// From the runner's monotonic clock (`sync_proxy_rules_duration_seconds`).
    pub duration: Duration,
    /// The dataplane's counts, or why it failed (the previous rules are still in place then).
    pub outcome: Result<SyncReport, Arc<SyncError>>,
    /// Service ports this sync had to program (including those a failed sync left over).
    pub changed_ports: usize,
    /// Services with Service, and with EndpointSlice, changes this sync took from the tracker.
    pub service_changes: usize,
    pub endpoint_changes: usize,
    /// The tracker's pending and total change counts once this sync took its snapshot
    /// (`sync_proxy_rules_{service,endpoint}_changes_{pending,total}`).
    pub counts: ChangeCounts,
    /// Network programming latency of each changed slice this sync programmed; empty on failure
    /// (those are measured by the sync that finally succeeds).
    pub latencies: Vec<Duration>,
}

impl Report {
    pub fn succeeded(&self) -> bool {
        self.outcome.is_ok()
    }
}
