//! The API source and the sync runner against a real kube-apiserver (`testenv/`): the model
//! follows the cluster through creates, updates and deletes, filters each kind by its own label,
//! survives the API server dying, and relists correctly when its watch expired.

#[path = "support/testenv.rs"]
mod testenv;

#[path = "live/mod.rs"]
mod live;

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_proxy_rs::cluster::source::api::Lists;
use kube_proxy_rs::cluster::source::api::list_watch;
use kube_proxy_rs::cluster::source::api::protobuf_objects::{DecodeError, FromProtobuf};
use kube_proxy_rs::cluster::source::lean;
use kube_proxy_rs::sync::Periods;
use live::{Live, PrivateApiServer, compact_etcd, connection};
use serde_json::json;
use testenv::{TestEnv, TestNamespace, wait_for};

const CONVERGE: Duration = Duration::from_secs(30);
/// Long enough for the watcher's backoff (up to 30 s) to retry after an outage.
const RECONNECT: Duration = Duration::from_secs(90);

fn periods() -> Periods {
    Periods::new(Duration::from_millis(100), Duration::from_secs(30))
}

/// A selectorless Service with one TCP port named `http`.
async fn service(ns: &TestNamespace, name: &str, labels: serde_json::Value) -> Service {
    ns.create_service(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] }
    }))
    .await
}

fn slice_json(ns: &str, service: &str, name: &str, ips: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": ips.iter().map(|ip| json!({
            "addresses": [ip], "conditions": { "ready": true }
        })).collect::<Vec<_>>(),
    })
}

async fn create_slice(ns: &TestNamespace, service: &str, name: &str, ips: &[&str]) {
    let slice: EndpointSlice =
        serde_json::from_value(slice_json(&ns.name, service, name, ips)).unwrap();
    ns.api::<EndpointSlice>()
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_or_else(|e| panic!("create slice {name}: {e}"));
}

async fn set_slice(ns: &TestNamespace, service: &str, name: &str, ips: &[&str]) {
    let patch = Patch::Merge(slice_json(&ns.name, service, name, ips));
    ns.api::<EndpointSlice>()
        .patch(name, &PatchParams::default(), &patch)
        .await
        .unwrap_or_else(|e| panic!("update slice {name}: {e}"));
}

async fn delete<K>(api: kube::Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete {name}: {e}"));
}

#[tokio::test]
async fn the_model_follows_creates_updates_and_deletes() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-crud").await;
    let live = Live::start(&connection(&env.kubeconfig, None), periods()).await;
    let web = format!("{}/web:http", ns.name);

    service(&ns, "web", json!({})).await;
    service(
        &ns,
        "other-proxy",
        json!({ "service.kubernetes.io/service-proxy-name": "x" }),
    )
    .await;
    create_slice(&ns, "web", "web-a", &["10.1.0.1", "10.1.0.2"]).await;
    live.converges(
        &ns.name,
        &[(&web, &["10.1.0.1:8080", "10.1.0.2:8080"])],
        CONVERGE,
    )
    .await;

    set_slice(&ns, "web", "web-a", &["10.1.0.3"]).await;
    create_slice(&ns, "web", "web-b", &["10.1.0.4"]).await;
    live.converges(
        &ns.name,
        &[(&web, &["10.1.0.3:8080", "10.1.0.4:8080"])],
        CONVERGE,
    )
    .await;

    delete(ns.api::<EndpointSlice>(), "web-a").await;
    live.converges(&ns.name, &[(&web, &["10.1.0.4:8080"])], CONVERGE)
        .await;

    delete(ns.api::<Service>(), "web").await;
    live.converges(&ns.name, &[], CONVERGE).await;
    let status = live.status();
    assert_eq!(
        status.events.listed, 4,
        "one initial list per kind (ServiceCIDRs the fourth), no relist: {status:?}"
    );
    assert_eq!(status.syncs_failed, 0);
}

/// The Service CIDRs in each sync's snapshot, as text.
fn synced_service_cidrs(live: &Live) -> Vec<String> {
    let seen = live.seen.lock().unwrap();
    let Some(snapshot) = &seen.snapshot else {
        return Vec::new();
    };
    snapshot
        .service_cidrs
        .iter()
        .map(|n| n.to_string())
        .collect()
}

