//! The health servers over real HTTP on 127.0.0.1: `/healthz` and `/livez` follow the proxy's
//! sync state and the Node, and a Service's health check follows its local endpoints. Neither
//! takes a method that asks for a change.

mod http;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use kube_proxy_rs::cluster::source::{Event, manifests};
use kube_proxy_rs::cluster::{Features, IpFamily, NodeContext, ServiceKey, Snapshot, Tracker};
use kube_proxy_rs::health::service::{self, Listen, Servers};
use kube_proxy_rs::health::{ProxyHealth, SharedHealth, server};
use kube_proxy_rs::metrics::Metrics;
use tokio::net::TcpListener;

const SYNC_PERIOD: Duration = Duration::from_secs(30);
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

#[allow(clippy::disallowed_methods)] // the server compares against the wall clock; so must we
fn wall_now() -> SystemTime {
    SystemTime::now()
}

async fn start_health_server(health: &SharedHealth, metrics: &Metrics) -> SocketAddr {
    let listener = TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server::serve(listener, health.clone(), metrics.clone()));
    addr
}

#[tokio::test]
async fn proxy_health_moves_from_200_to_503_and_back_as_syncs_stall_and_recover() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let metrics = Metrics::new();
    let addr = start_health_server(&health, &metrics).await;

    // Starting up: healthy, no family reported yet.
    let r = http::must_get(addr, "/healthz").await;
    assert_eq!(r.code, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let body = r.json();
    assert_eq!(body["healthy"], true);
    assert_eq!(body["nodeEligible"], true);
    assert!(body.get("status").is_none());

    // A sync succeeded long ago; a change has waited longer than 2 × syncPeriod since.
    let now = wall_now();
    health.updated(IpFamily::V4, now - Duration::from_secs(300));
    health.queued_update(IpFamily::V4, now - Duration::from_secs(61));
    for path in ["/healthz", "/livez"] {
        let r = http::must_get(addr, path).await;
        assert_eq!(r.code, 503, "{path}");
        let body = r.json();
        assert_eq!(body["healthy"], false);
        assert_eq!(body["status"]["IPv4"]["healthy"], false);
        assert_ne!(body["lastUpdated"], body["currentTime"]);
    }

    // The next sync succeeds.
    health.updated(IpFamily::V4, wall_now());
    let r = http::must_get(addr, "/livez").await;
    assert_eq!(r.code, 200);
    let body = r.json();
    assert_eq!(body["healthy"], true);
    assert_eq!(body["status"]["IPv4"]["healthy"], true);
    assert!(
        body.get("nodeEligible").is_none(),
        "/livez has no nodeEligible"
    );
    assert_eq!(body["lastUpdated"], body["currentTime"]);

    let scrape = metrics.encode();
    assert!(scrape.contains("kubeproxy_proxy_healthz_total{code=\"200\"} 1\n"));
    assert!(scrape.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 1\n"));
    assert!(scrape.contains("kubeproxy_proxy_livez_total{code=\"503\"} 1\n"));
    assert!(scrape.contains("kubeproxy_proxy_livez_total{code=\"200\"} 1\n"));
}

#[tokio::test]
async fn a_draining_node_fails_healthz_but_not_livez() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let addr = start_health_server(&health, &Metrics::new()).await;
    let mut node = NodeContext::named("node-a");
    node.known = true;
    health.sync_node(&node);
    assert_eq!(http::must_get(addr, "/healthz").await.code, 200);

    for (deleting, to_be_deleted) in [(true, false), (false, true)] {
        node.deleting = deleting;
        node.to_be_deleted = to_be_deleted;
        health.sync_node(&node);
        let r = http::must_get(addr, "/healthz").await;
        assert_eq!(r.code, 503);
        assert_eq!(r.json()["nodeEligible"], false);
        assert_eq!(r.json()["healthy"], true);
        assert_eq!(http::must_get(addr, "/livez").await.code, 200);
    }

    // The Node object disappears after having been seen.
    health.sync_node(&NodeContext::named("node-a"));
    assert_eq!(http::must_get(addr, "/healthz").await.code, 503);
    assert_eq!(http::must_get(addr, "/livez").await.code, 200);
}

