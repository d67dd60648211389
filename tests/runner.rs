//! The sync runner under load from a real API server: a burst of EndpointSlice updates costs a
//! handful of syncs, not one per update.

use support::testenv;

use support::live;

use std::time::Duration;

use futures::{StreamExt as _, stream};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube_proxy_rs::sync::Periods;
use live::{Live, connection};
use serde_json::json;
use testenv::{TestEnv, wait_for};

const UPDATES: usize = 1000;
/// Syncs the burst may cost at minSyncPeriod 1 s. The burst takes a few seconds against the
/// test API server; each second allows one sync. Far below one per update either way.
const MAX_SYNCS: u64 = 20;

#[tokio::test]
async fn a_thousand_endpoint_updates_cost_a_few_syncs() {
    let env = TestEnv::shared();
    let ns = env.namespace("runner-burst").await;
    let live = Live::start(
        &connection(&env.kubeconfig, None),
        Periods::new(Duration::from_secs(1), Duration::from_secs(30)),
    )
    .await;
    ns.create_service(json!({
        "metadata": { "name": "web" },
        "spec": { "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] }
    }))
    .await;
    let slice = |n: usize| {
        json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": format!("web-{}", n % 10),
                "namespace": ns.name,
                "labels": { "kubernetes.io/service-name": "web" },
            },
            "addressType": "IPv4",
            "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
            "endpoints": [{
                "addresses": [format!("10.4.{}.{}", n % 10, n / 10 + 1)],
                "conditions": { "ready": true }
            }],
        })
    };
    let slices = ns.api::<EndpointSlice>();
    for n in 0..10 {
        let s: EndpointSlice = serde_json::from_value(slice(n)).unwrap();
        slices
            .create(&PostParams::default(), &s)
            .await
            .expect("create slice");
    }
    let web = format!("{}/web:http", ns.name);
    wait_for("the ten slices", Duration::from_secs(30), || {
        let n = live.ports_in(&ns.name).get(&web).map_or(0, Vec::len);
        async move {
            if n == 10 {
                Ok(())
            } else {
                Err(format!("{n} endpoints"))
            }
        }
    })
    .await;
    let before = live.status();

    // The burst: ten slices, a hundred updates each, sixteen requests in flight.
    stream::iter(10..10 + UPDATES)
        .map(|n| {
            let slices = slices.clone();
            let patch = Patch::Merge(slice(n));
            async move {
                let name = format!("web-{}", n % 10);
                slices
                    .patch(&name, &PatchParams::default(), &patch)
                    .await
                    .unwrap_or_else(|e| panic!("update {name}: {e}"));
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;

    // Concurrent updates of one slice may land in any order: the final state is what the API
    // server holds now.
    let mut last = Vec::new();
    for n in 0..10 {
        let s = slices.get(&format!("web-{n}")).await.expect("get slice");
        last.extend(
            s.endpoints
                .iter()
                .map(|e| format!("{}:8080", e.addresses[0])),
        );
    }
    wait_for("the final state", Duration::from_secs(60), || {
        let mut got = live
            .ports_in(&ns.name)
            .get(&web)
            .cloned()
            .unwrap_or_default();
        got.sort();
        let mut want = last.clone();
        want.sort();
        async move {
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        }
    })
    .await;
    let after = live.status();
    let syncs = after.syncs_ok + after.syncs_failed - before.syncs_ok - before.syncs_failed;
    let updates = after.events.applied - before.events.applied;
    eprintln!("burst: {updates} update events for this node's source, {syncs} syncs");
    assert!(
        updates >= UPDATES as u64,
        "the source saw {updates} updates"
    );
    assert!(
        (1..=MAX_SYNCS).contains(&syncs),
        "{syncs} syncs for {updates} updates"
    );
}
