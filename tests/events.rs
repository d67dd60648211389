//! Events on this node's Node object against the real API server from `testenv/`: one when the
//! proxy starts, one when syncs start failing, one when they recover.

use support::testenv;

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

#[tokio::test]
async fn an_invalid_ipvs_scheduler_annotation_becomes_a_warning_event_on_its_service() {
    use k8s_openapi::api::core::v1::Service;
    use kube::api::PostParams;
    use kube_proxy_rs::cluster::interner::Interner;
    use kube_proxy_rs::cluster::scheduler_annotation::{ANNOTATION, EVENT_REASON};
    use kube_proxy_rs::cluster::service;

    let env = TestEnv::shared();
    let client = env.client().await;
    let ns = env.namespace("events-svc").await;
    let services: Api<Service> = Api::namespaced(client.clone(), &ns.name);
    let svc: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sticky", "annotations": {ANNOTATION: "fastest"}},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}
    }))
    .unwrap();
    let created = services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create the Service");
    let uid = created.metadata.uid.clone().expect("a uid");

    // What the tracker does with the object the watch delivers.
    let mut warnings = Vec::new();
    service::convert(
        &created.clone().into(),
        &mut Interner::default(),
        &mut warnings,
    );
    let with_event: Vec<_> = warnings.into_iter().filter(|w| w.event.is_some()).collect();
    assert_eq!(with_event.len(), 1, "{with_event:?}");

    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let task = tokio::spawn(events::publish_object_warnings(
        client.clone(),
        unique_name("events-node"),
        rx,
    ));
    tx.send(with_event[0].clone()).await.unwrap();
    let api: Api<Event> = Api::namespaced(client, &ns.name);
    let note = wait_for(
        "the Service's Warning Event",
        Duration::from_secs(20),
        || {
            let api = api.clone();
            let uid = uid.clone();
            async move {
                let list = api
                    .list(&ListParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
                list.items
                    .into_iter()
                    .find(|e| {
                        e.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str())
                            && e.reason.as_deref() == Some(EVENT_REASON)
                            && e.type_.as_deref() == Some("Warning")
                    })
                    .and_then(|e| e.note)
                    .ok_or_else(|| "no Event yet".to_string())
            }
        },
    )
    .await;
    assert!(note.contains("\"fastest\" is not a scheduler"), "{note}");
    drop(tx);
    task.await.expect("the publisher ends with its channel");
}
