//! The API source and the sync runner against a real kube-apiserver (`testenv/`): the model
//! follows the cluster through creates, updates and deletes, filters each kind by its own label,
//! survives the API server dying, and relists correctly when its watch expired.

use support::testenv;

use support::live;

use support::api_objects;

use std::time::Duration;

use api_objects::{service, slice_json};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_proxy_rs::cluster::source::api::Lists;
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

/// `plan`'s lists come in pages. A continue token outlived by an etcd compaction is answered
/// 410 with reason `Expired`, and that answer is what makes a paged list start over as one
/// whole list (`api::list::expired_continue`), as client-go's pager does.
#[tokio::test]
async fn an_expired_continue_token_is_what_makes_a_paged_list_start_over() {
    use kube::api::ListParams;
    use kube_proxy_rs::cluster::source::api;
    let env = TestEnv::shared();
    let ns = env.namespace("src-pages").await;
    for name in ["a", "b", "c"] {
        service(&ns, name, json!({})).await;
    }
    // Without a watch cache, lists are served from etcd in pages.
    let server = PrivateApiServer::start(env, &["--watch-cache=false"]).await;
    let (client, _) = api::client(&connection(&env.kubeconfig, Some(server.url())))
        .await
        .expect("client");
    let services = kube::Api::<Service>::namespaced(client, &ns.name);
    let first = services
        .list(&ListParams::default().limit(1))
        .await
        .expect("the first page");
    let token = first.metadata.continue_.expect("a continue token");
    // A write after the first page, then a compaction up to it: the page's revision is gone.
    service(&ns, "d", json!({})).await;
    compact_etcd(env).await;
    let next = ListParams::default().limit(1).continue_token(&token);
    let err = services.list(&next).await.expect_err("the token expired");
    assert!(api::list::expired_continue(&err, true), "{err:?}");
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
