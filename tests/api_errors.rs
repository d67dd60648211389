//! The API source against an API server it cannot use, as the running proxy logs it: one
//! line per change of state naming the URL and the cause (connection refused, no such host,
//! TLS, 401, 403), nothing per retry, and every request counted by result as client-go's
//! `rest_client_requests_total` counts it. No root, no test environment: the "servers" are a
//! closed port, a name that does not resolve, and listeners on loopback.

#![allow(clippy::disallowed_methods, reason = "writes a scratch kubeconfig")]

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use kube_proxy_rs::cli::{klog, logging};
use kube_proxy_rs::cluster::source::api::{self, Encoding, Lists, RequestCounts};
use kube_proxy_rs::config::ClientConnection;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpListener;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// Long enough for each of the three watches to retry a few times (backoff from 0.8 s).
const WATCHING: Duration = Duration::from_secs(5);

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let mut f = std::fs::File::create(&path).unwrap();
    write!(
        f,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
         insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n\
         current-context: c\nusers:\n- name: u\n  user: {{token: not-a-token}}\n"
    )
    .unwrap();
    path
}

/// Runs the three watches against `server` for [`WATCHING`] with the proxy's log filter and
/// klog lines at the default verbosity; the log and the request counts.
async fn watch(server: &str) -> (String, RequestCounts) {
    let dir = tempfile::tempdir().unwrap();
    let connection = ClientConnection {
        kubeconfig: Some(kubeconfig(dir.path(), server)),
        content_type: "application/json".into(),
        ..ClientConnection::default()
    };
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .event_format(klog::Klog {
                now: k8s_openapi::jiff::Timestamp::now,
                pid: 1,
            })
            .with_writer(move || writer.clone())
            .with_filter(logging::filter(logging::level(2))),
    );
    let _guard = tracing::subscriber::set_default(subscriber);
    let (client, reachability) = api::client(&connection).await.unwrap();
    let mut events = api::watch(client, "node-a", Lists::Classic, Encoding::Json);
    let _ = tokio::time::timeout(WATCHING, events.next()).await;
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (log, reachability.requests())
}

/// The warning and error lines of a log.
fn alarms(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.starts_with('W') || l.starts_with('E'))
        .collect()
}

fn count(requests: &RequestCounts, code: &str) -> u64 {
    requests
        .read()
        .iter()
        .filter(|(s, _)| s.code == code && s.method == "GET")
        .map(|(_, n)| n)
        .sum()
}

#[tokio::test]
async fn a_closed_port_is_one_line_with_the_url_and_connection_refused() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (log, requests) = watch(&format!("https://127.0.0.1:{port}")).await;
    let alarms = alarms(&log);
    assert_eq!(alarms.len(), 1, "one line, not one per retry:\n{log}");
    let line = alarms[0];
    assert!(
        line.contains(&format!("url=\"https://127.0.0.1:{port}/api")),
        "{line}"
    );
    assert!(line.contains("cause=\"connection refused\""), "{line}");
    assert!(!log.contains("failed with error"), "{log}");
    assert!(count(&requests, "<error>") >= 3, "{:?}", requests.read());
    assert_eq!(requests.host(), format!("127.0.0.1:{port}"));
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_no_such_host() {
    let (log, requests) = watch("https://no-such-host.invalid:6443").await;
    let alarms = alarms(&log);
    assert_eq!(alarms.len(), 1, "{log}");
    assert!(
        alarms[0].contains("url=\"https://no-such-host.invalid:6443/api"),
        "{log}"
    );
    assert!(alarms[0].contains("cause=\"no such host\""), "{log}");
    assert!(count(&requests, "<error>") >= 3);
}

#[tokio::test]
async fn a_server_that_does_not_speak_tls_is_a_tls_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let _ = socket
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let (log, _) = watch(&format!("https://127.0.0.1:{port}")).await;
    let alarms = alarms(&log);
    assert_eq!(alarms.len(), 1, "{log}");
    assert!(alarms[0].contains("cause=\"TLS\""), "{log}");
}

/// A plain-HTTP API server answering every request with `code`.
async fn answering(code: u16) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let status = http::StatusCode::from_u16(code).unwrap();
    let body = format!(
        r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused","reason":"{}","code":{code}}}"#,
        status.canonical_reason().unwrap()
    );
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { (status, [("content-type", "application/json")], body) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_401_is_one_line_naming_the_credentials() {
    let url = answering(401).await;
    let (log, requests) = watch(&url).await;
    let alarms = alarms(&log);
    assert_eq!(alarms.len(), 1, "{log}");
    assert!(alarms[0].contains("401 Unauthorized"), "{log}");
    assert!(alarms[0].contains(&format!("url=\"{url}/api")), "{log}");
    assert!(count(&requests, "401") >= 3, "{:?}", requests.read());
}

#[tokio::test]
async fn a_403_is_one_line_per_forbidden_resource() {
    let url = answering(403).await;
    let (log, requests) = watch(&url).await;
    let alarms = alarms(&log);
    // Services, EndpointSlices, the Node and ServiceCIDRs: four resources, each named once.
    assert_eq!(alarms.len(), 4, "{log}");
    for path in [
        "/api/v1/services",
        "/apis/discovery.k8s.io/v1/endpointslices",
        "/api/v1/nodes",
        "/apis/networking.k8s.io/v1/servicecidrs",
    ] {
        let named = format!("url=\"{url}{path}");
        assert_eq!(
            alarms.iter().filter(|l| l.contains(&named)).count(),
            1,
            "{path}:\n{log}"
        );
    }
    assert!(count(&requests, "403") >= 3);
}
