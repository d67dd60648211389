//! The cluster the proxies are measured against: N Services × M endpoints, their EndpointSlices
//! (written directly, at most [`SLICE_CAPACITY`] endpoints each, with the trigger-time
//! annotation the EndpointSlice controller would set), the Node objects the endpoints sit on, and
//! one probe Service whose only endpoint is the harness's pod.
//!
//! Reproducible: every name and address is a function of the indices. Fast: the Services and
//! their slices are written to etcd by `testenv load`, in the API server's storage form, with
//! the IPAddress object the ClusterIP allocator would make. Through the API server, each Service
//! create scans every IPAddress twice for the allocator's metrics (kube-apiserver v1.37), so N
//! creates cost O(N²) (docs/benchmarks.md, "Scale harness").
//! The Nodes, the probe Service and its slice, and every change the harness measures go
//! through the API server ([`Options::concurrency`](super::options::Options) requests in flight
//! for the Nodes).
//!
//! Addresses (all owned by the harness; only the pod's are ever reached):
//! - ClusterIPs: `10.100.0.1` + i for Service i; the probe Service `10.99.0.10`.
//! - Endpoints: `100.64.1.0` + serial, a fresh serial for every endpoint ever written.
//! - The pod: [`POD_A`] and [`POD_B`] (in `100.127.255.0/24`), the proxy's node [`NODE_IP`].

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::SystemTime;

use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::options::Scale;
use crate::testenv::TestEnv;

/// Namespace of every harness object.
pub const NAMESPACE: &str = "scale";
/// Field manager of every write.
const MANAGER: &str = "kube-proxy-rs-scale";
/// Most endpoints per slice, as the EndpointSlice controller writes them.
pub const SLICE_CAPACITY: usize = 100;
/// Service port and endpoint (target) port.
pub const SERVICE_PORT: u16 = 80;
pub const TARGET_PORT: u16 = 8080;
/// The probe Service's ClusterIP.
pub const PROBE_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 10);
/// The pod's two addresses: the probe Service points at one, an endpoint change moves it.
pub const POD_A: Ipv4Addr = Ipv4Addr::new(100, 127, 255, 10);
pub const POD_B: Ipv4Addr = Ipv4Addr::new(100, 127, 255, 11);
/// The proxy's node address (InternalIP of node 0).
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 210, 2);
/// Every endpoint address is in here: the proxies' `--cluster-cidr`.
pub const CLUSTER_CIDR: &str = "100.64.0.0/10";

/// Node object `k`; node 0 is the one the proxy runs as.
pub fn node_name(k: usize) -> String {
    format!("scale-node-{k}")
}

fn service_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 100, 0, 1)) + u32::try_from(i).expect("few"))
}

fn endpoint_ip(serial: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(100, 64, 1, 0)) + serial)
}

/// The harness's objects in the API server, and the endpoint serials of every Service.
pub struct Cluster {
    client: Client,
    scale: Scale,
    nodes: usize,
    /// `serials[i][j]`: endpoint j of Service i.
    serials: Vec<Vec<u32>>,
    next_serial: u32,
    /// Endpoint changes written so far (picks the next Service to change).
    changes: usize,
    probe_on_a: bool,
}