/// The API server's own ServiceCIDR (its `--service-cluster-ip-range`) reaches the snapshot,
/// and so does one created later, until it is deleted.
#[tokio::test]
async fn service_cidrs_reach_the_snapshot_and_follow_changes() {
    use k8s_openapi::api::networking::v1::ServiceCIDR;
    let env = TestEnv::shared();
    let live = Live::start(&connection(&env.kubeconfig, None), periods()).await;
    let default = ["10.96.0.0/12".to_owned(), "fd00:10:96::/108".to_owned()];
    let has = |want: Vec<String>| {
        let live = &live;
        move || {
            let want = want.clone();
            async move {
                let got = synced_service_cidrs(live);
                match want.iter().all(|w| got.contains(w)) {
                    true => Ok(got),
                    false => Err(format!("{got:?}")),
                }
            }
        }
    };
    wait_for("the default ServiceCIDR", CONVERGE, has(default.to_vec())).await;

    let api = kube::Api::<ServiceCIDR>::all(env.client().await);
    let name = testenv::unique_name("extra");
    let object: ServiceCIDR = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "cidrs": ["10.250.7.0/24"] },
    }))
    .unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .expect("create ServiceCIDR");
    let with_extra = vec!["10.250.7.0/24".to_owned()];
    let got = wait_for("the new ServiceCIDR", CONVERGE, has(with_extra)).await;
    assert!(default.iter().all(|d| got.contains(d)), "{got:?}");

    delete(api.clone(), &name).await;
    // The API server's own ServiceCIDR controller removes the finalizer of a range no
    // ClusterIP uses; should it not have yet, the test takes it off.
    let unblocked = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await;
    match unblocked {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => panic!("remove the finalizer of {name}: {e}"),
    }
    wait_for("the ServiceCIDR gone", CONVERGE, || async {
        match synced_service_cidrs(&live)
            .iter()
            .any(|c| c == "10.250.7.0/24")
        {
            true => Err("still there".to_owned()),
            false => Ok(()),
        }
    })
    .await;
    assert_eq!(live.status().syncs_failed, 0);
}

/// Each kind is filtered by its own label, as upstream's informers are: the proxy-name label on
/// Services, the headless label on slices. A Service labelled headless that has a ClusterIP is
/// served; a slice labelled with a proxy name counts for its unlabelled Service.
#[tokio::test]
async fn services_and_slices_are_each_filtered_by_their_own_label() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-labels").await;
    let live = Live::start(&connection(&env.kubeconfig, None), periods()).await;

    service(
        &ns,
        "marked",
        json!({ "service.kubernetes.io/headless": "" }),
    )
    .await;
    create_slice(&ns, "marked", "marked-a", &["10.2.0.1"]).await;
    service(&ns, "web", json!({})).await;
    let mut named: EndpointSlice =
        serde_json::from_value(slice_json(&ns.name, "web", "web-a", &["10.2.0.2"])).unwrap();
    named.metadata.labels.get_or_insert_default().insert(
        "service.kubernetes.io/service-proxy-name".into(),
        "x".into(),
    );
    ns.api::<EndpointSlice>()
        .create(&PostParams::default(), &named)
        .await
        .expect("create slice web-a");
    let mut headless: EndpointSlice =
        serde_json::from_value(slice_json(&ns.name, "web", "web-b", &["10.2.0.3"])).unwrap();
    headless
        .metadata
        .labels
        .get_or_insert_default()
        .insert("service.kubernetes.io/headless".into(), String::new());
    ns.api::<EndpointSlice>()
        .create(&PostParams::default(), &headless)
        .await
        .expect("create slice web-b");

    let marked = format!("{}/marked:http", ns.name);
    let web = format!("{}/web:http", ns.name);
    live.converges(
        &ns.name,
        &[(&marked, &["10.2.0.1:8080"]), (&web, &["10.2.0.2:8080"])],
        CONVERGE,
    )
    .await;
}

