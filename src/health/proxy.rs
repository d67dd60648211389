//! Whether the proxy as a whole is healthy: the state behind `/healthz`, `/livez` and the
//! `serviceProxyHealthy` field of every Service health check.
//!
//! Pure: every time is an argument, nothing here reads a clock or does I/O, nothing fails.
//!
//! The rule follows upstream's proxy health server (and KEP-3836 for the Node part):
//!
//! - The sync runner reports, per IP family, when a change was queued ([`ProxyHealth::queued_update`];
//!   only the oldest pending one counts) and when a sync succeeded ([`ProxyHealth::updated`];
//!   clears the pending one).
//! - A family is unhealthy when a queued change has been pending for at least the timeout
//!   (2 × `syncPeriod`). A family that has never synced successfully is starting up and stays
//!   healthy, as upstream does, because the first sync waits for the initial lists, which may
//!   take long in a large cluster. Unlike upstream, the runner may end that grace early with
//!   [`ProxyHealth::ready`] once the lists are in, so a dataplane that fails from its very first
//!   sync also shows.
//! - `/healthz` also needs the Node to be eligible: not being deleted, without the cluster
//!   autoscaler's `ToBeDeletedByClusterAutoscaler` taint, and not gone once it was seen. Before
//!   the Node has been seen it counts as eligible, so a starting proxy is not drained.
//! - Ours: a proxy told to stop (SIGTERM, SIGINT) is unhealthy from then on, and says it is
//!   stopping, so load balancers drain the node while its connections finish.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::cluster::{IpFamily, NodeContext};

/// One IP family's sync history, as the health check needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Family {
    /// The last successful sync; `None` until the first.
    last_updated: Option<SystemTime>,
    /// The oldest change queued since the last successful sync.
    oldest_pending: Option<SystemTime>,
    /// The initial lists are in: late changes count even before the first successful sync.
    ready: bool,
}

/// The Node as far as `/healthz` cares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum NodeState {
    /// Not seen yet: eligible, so start-up is not reported as draining.
    #[default]
    Unknown,
    /// Seen, and neither being deleted nor tainted for deletion.
    Eligible,
    /// Being deleted, tainted for deletion, or gone after having been seen.
    Draining,
}

/// The proxy's health state. Cheap to clone; see the module doc for the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
#[doc(alias = "ProxyHealthServer")]
pub struct ProxyHealth {
    timeout: Duration,
    families: BTreeMap<IpFamily, Family>,
    node: NodeState,
    /// Told to stop ([`ProxyHealth::stop`]).
    stopping: bool,
}

/// One family's answer, for the `status` map of the JSON body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyStatus {
    /// `None` for a family that is ready but has not synced successfully yet.
    pub last_updated: Option<SystemTime>,
    pub healthy: bool,
}

/// The proxy's health at one instant, without the Node's eligibility (that is `/healthz` only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Every family that has synced successfully is healthy.
    pub healthy: bool,
    /// The most recent successful sync of any family; `None` before the first.
    pub last_updated: Option<SystemTime>,
    /// Families that have synced successfully at least once, or were declared ready.
    pub families: BTreeMap<IpFamily, FamilyStatus>,
    /// The proxy was told to stop: unhealthy whatever the families say.
    pub stopping: bool,
}

impl ProxyHealth {
    /// A fresh state: healthy, no family synced yet, Node unknown. `timeout` is how long a
    /// queued change may wait for a successful sync: upstream uses 2 × `syncPeriod`.
    pub fn new(timeout: Duration) -> ProxyHealth {
        ProxyHealth {
            timeout,
            families: BTreeMap::new(),
            node: NodeState::Unknown,
            stopping: false,
        }
    }

    /// The timeout for a sync period, as upstream derives it (2 × `syncPeriod`).
    pub fn timeout_for(sync_period: Duration) -> Duration {
        sync_period.saturating_mul(2)
    }

    /// A change for `family` was queued at `at` and is not programmed yet. Only the oldest
    /// pending change counts, so calling this for every event is right and cheap.
    #[doc(alias = "QueuedUpdate")]
    pub fn queued_update(&mut self, family: IpFamily, at: SystemTime) {
        let f = self.families.entry(family).or_default();
        f.oldest_pending.get_or_insert(at);
    }

    /// A sync of `family` succeeded at `at`: everything queued before it is programmed.
    #[doc(alias = "Updated")]
    pub fn updated(&mut self, family: IpFamily, at: SystemTime) {
        let f = self.families.entry(family).or_default();
        f.oldest_pending = None;
        f.last_updated = Some(at);
    }

    /// The initial lists are in and the first sync of `family` may run: from now on a change
    /// that waits too long makes the proxy unhealthy even if no sync has succeeded yet.
    /// Without this call a family is exempt until its first successful sync, as upstream.
    pub fn ready(&mut self, family: IpFamily) {
        self.families.entry(family).or_default().ready = true;
    }

    /// Takes this node's current state from the tracker's [`NodeContext`]. A context that is
    /// not `known` after one that was means the Node object was deleted.
    #[doc(alias = "SyncNode")]
    pub fn sync_node(&mut self, node: &NodeContext) {
        self.node = match (node.known, self.node) {
            (false, NodeState::Unknown) => NodeState::Unknown,
            (false, _) => NodeState::Draining,
            (true, _) if node.deleting || node.to_be_deleted => NodeState::Draining,
            (true, _) => NodeState::Eligible,
        };
    }