impl Cluster {
    /// Creates the namespace and `nodes` Nodes through the API server, loads the Services and
    /// their slices with `testenv load` (see the module doc), and creates the probe Service
    /// and its slice through the API server.
    pub async fn create(
        env: &TestEnv,
        client: Client,
        scale: Scale,
        nodes: usize,
        concurrency: usize,
    ) -> Result<Cluster, String> {
        let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))
            .expect("namespace JSON");
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| format!("create namespace: {e}"))?;
        let node_api = Api::<Node>::all(client.clone());
        bulk(
            concurrency,
            (0..nodes).map(|k| (node_api.clone(), k)),
            |(api, k)| async move { create_node(&api, k).await },
        )
        .await?;

        let m = scale.endpoints;
        let serials: Vec<Vec<u32>> = (0..scale.services)
            .map(|i| {
                (0..m)
                    .map(|j| u32::try_from(i * m + j).expect("few"))
                    .collect()
            })
            .collect();
        let cluster = Cluster {
            next_serial: u32::try_from(scale.services * m).expect("few"),
            client,
            scale,
            nodes,
            serials,
            changes: 0,
            probe_on_a: true,
        };
        cluster.load(env).await?;
        let probe: Service = serde_json::from_value(service_json("probe", PROBE_IP)).unwrap();
        Api::<Service>::namespaced(cluster.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &probe)
            .await
            .map_err(|e| format!("create service probe: {e}"))?;
        let slice: EndpointSlice = serde_json::from_value(cluster.probe_slice(None)).unwrap();
        Api::<EndpointSlice>::namespaced(cluster.client.clone(), NAMESPACE)
            .create(&PostParams::default(), &slice)
            .await
            .map_err(|e| format!("create slice probe-0: {e}"))?;
        Ok(cluster)
    }

    /// Every Service and slice, one JSON object a line, into `testenv load`: it writes them to
    /// etcd and returns once the API server lists them all.
    async fn load(&self, env: &TestEnv) -> Result<(), String> {
        let path = env.state_dir.join("scale-objects.jsonl");
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        let chunks = self.scale.endpoints.div_ceil(SLICE_CAPACITY);
        let written = (0..self.scale.services).try_for_each(|i| {
            let svc = service_json(&format!("svc-{i}"), service_ip(i));
            writeln!(out, "{svc}")?;
            (0..chunks).try_for_each(|c| writeln!(out, "{}", self.slice_json(i, c, None)))
        });
        written
            .and_then(|()| out.flush())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        drop(out);
        let testenv = env.bin("testenv");
        let state = env.state_dir.clone();
        let file = path.clone();
        let run = tokio::task::spawn_blocking(move || {
            let input = std::fs::File::open(&file)?;
            Command::new(testenv)
                .arg("load")
                .arg(format!("--state={}", state.display()))
                .stdin(input)
                .output()
        });
        let out = run
            .await
            .map_err(|e| format!("testenv load: {e}"))?
            .map_err(|e| format!("run testenv load: {e}"))?;
        let _ = std::fs::remove_file(&path);
        if !out.status.success() {
            return Err(format!(
                "testenv load failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        eprint!("scale: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }

    /// Replaces one endpoint of the next Service in a fixed sequence with a fresh address.
    /// Returns when the API server has accepted the write.
    pub async fn change_one_endpoint(&mut self) -> Result<(), String> {
        let v = self.next_change();
        apply_slice(&self.client, v).await
    }

    /// The slice write of the next endpoint change, for callers that send it themselves.
    pub fn next_change(&mut self) -> Value {
        let k = self.changes;
        self.changes += 1;
        // A stride coprime with typical counts visits Services far apart in turn.
        let i = (k * 7919 + 13) % self.scale.services;
        let j = k % self.scale.endpoints;
        self.serials[i][j] = self.next_serial;
        self.next_serial += 1;
        self.slice_json(i, j / SLICE_CAPACITY, Some(SystemTime::now()))
    }

    /// Moves the probe Service's endpoint to the other pod address; returns the new address.
    pub async fn move_probe_endpoint(&mut self) -> Result<Ipv4Addr, String> {
        self.probe_on_a = !self.probe_on_a;
        let v = self.probe_slice(Some(SystemTime::now()));
        apply_slice(&self.client, v).await?;
        Ok(self.probe_ip())
    }

    /// Where the probe Service points now.
    pub fn probe_ip(&self) -> Ipv4Addr {
        if self.probe_on_a { POD_A } else { POD_B }
    }

    pub fn scale(&self) -> Scale {
        self.scale
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    fn slice_json(&self, i: usize, chunk: usize, trigger: Option<SystemTime>) -> Value {
        let endpoints: Vec<Value> = self.serials[i]
            .iter()
            .enumerate()
            .skip(chunk * SLICE_CAPACITY)
            .take(SLICE_CAPACITY)
            .map(|(j, s)| endpoint_json(endpoint_ip(*s), &node_name((i + j) % self.nodes)))
            .collect();
        slice_json(
            &format!("svc-{i}-{chunk}"),
            &format!("svc-{i}"),
            endpoints,
            trigger,
        )
    }

    fn probe_slice(&self, trigger: Option<SystemTime>) -> Value {
        let ep = endpoint_json(self.probe_ip(), &node_name(0));
        slice_json("probe-0", "probe", vec![ep], trigger)
    }
}

fn service_json(name: &str, ip: Ipv4Addr) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "type": "ClusterIP",
            "clusterIP": ip.to_string(),
            "ports": [{ "port": SERVICE_PORT, "targetPort": TARGET_PORT, "protocol": "TCP" }],
        },
    })
}

fn endpoint_json(ip: Ipv4Addr, node: &str) -> Value {
    json!({
        "addresses": [ip.to_string()],
        "nodeName": node,
        "conditions": { "ready": true, "serving": true, "terminating": false },
    })
}

fn slice_json(
    name: &str,
    service: &str,
    endpoints: Vec<Value>,
    trigger: Option<SystemTime>,
) -> Value {
    let mut v = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": service,
                "endpointslice.kubernetes.io/managed-by": MANAGER,
            },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "", "port": TARGET_PORT, "protocol": "TCP" }],
        "endpoints": endpoints,
    });
    if let Some(t) = trigger {
        // What the EndpointSlice controller writes: when the change that made this version
        // happened. Both proxies' network programming latency starts here.
        let ts = k8s_openapi::jiff::Timestamp::try_from(t).expect("time after 1970");
        v["metadata"]["annotations"] =
            json!({ "endpoints.kubernetes.io/last-change-trigger-time": ts.to_string() });
    }
    v
}

/// Server-side apply of a slice (create or replace).
pub async fn apply_slice(client: &Client, v: Value) -> Result<(), String> {
    let name = v["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Api::<EndpointSlice>::namespaced(client.clone(), NAMESPACE)
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&v),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("apply slice {name}: {e}"))
}

async fn create_node(api: &Api<Node>, k: usize) -> Result<(), String> {
    let name = node_name(k);
    let ip = if k == 0 {
        NODE_IP
    } else {
        // 192.168.211.0/24 and on: addresses nobody uses, for nodes nothing runs on.
        Ipv4Addr::from(u32::from(Ipv4Addr::new(192, 168, 211, 0)) + u32::try_from(k).expect("few"))
    };
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
    }))
    .unwrap();
    api.create(&PostParams::default(), &node)
        .await
        .map_err(|e| format!("create node {name}: {e}"))?;
    let status = json!({ "status": {
        "addresses": [{ "type": "InternalIP", "address": ip.to_string() }],
        "conditions": [{ "type": "Ready", "status": "True", "reason": "KubeletReady" }],
    }});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map(|_| ())
        .map_err(|e| format!("patch status of node {name}: {e}"))
}

/// Runs `job` over `items` with `concurrency` in flight; the first error stops it.
async fn bulk<I, T, F, Fut>(concurrency: usize, items: I, job: F) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    futures::stream::iter(items.into_iter().map(job))
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}