#[tokio::test]
async fn the_model_survives_the_api_server_dying_and_catches_up_after_its_restart() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-restart").await;
    let mut server = PrivateApiServer::start(env, &[]).await;
    let live = Live::start(&connection(&env.kubeconfig, Some(server.url())), periods()).await;
    let web = format!("{}/web:http", ns.name);

    service(&ns, "web", json!({})).await;
    create_slice(&ns, "web", "web-a", &["10.2.0.1"]).await;
    live.converges(&ns.name, &[(&web, &["10.2.0.1:8080"])], CONVERGE)
        .await;
    let before = live.status();

    server.kill();
    wait_for("the source to notice", RECONNECT, || {
        let health = live.reachability.current();
        async move {
            if health.reachable() {
                Err(format!("{health:?}"))
            } else {
                Ok(())
            }
        }
    })
    .await;
    // Changes made meanwhile through the shared API server (same etcd).
    set_slice(&ns, "web", "web-a", &["10.2.0.2"]).await;
    create_slice(&ns, "web", "web-b", &["10.2.0.3"]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        live.ports_in(&ns.name).get(&web),
        Some(&vec!["10.2.0.1:8080".to_string()]),
        "the last known state is kept while the API server is away"
    );

    server.restart().await;
    live.converges(
        &ns.name,
        &[(&web, &["10.2.0.2:8080", "10.2.0.3:8080"])],
        RECONNECT,
    )
    .await;
    assert!(live.reachability.current().reachable());
    let status = live.status();
    assert!(status.syncs_ok > before.syncs_ok);
    assert_eq!(status.syncs_failed, 0);
    // Whether a watch resumes or relists here depends on the restarted server: its fresh watch
    // cache starts at the current revision, so older resourceVersions get 410 and relist.
    // Either way the model is right; the relist path is pinned down by the next test.
    assert!(status.events.listed >= before.events.listed);
}

#[tokio::test]
async fn an_expired_watch_relists_and_the_relist_deletes_what_is_gone() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-expire").await;
    // Without a watch cache every watch is served from etcd, so a resourceVersion older than
    // etcd's compacted history is refused with 410 Gone.
    let mut server = PrivateApiServer::start(env, &["--watch-cache=false"]).await;
    let live = Live::start(&connection(&env.kubeconfig, Some(server.url())), periods()).await;
    let web = format!("{}/web:http", ns.name);
    let gone = format!("{}/gone:http", ns.name);

    service(&ns, "web", json!({})).await;
    service(&ns, "gone", json!({})).await;
    create_slice(&ns, "web", "web-a", &["10.3.0.1"]).await;
    create_slice(&ns, "web", "web-old", &["10.3.0.9"]).await;
    live.converges(
        &ns.name,
        &[(&gone, &[]), (&web, &["10.3.0.1:8080", "10.3.0.9:8080"])],
        CONVERGE,
    )
    .await;
    let lists_before = live.status().events.listed;

    server.kill();
    // Deletions while the watch is down are only learnt from the relist.
    delete(ns.api::<Service>(), "gone").await;
    delete(ns.api::<EndpointSlice>(), "web-old").await;
    set_slice(&ns, "web", "web-a", &["10.3.0.2"]).await;
    compact_etcd(env).await;
    server.restart().await;

    live.converges(&ns.name, &[(&web, &["10.3.0.2:8080"])], RECONNECT)
        .await;
    let status = live.status();
    assert!(
        status.events.listed > lists_before,
        "the watch resumed without a relist ({} lists before, {} after)",
        lists_before,
        status.events.listed
    );
    assert_eq!(status.syncs_failed, 0);
}

/// Whether `server` accepts a streamed list (a watch with `sendInitialEvents`) of Services.
async fn streams_lists(connection: &kube_proxy_rs::config::ClientConnection) -> Result<(), String> {
    use futures::StreamExt as _;
    let (client, _) = kube_proxy_rs::cluster::source::api::client(connection)
        .await
        .expect("client");
    let params = kube::api::WatchParams {
        send_initial_events: true,
        bookmarks: true,
        ..kube::api::WatchParams::default()
    };
    let mut events = kube::Api::<Service>::all(client)
        .watch(&params, "0")
        .await
        .map_err(|e| e.to_string())?
        .boxed();
    match events.next().await {
        Some(Ok(kube::api::WatchEvent::Error(status))) => Err(status.message),
        Some(Ok(_)) => Ok(()),
        Some(Err(e)) => Err(e.to_string()),
        None => Err("the watch ended at once".into()),
    }
}

