//! Events on this node's Node object against the real API server from `testenv/`: one when the
//! proxy starts, one when syncs start failing, one when they recover.

#[path = "support/testenv.rs"]
mod testenv;

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;
use kube_proxy_rs::cli::events::{
    self, REASON_STARTING, REASON_SYNC_FAILING, REASON_SYNC_RECOVERED,
};
use kube_proxy_rs::sync::Status;
use testenv::{TestEnv, unique_name, wait_for};
use tokio::sync::watch;
use tokio::time::Instant;

/// The reasons of the Events about `node`, oldest first.
async fn reasons(api: &Api<Event>, node: &str) -> Vec<String> {
    let mut list: Vec<Event> = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
        .collect();
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    list.into_iter().filter_map(|e| e.reason).collect()
}

#[tokio::test]
async fn start_failure_and_recovery_become_events_on_the_node() {
    let env = TestEnv::shared();
    let client = env.client().await;
    let node = unique_name("events-node");
    let (tx, rx) = watch::channel(Status::new(Instant::now()));
    let task = tokio::spawn(events::follow(client.clone(), node.clone(), rx));
    let api: Api<Event> = Api::all(client);

    let want = |n: usize, expected: &'static [&'static str]| {
        let api = api.clone();
        let node = node.clone();
        async move {
            wait_for(
                &format!("events {expected:?}"),
                Duration::from_secs(20),
                || {
                    let api = api.clone();
                    let node = node.clone();
                    async move {
                        let got = reasons(&api, &node).await;
                        if got.len() >= n && got[..n] == *expected {
                            Ok(())
                        } else {
                            Err(format!("{got:?}"))
                        }
                    }
                },
            )
            .await;
        }
    };
    want(1, &[REASON_STARTING]).await;
    tx.send_modify(|s| {
        s.failing_since = Some(Instant::now());
        s.syncs_failed = 1;
    });
    want(2, &[REASON_STARTING, REASON_SYNC_FAILING]).await;
    tx.send_modify(|s| s.failing_since = None);
    want(
        3,
        &[REASON_STARTING, REASON_SYNC_FAILING, REASON_SYNC_RECOVERED],
    )
    .await;
    drop(tx);
    task.await
        .expect("the task ends when the status channel closes");
}
