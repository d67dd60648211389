//! Kubernetes Events about this node's proxy: when it starts, and when its syncs start failing
//! or recover, so `kubectl describe node` shows what the proxy is going through; and Warning
//! Events on a Service whose annotation of ours is invalid, so `kubectl describe service` says
//! why it was not honoured.
//!
//! Wiring over kube-rs's event recorder (which also folds repeats into a series). Events follow
//! the runner's status, so they change only when the state does; a failing state that flaps is
//! announced at most once per [`MIN_INTERVAL`]. A failure to publish is logged at debug and
//! never affects the proxy.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::warning::{EventTarget, Warning};
use crate::sync::Status;

/// The reporting controller's name on every Event.
pub const REPORTER: &str = "kube-proxy-rs";
/// Upstream's reason and action for the start-up Event on the Node.
pub const REASON_STARTING: &str = "Starting";
pub const ACTION_START: &str = "StartKubeProxy";
/// Ours: syncs started failing (the previous rules stay in place), or succeeded again.
pub const REASON_SYNC_FAILING: &str = "SyncProxyRulesFailing";
pub const REASON_SYNC_RECOVERED: &str = "SyncProxyRulesRecovered";
pub const ACTION_SYNC: &str = "SyncProxyRules";
/// The shortest time between two "failing" Events.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);

/// The reference Events about this node point at. Its UID is the node name, as kubelet and
/// upstream kube-proxy set it, so `kubectl describe node` shows our Events next to theirs.
pub fn node_reference(node_name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some("Node".to_string()),
        name: Some(node_name.to_string()),
        uid: Some(node_name.to_string()),
        ..ObjectReference::default()
    }
}

/// Publishes the start-up Event, then one Event per change between failing and healthy syncs,
/// until the status channel closes.
pub async fn follow(client: Client, node_name: String, mut status: watch::Receiver<Status>) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: REPORTER.to_string(),
            instance: Some(node_name.clone()),
        },
    );
    let node = node_reference(&node_name);
    let publish = |type_, reason: &str, note: String| {
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: if reason == REASON_STARTING {
                ACTION_START
            } else {
                ACTION_SYNC
            }
            .to_string(),
            secondary: None,
        };
        let recorder = &recorder;
        let node = &node;
        async move {
            if let Err(error) = recorder.publish(&event, node).await {
                tracing::debug!(%error, reason = %event.reason, "could not publish an event");
            }
        }
    };
    publish(
        EventType::Normal,
        REASON_STARTING,
        format!("Starting {REPORTER}."),
    )
    .await;
    let mut failing = false;
    let mut last_failing_event: Option<Instant> = None;
    while status.changed().await.is_ok() {
        let (now_failing, failed) = {
            let s = status.borrow_and_update();
            (s.failing_since.is_some(), s.syncs_failed)
        };
        if now_failing == failing {
            continue;
        }
        failing = now_failing;
        if failing {
            let now = Instant::now();
            if last_failing_event.is_some_and(|t| now.duration_since(t) < MIN_INTERVAL) {
                continue;
            }
            last_failing_event = Some(now);
            let note = format!(
                "Syncing proxy rules failed ({failed} failed syncs so far); the previous rules stay in place and the sync is retried."
            );
            publish(EventType::Warning, REASON_SYNC_FAILING, note).await;
        } else {
            let note = "Proxy rules synced again after failures.".to_string();
            publish(EventType::Normal, REASON_SYNC_RECOVERED, note).await;
        }
    }
}

/// Warning Events on other objects (a Service's invalid annotation of ours): at most
/// [`OBJECT_EVENTS_BURST`] at once, then one per [`OBJECT_EVENT_INTERVAL`]; the rest are only
/// logged (each proxy of a cluster publishes its own, so a bad Service must not flood the API
/// server). The tracker already warns once per object version.
pub const OBJECT_EVENTS_BURST: u32 = 10;
pub const OBJECT_EVENT_INTERVAL: Duration = Duration::from_secs(6);
/// The action of those Events.
pub const ACTION_PROXY: &str = "ProxyService";

/// A token bucket: whether one more object Event may go now.
#[derive(Debug)]
pub struct Budget {
    tokens: u32,
    refilled: Instant,
}

impl Budget {
    pub fn new(now: Instant) -> Budget {
        Budget {
            tokens: OBJECT_EVENTS_BURST,
            refilled: now,
        }
    }

    pub fn take(&mut self, now: Instant) -> bool {
        let earned =
            now.duration_since(self.refilled).as_secs_f64() / OBJECT_EVENT_INTERVAL.as_secs_f64();
        if earned >= 1.0 {
            self.tokens = (self.tokens + earned as u32).min(OBJECT_EVENTS_BURST);
            self.refilled = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

/// The reference an object Event points at.
pub fn object_reference(target: &EventTarget) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".to_string()),
        kind: Some(target.kind.to_string()),
        namespace: Some(target.namespace.clone()),
        name: Some(target.name.clone()),
        uid: target.uid.clone(),
        ..ObjectReference::default()
    }
}

/// Publishes a Warning Event for each warning received, within the [`Budget`], until the
/// channel closes.
pub async fn publish_object_warnings(
    client: Client,
    node_name: String,
    mut warnings: tokio::sync::mpsc::Receiver<Warning>,
) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: REPORTER.to_string(),
            instance: Some(node_name),
        },
    );
    let mut budget = Budget::new(Instant::now());
    while let Some(w) = warnings.recv().await {
        let Some(target) = &w.event else { continue };
        if !budget.take(Instant::now()) {
            tracing::debug!(object = %w.object, "object Event budget spent; only logged");
            continue;
        }
        let event = Event {
            type_: EventType::Warning,
            reason: target.reason.to_string(),
            note: Some(w.message.chars().take(1024).collect()),
            action: ACTION_PROXY.to_string(),
            secondary: None,
        };
        if let Err(error) = recorder.publish(&event, &object_reference(target)).await {
            tracing::debug!(%error, object = %w.object, "could not publish an event");
        }
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    #[test]
    fn the_budget_allows_a_burst_then_one_event_per_interval() {
        let start = Instant::now();
        let mut b = Budget::new(start);
        let burst = (0..20).filter(|_| b.take(start)).count();
        assert_eq!(burst, OBJECT_EVENTS_BURST as usize);
        assert!(!b.take(start + OBJECT_EVENT_INTERVAL / 2));
        assert!(b.take(start + OBJECT_EVENT_INTERVAL));
        assert!(!b.take(start + OBJECT_EVENT_INTERVAL));
        let later = start + OBJECT_EVENT_INTERVAL * 100;
        let refilled = (0..20).filter(|_| b.take(later)).count();
        assert_eq!(
            refilled, OBJECT_EVENTS_BURST as usize,
            "never above the burst"
        );
    }
}