#[tokio::test]
async fn streamed_lists_fall_back_to_list_and_watch_where_the_api_server_refuses_them() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-nostream").await;
    let web = format!("{}/web:http", ns.name);
    service(&ns, "web", json!({})).await;
    create_slice(&ns, "web", "web-a", &["10.4.0.1"]).await;

    // The shared API server streams lists (its `WatchList` gate is on by default since 1.34),
    // and so the source, asked to, lists by streaming there; this one has the gate off, as
    // 1.33 had, and the source falls back to listing.
    let shared = connection(&env.kubeconfig, None);
    streams_lists(&shared)
        .await
        .expect("the shared API server streams lists");
    let server = PrivateApiServer::start(env, &["--feature-gates=WatchList=false"]).await;
    let refusing = connection(&env.kubeconfig, Some(server.url()));
    let refused = streams_lists(&refusing).await;
    assert!(
        refused.is_err(),
        "the test's premise: an API server with WatchList=false refuses streamed lists"
    );

    for (which, conn) in [("streaming", &shared), ("refusing", &refusing)] {
        let live = Live::start_listing(conn, periods(), Lists::Streamed).await;
        live.converges(&ns.name, &[(&web, &["10.4.0.1:8080"])], CONVERGE)
            .await;
        // The watch that follows the list delivers changes, whichever way it listed.
        set_slice(&ns, "web", "web-a", &["10.4.0.2"]).await;
        live.converges(&ns.name, &[(&web, &["10.4.0.2:8080"])], CONVERGE)
            .await;
        set_slice(&ns, "web", "web-a", &["10.4.0.1"]).await;
        live.converges(&ns.name, &[(&web, &["10.4.0.1:8080"])], CONVERGE)
            .await;
        let status = live.status();
        assert_eq!(
            status.events.listed, 4,
            "{which}: one initial list per kind: {status:?}"
        );
        assert_eq!(status.syncs_failed, 0, "{which}");
    }
}

/// Protobuf list items read, counted to show the lists really came as protobuf.
static PROTOBUF_ITEMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn counted<K: FromProtobuf>(item: &[u8]) -> Result<K, DecodeError> {
    PROTOBUF_ITEMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    K::from_protobuf(item)
}

/// The objects of one list of namespace `ns`, asked for as protobuf or as JSON.
async fn listed<K>(client: &kube::Client, ns: &str, protobuf: bool) -> Vec<K>
where
    K: kube::Resource + FromProtobuf + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Send + 'static,
    K::DynamicType: Default,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event as W;
    let selectors = list_watch::Selectors {
        labels: None,
        fields: Some(format!("metadata.namespace={ns}")),
    };
    let decoder = protobuf.then_some(counted::<K> as list_watch::ProtobufDecoder<K>);
    let mut events = std::pin::pin!(list_watch::events::<K>(client.clone(), selectors, decoder));
    let mut objects = Vec::new();
    loop {
        match events.next().await.expect("the stream never ends") {
            Ok(W::Init) => {}
            Ok(W::InitApply(object)) => objects.push(object),
            Ok(W::InitDone) => return objects,
            other => panic!("listing: {other:?}"),
        }
    }
}