    /// The proxy is stopping: every answer from now on is unhealthy and says so.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Whether the Node may receive traffic: `/healthz` answers 503 when it may not.
    pub fn node_eligible(&self) -> bool {
        self.node != NodeState::Draining
    }

    /// The health at `now`. A queued change pending for exactly the timeout is already late.
    pub fn status(&self, now: SystemTime) -> Status {
        let mut status = Status {
            healthy: !self.stopping,
            last_updated: None,
            families: BTreeMap::new(),
            stopping: self.stopping,
        };
        for (family, f) in &self.families {
            // A family that never synced and is not ready is starting up: healthy, not reported.
            if f.last_updated.is_none() && !f.ready {
                continue;
            }
            let late = f.oldest_pending.is_some_and(|queued| {
                now.duration_since(queued)
                    .is_ok_and(|waited| waited >= self.timeout)
            });
            status.healthy &= !late;
            status.last_updated = status.last_updated.max(f.last_updated);
            status.families.insert(
                *family,
                FamilyStatus {
                    last_updated: f.last_updated,
                    healthy: !late,
                },
            );
        }
        status
    }

    /// [`status`](Self::status)`.healthy`: what the Service health checks report as
    /// `serviceProxyHealthy` (the Node's eligibility does not count there).
    pub fn healthy(&self, now: SystemTime) -> bool {
        self.status(now).healthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNC_PERIOD: Duration = Duration::from_secs(30);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn health() -> ProxyHealth {
        ProxyHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD))
    }

    #[test]
    fn starting_up_is_healthy_even_with_changes_queued_long_ago() {
        let mut h = health();
        assert!(h.healthy(at(0)));
        h.queued_update(IpFamily::V4, at(0));
        assert!(h.healthy(at(1000)));
        assert!(h.status(at(1000)).families.is_empty());
    }

    #[test]
    fn a_queued_change_becomes_late_after_twice_the_sync_period_and_a_sync_recovers() {
        let mut h = health();
        h.updated(IpFamily::V4, at(0));
        h.queued_update(IpFamily::V4, at(10));
        // Later queued changes do not move the oldest one.
        h.queued_update(IpFamily::V4, at(50));
        assert!(h.healthy(at(69)));
        assert!(!h.healthy(at(70)));
        let s = h.status(at(70));
        assert_eq!(s.last_updated, Some(at(0)));
        assert_eq!(
            s.families[&IpFamily::V4],
            FamilyStatus {
                last_updated: Some(at(0)),
                healthy: false
            }
        );
        h.updated(IpFamily::V4, at(80));
        assert!(h.healthy(at(80)));
        assert!(h.healthy(at(1000)));
    }

    #[test]
    fn a_ready_family_that_never_synced_becomes_unhealthy_when_a_change_is_late() {
        let mut h = health();
        h.ready(IpFamily::V6);
        assert!(h.healthy(at(1000)), "nothing queued");
        h.queued_update(IpFamily::V6, at(1000));
        assert!(h.healthy(at(1059)));
        let s = h.status(at(1060));
        assert!(!s.healthy);
        assert_eq!(s.last_updated, None);
        assert_eq!(
            s.families[&IpFamily::V6],
            FamilyStatus {
                last_updated: None,
                healthy: false
            }
        );
        h.updated(IpFamily::V6, at(1070));
        assert!(h.healthy(at(1070)));
    }

    #[test]
    fn one_late_family_makes_the_proxy_unhealthy_and_is_named() {
        let mut h = health();
        h.updated(IpFamily::V4, at(0));
        h.updated(IpFamily::V6, at(5));
        h.queued_update(IpFamily::V6, at(10));
        let s = h.status(at(100));
        assert!(!s.healthy);
        assert_eq!(s.last_updated, Some(at(5)));
        assert!(s.families[&IpFamily::V4].healthy);
        assert!(!s.families[&IpFamily::V6].healthy);
    }

    #[test]
    fn a_clock_stepping_backwards_does_not_make_the_proxy_unhealthy() {
        let mut h = health();
        h.updated(IpFamily::V4, at(0));
        h.queued_update(IpFamily::V4, at(500));
        assert!(h.healthy(at(100)));
    }

    #[test]
    fn node_eligibility_follows_deletion_taint_and_disappearance() {
        let mut h = health();
        let mut node = NodeContext::named("n1");
        h.sync_node(&node);
        assert!(h.node_eligible(), "unknown node during start-up");
        node.known = true;
        h.sync_node(&node);
        assert!(h.node_eligible());
        node.to_be_deleted = true;
        h.sync_node(&node);
        assert!(!h.node_eligible());
        node.to_be_deleted = false;
        h.sync_node(&node);
        assert!(h.node_eligible());
        node.deleting = true;
        h.sync_node(&node);
        assert!(!h.node_eligible());
        node.deleting = false;
        h.sync_node(&node);
        h.sync_node(&NodeContext::named("n1"));
        assert!(!h.node_eligible(), "a node that is gone once seen");
        // Node eligibility never affects the proxy's own health.
        assert!(h.healthy(at(0)));
    }

    #[test]
    fn a_stopping_proxy_is_unhealthy_and_says_so() {
        let mut h = health();
        h.updated(IpFamily::V4, at(0));
        assert!(h.healthy(at(1)));
        h.stop();
        let status = h.status(at(1));
        assert!(!status.healthy && status.stopping);
        assert!(
            status.families[&IpFamily::V4].healthy,
            "the rules are not stale"
        );
    }
}