#[tokio::test]
async fn the_paths_only_kube_proxy_rs_serves_answer_as_healthz_and_livez() {
    // The DaemonSet's probes ask these, which upstream kube-proxy answers 404.
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let metrics = Metrics::new();
    let addr = start_health_server(&health, &metrics).await;
    let mut node = NodeContext::named("node-a");
    node.known = true;
    node.to_be_deleted = true;
    health.sync_node(&node);
    for (ours, upstreams) in [
        (server::OURS_HEALTHZ_PATH, server::HEALTHZ_PATH),
        (server::OURS_LIVEZ_PATH, server::LIVEZ_PATH),
    ] {
        let (a, b) = (
            http::must_get(addr, ours).await,
            http::must_get(addr, upstreams).await,
        );
        assert_eq!(a.code, b.code, "{ours}");
        assert_eq!(a.json()["nodeEligible"], b.json()["nodeEligible"], "{ours}");
    }
    assert_eq!(
        http::must_get(addr, server::OURS_HEALTHZ_PATH).await.code,
        503
    );
    assert_eq!(
        http::must_get(addr, server::OURS_LIVEZ_PATH).await.code,
        200
    );
    let scrape = metrics.encode();
    assert!(
        scrape.contains("kubeproxy_proxy_healthz_total{code=\"503\"} 3\n"),
        "{scrape}"
    );
    assert!(
        scrape.contains("kubeproxy_proxy_livez_total{code=\"200\"} 3\n"),
        "{scrape}"
    );
}

