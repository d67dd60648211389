//! The iptables planner and restore-input writer at 10,000 Services × 10 endpoints.
//!
//! - `plan`: both families' rulesets from a snapshot (every sync pays this: the iptables mode
//!   re-plans everything and diffs chain by chain).
//! - `full_input`: the full-sync restore input against a kernel holding nothing of ours.
//! - `one_endpoint_change_replan`: plan a snapshot where one endpoint moved from scratch and
//!   write the partial restore input from the previous plan.
//! - `one_endpoint_change`: the same, the plan reusing the previous plan's unchanged service
//!   ports (what the dataplane does; what a one-endpoint sync costs before `iptables-restore`).
//!
//! Run: `cargo bench --bench iptables`. Results go to docs/benchmarks.md.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::cluster::model::{
    Endpoint, FamilyView, IpFamily, NodeAddress, NodeContext, Protocol, ServiceKey, ServicePort,
    ServicePortName, ServicePortState, ServiceType, Snapshot, TrafficPolicy,
};
use kube_proxy_rs::cluster::topology::{self, Features};
use kube_proxy_rs::dataplane::iptables::{self, ModeConfig, diff};

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVICES: usize = 10_000;
const ENDPOINTS: usize = 10;
const NODES: usize = 100;

fn node() -> NodeContext {
    let mut n = NodeContext::named("node-0");
    n.known = true;
    n.addresses.push(NodeAddress {
        kind: "InternalIP".into(),
        ip: "10.0.0.1".parse().unwrap(),
    });
    n
}

fn port(i: usize) -> (ServicePort, FamilyView) {
    let port = ServicePort {
        name: ServicePortName {
            service: ServiceKey::new(&format!("ns-{}", i % 100), &format!("svc-{i}")),
            port: "http".into(),
            protocol: Protocol::Tcp,
        },
        service_type: ServiceType::ClusterIP,
        port: 80,
        node_port: None,
        affinity_timeout_seconds: None,
        internal_policy: TrafficPolicy::Cluster,
        external_policy: TrafficPolicy::Cluster,
        health_check_node_port: None,
        traffic_distribution: None,
        allocate_load_balancer_node_ports: true,
    };
    let endpoints = (0..ENDPOINTS)
        .map(|e| {
            let n = i * ENDPOINTS + e;
            Endpoint {
                ip: format!("10.{}.{}.{}", 128 + n / 65_536 % 64, n / 256 % 256, n % 256)
                    .parse()
                    .unwrap(),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                node_name: Some(format!("node-{}", n % NODES).into()),
                zone: None,
                zone_hints: vec![],
                node_hints: vec![],
                is_local: n.is_multiple_of(NODES),
            }
        })
        .collect();
    let view = FamilyView {
        family: IpFamily::V4,
        cluster_ip: format!("10.96.{}.{}", i / 250, i % 250 + 1)
            .parse()
            .unwrap(),
        external_ips: vec![],
        load_balancer_ips: vec![],
        load_balancer_source_ranges: vec![],
        endpoints,
        selection: Default::default(),
    };
    (port, view)
}

fn state(port: ServicePort, mut view: FamilyView, node: &NodeContext) -> Arc<ServicePortState> {
    view.endpoints.sort_by_key(|e| (e.ip, e.port));
    view.selection = topology::select(&view.endpoints, &port, false, node, Features::default());
    Arc::new(ServicePortState {
        port,
        families: vec![view],
    })
}

fn snapshot() -> Snapshot {
    let node = node();
    let ports: BTreeMap<_, _> = (0..SERVICES)
        .map(|i| {
            let (p, v) = port(i);
            (p.name.clone(), state(p, v, &node))
        })
        .collect();
    Snapshot {
        node: Arc::new(node),
        ports: Arc::new(ports),
    }
}

/// The snapshot with one endpoint of one Service replaced.
fn moved(snap: &Snapshot) -> Snapshot {
    let (p, mut v) = port(SERVICES / 2);
    v.endpoints[3].ip = "10.200.0.1".parse().unwrap();
    let mut ports = (*snap.ports).clone();
    ports.insert(p.name.clone(), state(p, v, &snap.node));
    Snapshot {
        node: snap.node.clone(),
        ports: Arc::new(ports),
    }
}

fn bench(c: &mut Criterion) {
    let cfg = ModeConfig::default();
    let snap = snapshot();
    let before = iptables::plan_all(&snap, &cfg);
    let after_snap = moved(&snap);
    let mut g = c.benchmark_group("iptables_10k_x_10");
    g.sample_size(10);
    g.bench_function("plan", |b| {
        b.iter(|| black_box(iptables::plan_all(&snap, &cfg)))
    });
    g.bench_function("full_input", |b| {
        b.iter(|| black_box(diff::full(&before[0], &BTreeMap::new()).text.len()))
    });
    g.bench_function("one_endpoint_change_replan", |b| {
        b.iter(|| {
            let want = iptables::plan_all(&after_snap, &cfg);
            let n: usize = before
                .iter()
                .zip(&want)
                .map(|(l, w)| diff::partial(l, w).text.len())
                .sum();
            black_box(n)
        })
    });
    // Each iteration moves the endpoint there or back: always one change from the last plan.
    let mut last = before.clone();
    let mut there = false;
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            there = !there;
            let next = if there { &after_snap } else { &snap };
            let want = [0, 1]
                .map(|i| iptables::plan_reusing(next, &cfg, IpFamily::ALL[i], Some(&last[i])));
            let n: usize = last
                .iter()
                .zip(&want)
                .map(|(l, w)| diff::partial(l, w).text.len())
                .sum();
            last = want;
            black_box(n)
        })
    });
    g.finish();
    let want = iptables::plan_all(&after_snap, &cfg);
    let partial = diff::partial(&before[0], &want[0]);
    let full = diff::full(&before[0], &BTreeMap::new());
    println!(
        "one endpoint change: {} chains, {} rules, {} bytes; full input: {} chains, {} rules, {} bytes",
        partial.chains,
        partial.rules,
        partial.text.len(),
        full.chains,
        full.rules,
        full.text.len()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