#[tokio::test]
async fn lists_read_as_protobuf_give_the_objects_their_json_gives() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-protobuf").await;
    let last_applied = json!({"metadata": {"annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": "{\"a\": \"long\"}",
        "endpoints.kubernetes.io/last-change-trigger-time": "2026-12-06T01:02:03Z",
    }}});
    let services = [
        json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                     "appProtocol": "http"},
                    {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"},
                ],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                "internalTrafficPolicy": "Local",
                "trafficDistribution": "PreferClose",
            }
        }),
        json!({
            "metadata": {"name": "edge", "annotations": last_applied["metadata"]["annotations"]},
            "spec": {
                "type": "LoadBalancer",
                "ports": [{"port": 443, "protocol": "TCP"}],
                "externalTrafficPolicy": "Local",
                "externalIPs": ["192.0.2.7"],
                "loadBalancerSourceRanges": ["198.51.100.0/24"],
                "allocateLoadBalancerNodePorts": true,
            }
        }),
        json!({
            "metadata": {"name": "plain-np"},
            "spec": {"type": "NodePort", "ports": [{"port": 8080}]}
        }),
        json!({
            "metadata": {"name": "headless"},
            "spec": {"clusterIP": "None", "ports": [{"port": 9000}]}
        }),
        json!({
            "metadata": {"name": "away"},
            "spec": {"type": "ExternalName", "externalName": "example.invalid"}
        }),
        json!({
            "metadata": {"name": "both"},
            "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}
        }),
    ];
    for service in services {
        ns.create_service(service).await;
    }
    ns.api::<Service>()
        .patch_status(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                {"ip": "192.0.2.10", "ipMode": "VIP",
                 "ports": [{"port": 443, "protocol": "TCP", "error": "Pending"}]},
                {"hostname": "lb.example.invalid"},
            ]}}})),
        )
        .await
        .expect("load balancer status");

    let mut slices = vec![
        slice_json(&ns.name, "web", "web-a", &["10.5.0.1", "10.5.0.2"]),
        slice_json(&ns.name, "web", "web-empty", &[]),
    ];
    slices[0]["metadata"]["annotations"] = last_applied["metadata"]["annotations"].clone();
    slices[0]["endpoints"] = json!([
        {"addresses": ["10.5.0.1"], "conditions": {"ready": true, "serving": true,
         "terminating": false}, "nodeName": "node-a", "zone": "z1", "hostname": "web-0",
         "hints": {"forZones": [{"name": "z1"}]},
         "targetRef": {"kind": "Pod", "namespace": ns.name, "name": "web-0"}},
        {"addresses": ["10.5.0.2"], "conditions": {"ready": false, "serving": true,
         "terminating": true}},
        {"addresses": ["10.5.0.3"], "conditions": {}},
    ]);
    slices[1].as_object_mut().unwrap().remove("ports");
    slices.push(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-v6", "namespace": ns.name,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv6",
        "ports": [{"port": 8080, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
                  {"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [{"addresses": ["fd00::5"], "conditions": {"ready": true}}],
    }));
    for slice in slices {
        let slice: EndpointSlice = serde_json::from_value(slice).unwrap();
        ns.api::<EndpointSlice>()
            .create(&PostParams::default(), &slice)
            .await
            .expect("create slice");
    }

    let client = env.client().await;
    let json_services: Vec<lean::Service> = listed(&client, &ns.name, false).await;
    let json_slices: Vec<lean::EndpointSlice> = listed(&client, &ns.name, false).await;
    assert_eq!(PROTOBUF_ITEMS.load(std::sync::atomic::Ordering::Relaxed), 0);
    let protobuf_services: Vec<lean::Service> = listed(&client, &ns.name, true).await;
    let protobuf_slices: Vec<lean::EndpointSlice> = listed(&client, &ns.name, true).await;
    assert_eq!(
        PROTOBUF_ITEMS.load(std::sync::atomic::Ordering::Relaxed),
        6 + 3,
        "every item of both lists came as protobuf"
    );
    assert_eq!((json_services.len(), json_slices.len()), (6, 3));
    assert_eq!(protobuf_services, json_services);
    assert_eq!(protobuf_slices, json_slices);
    let named = |name: &str| {
        json_services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("service {name} listed"))
    };
    let edge = named("edge");
    assert!(
        edge.status
            .as_ref()
            .unwrap()
            .load_balancer
            .as_ref()
            .unwrap()
            .ingress
            .is_some(),
        "the test's premise: the status is set"
    );
    let both = named("both");
    assert_eq!(
        both.spec
            .as_ref()
            .unwrap()
            .cluster_ips
            .as_ref()
            .map(Vec::len),
        Some(2),
        "the test's premise: a dual-stack Service"
    );

    // An error answered in protobuf reads as the API server's Status, not as bytes.
    let bad = list_watch::Selectors {
        labels: None,
        fields: Some("spec.nothing=x".into()),
    };
    let decoder = Some(counted::<lean::Service> as list_watch::ProtobufDecoder<lean::Service>);
    let mut refused = std::pin::pin!(list_watch::events(client.clone(), bad, decoder));
    match futures::StreamExt::next(&mut refused).await {
        Some(Err(kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(status)))) => {
            assert_eq!(status.code, 400, "{status:?}");
            assert!(
                status.message.contains("spec.nothing") && status.reason == "BadRequest",
                "{status:?}"
            );
        }
        other => panic!("a refused list: {other:?}"),
    }
}