/// A LoadBalancer Service with `externalTrafficPolicy: Local` whose one endpoint is on `node`,
/// ready or only serving while terminating.
fn cluster(hc_port: u16, node: &str, ready: bool) -> String {
    format!(
        r#"
apiVersion: v1
kind: Service
metadata: {{namespace: default, name: web}}
spec:
  type: LoadBalancer
  clusterIP: 172.30.0.10
  clusterIPs: [172.30.0.10]
  externalTrafficPolicy: Local
  healthCheckNodePort: {hc_port}
  ports: [{{name: http, port: 80, protocol: TCP, targetPort: 8080, nodePort: 30080}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: default
  name: web-1
  labels: {{kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{{name: http, port: 8080, protocol: TCP}}]
endpoints:
- addresses: [10.0.1.5]
  conditions: {{ready: {ready}, serving: true, terminating: {terminating}}}
  nodeName: {node}
"#,
        terminating = !ready
    )
}

/// The snapshot node-a's tracker builds from `yaml` (every object applied, every kind listed).
fn snapshot(yaml: &str) -> Snapshot {
    let parsed = manifests::parse(yaml, "test");
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let mut tracker = Tracker::new("node-a", Features::default());
    for object in parsed.objects {
        let warnings = tracker.apply(&Event::Applied(object));
        assert!(warnings.is_empty(), "{warnings:?}");
    }
    tracker.snapshot().0
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn service_health_check_follows_local_ready_endpoints() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let mut servers = Servers::new(Listen::Addresses(vec![LOOPBACK]), health.clone());
    let port = free_port();
    let addr = SocketAddr::new(LOOPBACK, port);
    let web = ServiceKey::new("default", "web");

    // The only endpoint runs on another node: 503 with weight 0.
    let report = servers
        .update(&service::desired(&snapshot(&cluster(port, "node-b", true))))
        .await;
    assert_eq!((report.open, report.failing), (1, 0));
    assert_eq!(servers.listening()[&web], vec![addr]);
    let r = http::must_get(addr, "/any/path").await;
    assert_eq!(r.code, 503);
    assert_eq!(r.header("x-load-balancing-endpoint-weight"), Some("0"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(
        r.body,
        "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 0,\n\t\"serviceProxyHealthy\": true\n}"
    );

    // A ready endpoint appears on this node: 200 with weight 1.
    servers
        .update(&service::desired(&snapshot(&cluster(port, "node-a", true))))
        .await;
    let r = http::must_get(addr, "/").await;
    assert_eq!(r.code, 200);
    assert_eq!(r.header("x-load-balancing-endpoint-weight"), Some("1"));
    assert_eq!(r.json()["localEndpoints"], 1);

    // The proxy falls behind: the check fails although the endpoint is there.
    let now = wall_now();
    health.updated(IpFamily::V4, now - Duration::from_secs(300));
    health.queued_update(IpFamily::V4, now - Duration::from_secs(120));
    let r = http::must_get(addr, "/").await;
    assert_eq!(r.code, 503);
    assert_eq!(r.json()["serviceProxyHealthy"], false);
    health.updated(IpFamily::V4, wall_now());

    // The endpoint is terminating: it still serves, but the check tells the LB to go away.
    servers
        .update(&service::desired(&snapshot(&cluster(
            port, "node-a", false,
        ))))
        .await;
    let r = http::must_get(addr, "/").await;
    assert_eq!(r.code, 503);
    assert_eq!(r.json()["localEndpoints"], 0);

    // The Service is gone: the port is closed when update returns.
    let report = servers.update(&BTreeMap::new()).await;
    assert_eq!(report.open, 0);
    assert!(http::get(addr, "/").await.is_err(), "port still open");
}

#[tokio::test]
async fn a_port_in_use_is_reported_once_and_retried_until_it_binds() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let mut servers = Servers::new(Listen::Addresses(vec![LOOPBACK]), health);
    let squatter = std::net::TcpListener::bind((LOOPBACK, 0)).unwrap();
    let port = squatter.local_addr().unwrap().port();
    let want = service::desired(&snapshot(&cluster(port, "node-a", true)));

    let first = servers.update(&want).await;
    assert_eq!((first.open, first.failing), (0, 1));
    assert_eq!(first.new_failures.len(), 1);
    assert_eq!(first.new_failures[0].port, port);
    let again = servers.update(&want).await;
    assert_eq!((again.failing, again.new_failures.len()), (1, 0));

    drop(squatter);
    let recovered = servers.update(&want).await;
    assert_eq!((recovered.open, recovered.failing), (1, 0));
    let r = http::must_get(SocketAddr::new(LOOPBACK, port), "/").await;
    assert_eq!(r.code, 200);
    servers.close_all().await;
}

#[tokio::test]
async fn health_servers_answer_get_and_head_and_refuse_changing_methods() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    health.updated(IpFamily::V4, wall_now());
    let metrics = Metrics::new();
    let addr = start_health_server(&health, &metrics).await;
    let mut servers = Servers::new(Listen::Addresses(vec![LOOPBACK]), health.clone());
    let port = free_port();
    servers
        .update(&service::desired(&snapshot(&cluster(port, "node-a", true))))
        .await;
    let check = SocketAddr::new(LOOPBACK, port);
    for (at, path) in [
        (addr, server::HEALTHZ_PATH),
        (addr, server::LIVEZ_PATH),
        (addr, server::OURS_HEALTHZ_PATH),
        (addr, server::OURS_LIVEZ_PATH),
        (check, "/"),
        (check, "/any/path"),
    ] {
        assert_eq!(http::must_get(at, path).await.code, 200, "GET {at}{path}");
        let head = http::request(at, "HEAD", path).await.unwrap();
        assert_eq!(head.code, 200, "HEAD {at}{path}");
        for method in http::CHANGING {
            let r = http::request(at, method, path).await.unwrap();
            assert_eq!(r.code, 405, "{method} {at}{path}: {}", r.body);
            assert_eq!(r.header("allow"), Some("GET,HEAD"), "{method} {at}{path}");
        }
    }
    servers.close_all().await;
}

/// Upstream runs one check server per IP family, each serving its family's Services: a check
/// listening on every address answers an IPv4-only Service over IPv4 and refuses it over IPv6.
#[tokio::test]
async fn a_check_on_every_address_listens_only_in_its_services_family() {
    let health = SharedHealth::new(ProxyHealth::timeout_for(SYNC_PERIOD));
    let mut servers = Servers::new(Listen::Any, health);
    let port = free_port();
    let report = servers
        .update(&service::desired(&snapshot(&cluster(port, "node-a", true))))
        .await;
    assert_eq!((report.open, report.failing), (1, 0));
    let r = http::must_get(SocketAddr::new(LOOPBACK, port), "/").await;
    assert_eq!(r.code, 200);
    let v6 = SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), port);
    assert!(
        http::get(v6, "/").await.is_err(),
        "an IPv4-only Service's check answered over IPv6"
    );
    servers.close_all().await;
}
