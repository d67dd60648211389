//! Test support for the userspace mode's dataplane tests (`userspace_mode.rs`,
//! `userspace_redirect.rs`): the cluster they sync, as manifests and as a snapshot, and the
//! little readers of what the dataplane did.

pub use crate::manifest_yaml;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Features, IpFamily, Snapshot};
use kube_proxy_rs::dataplane::userspace::UserspaceDataplane;
use kube_proxy_rs::dataplane::userspace::plan::List;
use manifest_yaml::{DNS, HTTP, documents, node, ready, service, slice};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;

pub const STEP: Duration = Duration::from_secs(5);

/// A Node, a TCP Service `web` (port 80 → 8080) whose slice holds `web`, and a UDP Service
/// `dns` (port 53 → 5353) on 10.244.1.2, unless `with_web` is false. The `web` slice comes last,
/// so that a test may append to its list.
pub fn manifests(web: &[&str], with_web: bool) -> String {
    let mut docs = vec![
        node("node-a", "192.168.50.1", None),
        service("dns", "10.96.0.11", DNS, ""),
        slice("dns", DNS, &ready("10.244.1.2")),
    ];
    if with_web {
        let endpoints: String = web.iter().map(|ip| ready(ip)).collect();
        docs.push(service("web", "10.96.0.10", HTTP, ""));
        docs.push(slice("web", HTTP, &endpoints));
    }
    documents(&docs)
}

pub fn snapshot(dir: &Path, manifests: &str) -> Snapshot {
    #[allow(clippy::disallowed_methods, reason = "the test writes its manifests")]
    std::fs::write(dir.join("cluster.yaml"), manifests).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

/// Where the listener of `service`'s cluster-wide endpoints listens.
pub fn listener_of(dp: &UserspaceDataplane, service: &str) -> Option<SocketAddr> {
    dp.listening()
        .find(|(k, _)| &*k.port.service.name == service && k.list == List::Cluster)
        .map(|(_, at)| at)
}

/// The v4 operations a sync reported.
pub fn operations(report: &kube_proxy_rs::dataplane::SyncReport) -> usize {
    report
        .families
        .iter()
        .find(|f| f.family == Some(IpFamily::V4))
        .map_or(0, |f| f.operations)
}

pub async fn greeting(to: SocketAddr) -> (BufReader<TcpStream>, String) {
    let stream = TcpStream::connect(to).await.expect("the listener accepts");
    let mut stream = BufReader::new(stream);
    let mut line = String::new();
    timeout(STEP, stream.read_line(&mut line))
        .await
        .expect("a greeting in time")
        .expect("a greeting");
    (stream, line.trim_end().to_owned())
}
