//! Times the nftables applier against the real kernel (root), for both encoders (netlink and
//! `nft -f` text) in one run: cold apply into an empty network namespace, one endpoint change
//! (a steady-state sync through the incremental planner, with the tracker-style changes naming
//! the one service port; once, then repeated), and a restart's adoption (dump and parse), at
//! 1,000 Services × 10 endpoints, 10,000 × 10, 44,000 × 1 and 5,000 × 50. Not a test: timings
//! are reported, never asserted.
//!
//! Run: `sudo cargo run --release --example nftables_apply [SERVICES ENDPOINTS ...]`; set
//! `ENCODERS=netlink` (or `nft`) to time one encoder only. Each size and encoder runs in its
//! own namespace `nfa-bench-<pid>`, deleted afterwards. Results go to docs/benchmarks.md.
//!
//! `MONITOR` says who listens to the namespace's nf_tables notifications meanwhile, because a
//! listener makes the kernel build one notification per element of every batch:
//! `none` (the default: nobody in this run; other processes on the host still count, since the
//! kernel asks whether anyone listens per protocol, not per namespace), `nft` (an
//! `nft monitor` process, a listener we cannot pause), or `ours` (the proxy's own monitor,
//! which large transactions pause).

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock and runs ip"
)]

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_proxy_rs::cluster::Changes;
use kube_proxy_rs::cluster::model::{
    Endpoint, FamilyView, IpFamily, NodeAddress, NodeContext, Protocol, ServiceKey, ServicePort,
    ServicePortName, ServicePortState, ServiceType, Snapshot, TrafficPolicy,
};
use kube_proxy_rs::cluster::topology::{self, Features};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::nftables::adopt::Parsed;
use kube_proxy_rs::dataplane::nftables::backend::{self, Backend};
use kube_proxy_rs::dataplane::nftables::{
    Drift, Family, ModeConfig, NftablesDataplane, Ruleset, Transaction, backend::monitor, plan_all,
};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A real backend, timing each apply and dump.
struct Timed {
    inner: Box<dyn Backend>,
    run: Duration,
    dump: Duration,
}

impl Backend for Timed {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), backend::Error> {
        let t = Instant::now();
        let r = self.inner.run(transactions);
        self.run += t.elapsed();
        r
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, backend::Error> {
        let t = Instant::now();
        let r = self.inner.dump(family);
        self.dump += t.elapsed();
        r
    }

    fn dump_expecting(
        &mut self,
        family: Family,
        want: &Ruleset,
    ) -> Result<Option<Parsed>, backend::Error> {
        let t = Instant::now();
        let r = self.inner.dump_expecting(family, want);
        self.dump += t.elapsed();
        r
    }

    fn watched_by(&mut self, drift: std::sync::Arc<Drift>) {
        self.inner.watched_by(drift)
    }
}

struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("nfa-bench-{}", std::process::id());
        let ok = Command::new("ip").args(["netns", "add", &name]).status();
        assert!(ok.is_ok_and(|s| s.success()), "ip netns add (root?)");
        Netns(name)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn node() -> NodeContext {
    let mut n = NodeContext::named("node-0");
    n.known = true;
    n.addresses.push(NodeAddress {
        kind: "InternalIP".into(),
        ip: "10.0.0.1".parse().unwrap(),
    });
    n
}

/// One-endpoint syncs timed after the first, alternating the endpoint back and forth.
const REPEATS: usize = 20;

/// Service `i`'s one port.
fn port_name(i: usize) -> ServicePortName {
    ServicePortName {
        service: ServiceKey::new(&format!("ns-{}", i % 100), &format!("svc-{i}")),
        port: "http".into(),
        protocol: Protocol::Tcp,
    }
}

