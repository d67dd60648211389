//! Kubernetes Events about this node's proxy: when it starts, and when its syncs start failing
//! or recover, so `kubectl describe node` shows what the proxy is going through.
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
