//! The runner's state as health checks and metrics read it, published on a
//! `tokio::sync::watch` channel after every event batch and every sync.
//!
//! Plain values; [`Status::healthy`] is the pure rule `/healthz` applies.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use super::report::Report;
use crate::cluster::ChangeCounts;
use crate::cluster::source::Kind;

/// Events the runner took from its source, by type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    pub applied: u64,
    pub deleted: u64,
    /// Complete lists: the initial ones plus one per relist (a watch that expired or restarted).
    pub listed: u64,
}

/// See the module doc. Instants are on the runner's (tokio) clock; `*_at` fields are wall-clock
/// times for metrics gauges.
#[derive(Clone, Debug)]
pub struct Status {
    pub started: Instant,
    /// Kinds listed at least once; syncing starts when all are.
    pub listed_kinds: BTreeSet<Kind>,
    /// The initial lists are in and syncs may run.
    pub ready: bool,
    pub last_success: Option<Instant>,
    pub last_success_at: Option<Timestamp>,
    /// The latest change queued for a sync (`sync_proxy_rules_last_queued_timestamp_seconds`).
    pub last_queued_at: Option<Timestamp>,
    /// The oldest change not yet programmed (queued, in a running sync, or in a failed one).
    pub oldest_pending_since: Option<Instant>,
    /// Since when syncs have been failing; `None` after a success.
    pub failing_since: Option<Instant>,
    pub syncs_ok: u64,
    pub syncs_failed: u64,
    pub full_syncs: u64,
    pub events: EventCounts,
    pub changes: ChangeCounts,
    pub last_report: Option<Arc<Report>>,
}

impl Status {
    pub fn new(started: Instant) -> Status {
        Status {
            started,
            listed_kinds: BTreeSet::new(),
            ready: false,
            last_success: None,
            last_success_at: None,
            last_queued_at: None,
            oldest_pending_since: None,
            failing_since: None,
            syncs_ok: 0,
            syncs_failed: 0,
            full_syncs: 0,
            events: EventCounts::default(),
            changes: ChangeCounts::default(),
            last_report: None,
        }
    }

    /// Upstream's `/healthz` rule: unhealthy when a change has waited longer than twice
    /// `syncPeriod` to be programmed (a hung or failing dataplane). Waiting for the initial
    /// lists is not unhealthy by itself; a cluster with no changes is healthy however long ago
    /// the last sync ran.
    pub fn healthy(&self, now: Instant, sync_period: Duration) -> bool {
        self.oldest_pending_since
            .is_none_or(|since| now.saturating_duration_since(since) <= 2 * sync_period)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthy_until_a_change_waits_more_than_twice_sync_period() {
        let t0 = Instant::now();
        let period = Duration::from_secs(30);
        let mut status = Status::new(t0);
        assert!(status.healthy(t0 + Duration::from_secs(3600), period));
        status.oldest_pending_since = Some(t0);
        assert!(status.healthy(t0 + Duration::from_secs(60), period));
        assert!(!status.healthy(t0 + Duration::from_secs(61), period));
    }
}