/// Service `i` (ClusterIP, TCP 80) with `endpoints` endpoints; `shift` moves one endpoint.
fn state(i: usize, endpoints: usize, shift: bool, node: &NodeContext) -> Arc<ServicePortState> {
    let port = ServicePort {
        name: port_name(i),
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
    let mut eps: Vec<Endpoint> = (0..endpoints)
        .map(|e| {
            let n = i * endpoints + e;
            Endpoint {
                ip: format!("10.{}.{}.{}", 128 + n / 65_536 % 64, n / 256 % 256, n % 256)
                    .parse()
                    .unwrap(),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                node_name: Some(format!("node-{}", n % 100).into()),
                zone: None,
                zone_hints: vec![],
                node_hints: vec![],
                is_local: n.is_multiple_of(100),
            }
        })
        .collect();
    if shift {
        eps[0].ip = "10.200.0.1".parse().unwrap();
    }
    eps.sort_by_key(|e| (e.ip, e.port));
    let selection = topology::select(&eps, &port, false, node, Features::default());
    let view = FamilyView {
        family: IpFamily::V4,
        cluster_ip: format!("10.{}.{}.{}", 96 + i / 64_000, i / 250 % 256, i % 250 + 1)
            .parse()
            .unwrap(),
        external_ips: vec![],
        load_balancer_ips: vec![],
        load_balancer_source_ranges: vec![],
        endpoints: eps,
        selection,
    };
    Arc::new(ServicePortState {
        port,
        families: vec![view],
    })
}

fn snapshot(services: usize, endpoints: usize, shifted: Option<usize>) -> Snapshot {
    let node = node();
    let ports: BTreeMap<_, _> = (0..services)
        .map(|i| {
            let s = state(i, endpoints, shifted == Some(i), &node);
            (s.port.name.clone(), s)
        })
        .collect();
    Snapshot {
        node: Arc::new(node),
        ports: Arc::new(ports),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn dataplane(ns: &Netns, encoder: NftablesEncoder, drift: Arc<Drift>) -> NftablesDataplane<Timed> {
    let backend = Timed {
        inner: backend::for_encoder(encoder, Some(&ns.0)),
        run: Duration::ZERO,
        dump: Duration::ZERO,
    };
    NftablesDataplane::with_backend(ModeConfig::default(), backend, drift)
}

/// Who listens to nf_tables notifications during a measurement (`MONITOR`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Listener {
    None,
    Nft,
    Ours,
}

/// A listener running in the namespace until dropped.
enum Listening {
    None,
    Nft(std::process::Child),
    /// The runtime the monitor task runs on; dropping it stops the monitor.
    Ours {
        _runtime: tokio::runtime::Runtime,
    },
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Listening::Nft(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `listener` in `ns`, reporting to `drift`, and returns once it listens.
fn listen(listener: Listener, ns: &Netns, drift: &Arc<Drift>) -> Listening {
    match listener {
        Listener::None => Listening::None,
        Listener::Nft => {
            let child = Command::new("ip")
                .args(["netns", "exec", &ns.0, "nft", "monitor"])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("nft monitor");
            // It subscribes right after start; give it the time to.
            std::thread::sleep(Duration::from_millis(500));
            Listening::Nft(child)
        }
        Listener::Ours => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.spawn(monitor::run(Some(ns.0.clone()), drift.clone()));
            // It serves pause requests once subscribed; one answered pause says it listens.
            let deadline = Instant::now() + Duration::from_secs(5);
            while drift.pause_monitor().is_none() {
                assert!(Instant::now() < deadline, "the monitor did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
            Listening::Ours { _runtime: runtime }
        }
    }
}

/// This process's peak resident memory (`VmHWM`), in MB.
fn peak_rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

fn measure(services: usize, endpoints: usize, encoder: NftablesEncoder, listener: Listener) {
    println!(
        "== {services} services x {endpoints} endpoints, encoder {encoder:?}, listener {listener:?}"
    );
    let ns = Netns::new();
    let drift = Drift::new();
    let listening = listen(listener, &ns, &drift);
    let pauses_before = drift.pauses();
    let cfg = ModeConfig::default();
    let snap = snapshot(services, endpoints, None);
    let moved = snapshot(services, endpoints, Some(services / 2));
    let t = Instant::now();
    let planned = plan_all(&snap, &cfg);
    println!("plan (both families): {}", ms(t.elapsed()));
    let objects: usize = planned.iter().map(|r| r.objects()).sum();

    let mut dp = dataplane(&ns, encoder, drift.clone());
    let t = Instant::now();
    let r = dp.sync(&snap, &Changes::default(), true).expect("cold");
    let total = t.elapsed();
    let b = dp.applier().backend();
    println!(
        "cold apply: total {} (backend run {}, empty-table probe {}), {} operations, {} objects",
        ms(total),
        ms(b.run),
        ms(b.dump),
        r.families.iter().map(|f| f.operations).sum::<usize>(),
        objects,
    );

    // What the tracker reports for this change: the one service port.
    let changes = Changes {
        ports: [port_name(services / 2)].into(),
        ..Changes::default()
    };
    let b = dp.applier_mut().backend_mut();
    b.run = Duration::ZERO;
    let t = Instant::now();
    let r = dp.sync(&moved, &changes, false).expect("one change");
    let total = t.elapsed();
    assert!(!r.full, "a steady-state sync");
    let b = dp.applier().backend();
    println!(
        "one endpoint change: total {} (backend run {}), {} operations",
        ms(total),
        ms(b.run),
        r.families.iter().map(|f| f.operations).sum::<usize>(),
    );

    let mut totals = Vec::with_capacity(REPEATS);
    let mut runs = Vec::with_capacity(REPEATS);
    for k in 0..REPEATS {
        let next = if k % 2 == 0 { &snap } else { &moved };
        dp.applier_mut().backend_mut().run = Duration::ZERO;
        let t = Instant::now();
        let r = dp.sync(next, &changes, false).expect("one change");
        totals.push(t.elapsed());
        runs.push(dp.applier().backend().run);
        assert!(!r.full, "a steady-state sync");
    }
    totals.sort();
    runs.sort();
    println!(
        "one endpoint change x{REPEATS}: total median {} (min {}, max {}), backend run median {}",
        ms(totals[REPEATS / 2]),
        ms(totals[0]),
        ms(totals[REPEATS - 1]),
        ms(runs[REPEATS / 2])
    );

    let mut restarted = dataplane(&ns, encoder, drift.clone());
    let t = Instant::now();
    let r = restarted
        .sync(&moved, &Changes::default(), true)
        .expect("adopt");
    let total = t.elapsed();
    let b = restarted.applier().backend();
    println!(
        "restart (adopt, nothing changed): total {} (dump and parse {}), {} operations",
        ms(total),
        ms(b.dump),
        r.families.iter().map(|f| f.operations).sum::<usize>()
    );
    if listener == Listener::Ours {
        println!(
            "monitor paused for {} of these syncs",
            drift.pauses() - pauses_before
        );
    }
    drop(listening);
    println!("peak RSS of this process so far: {} MB", peak_rss_mb());
}

fn main() {
    // The dataplane's own logs (a monitor pause, a full sync it asks for), with `RUST_LOG`.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: SERVICES ENDPOINTS ..."))
        .collect();
    let sizes: Vec<(usize, usize)> = if args.is_empty() {
        vec![(1_000, 10), (10_000, 10), (44_000, 1), (5_000, 50)]
    } else {
        args.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    let encoders: Vec<NftablesEncoder> = match std::env::var("ENCODERS").as_deref() {
        Ok("netlink") => vec![NftablesEncoder::Netlink],
        Ok("nft") => vec![NftablesEncoder::Nft],
        _ => vec![NftablesEncoder::Netlink, NftablesEncoder::Nft],
    };
    let listener = match std::env::var("MONITOR").as_deref() {
        Ok("nft") => Listener::Nft,
        Ok("ours") => Listener::Ours,
        Ok("none") | Err(_) => Listener::None,
        Ok(other) => panic!("MONITOR={other}: accepted values are none, nft, ours"),
    };
    for (s, e) in sizes {
        for encoder in &encoders {
            measure(s, e, *encoder, listener);
        }
    }
}
