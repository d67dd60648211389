//! Times the userspace relay against the paths without it, in a fresh network
//! namespace (root): bulk TCP throughput through the relay against a direct connection to the
//! pod, connections per second through the relay against a direct connection and against one
//! kernel DNAT rule (the NAT modes' path), connections per second to a ClusterIP programmed by
//! the nftables mode against the same ClusterIP programmed by the userspace mode (its redirect
//! rule, then the relay) and by the eBPF mode (its socket programs, in a cgroup the harness
//! joins for that run), all by the proxy's own dataplanes from one Service and its
//! EndpointSlice, and the latency one request/response round trip gains through the relay
//! (p50, p99). The relay runs on a runtime of its own, on one thread pinned to CPU 1, so
//! "one core" is what it gets; the pods and the client have threads of their own on CPU 0.
//! Memory per idle relayed connection is measured by `tests/userspace_relay_memory.rs`.
//!
//! The pods listen on 10.244.0.2, an address the harness puts on the namespace's `lo`.
//!
//! Run: `sudo cargo run --release --example userspace_relay`. Not a test: numbers are reported,
//! never asserted. Everything happens on the namespace's loopback; the namespace is deleted
//! afterwards, also when a step fails. Results go to docs/benchmarks.md.

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock and runs nft"
)]

use support::manifest_yaml;
use support::netns;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube_proxy_rs::config::{Config, ProxyMode};
use kube_proxy_rs::dataplane::userspace::relay::{Relay, Settings, Target};
use manifest_yaml::{CLUSTER_IP_V4, HTTP, Port, documents, node, service, serving_on, slice};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Bytes each bulk download carries.
const BULK: usize = 1 << 30;
/// How long each connections-per-second run lasts.
const CPS_RUN: Duration = Duration::from_secs(3);
/// Round trips per latency run.
const ROUND_TRIPS: usize = 20_000;

const SOURCE: &str = "10.244.0.2:8080";
const GREETER: &str = "10.244.0.2:8081";
const ECHO: &str = "10.244.0.2:8082";
/// How long one connection may take before the harness gives up rather than hangs.
const STEP: Duration = Duration::from_secs(5);
/// The "ClusterIP" the kernel DNAT rule sends to the greeter.
const CLUSTER_IP: &str = "10.96.0.1:80";
/// The ClusterIP of the Service the proxy's dataplanes program, whose endpoint is the greeter.
const SERVICE_IP: &str = "10.96.0.20:80";

/// The node, the greeter's Service and its EndpointSlice, as the dataplanes read them.
fn cluster() -> String {
    let port = Port {
        name: "g",
        target: 8081,
        ..HTTP
    };
    documents(&[
        node("bench", "192.168.50.1", None),
        service("greeter", "10.96.0.20", port, CLUSTER_IP_V4),
        slice("greeter", port, &serving_on("10.244.0.2", "bench")),
    ])
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn main() {
    netns::require_root();
    machine_cpus();
    let ns = netns::NetNs::new("kprs-relay-bench");
    for args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", "10.244.0.2/32", "dev", "lo"],
        &["route", "add", "10.96.0.1/32", "dev", "lo"],
    ] {
        ns.output("ip", args);
    }
    let rules = "table ip relay-bench {\n\
        chain output { type nat hook output priority -100; \
        ip daddr 10.96.0.1 tcp dport 80 dnat to 10.244.0.2:8081; }\n}\n";
    ns.output_fed("nft", &["-f", "-"], rules);
    kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        measure();
        Ok(())
    })
    .expect("the measurement inside the namespace");
    drop(ns);
    by_mode_over_veths();
}

/// Connections per second from a client namespace to a ClusterIP, through a node namespace
/// whose rules the proxy's own dataplanes program for [`cluster`], to a pod namespace: each
/// over a veth, as on a node (the node routes between them). The nftables mode DNATs (and
/// masquerades: the client is outside the cluster CIDR); the userspace mode's redirect rule
/// sends the connection to the relay's listener, which dials the pod.
fn by_mode_over_veths() {
    let node = netns::NetNs::new("kprs-bench-node");
    let client = netns::NetNs::new("kprs-bench-client");
    let pod = netns::NetNs::new("kprs-bench-pod");
    node.veth_to("to-client", &client);
    node.veth_to("to-pod", &pod);
    for args in [
        &["addr", "add", "192.168.50.1/24", "dev", "to-client"][..],
        &["addr", "add", "10.244.0.1/24", "dev", "to-pod"],
        &["link", "set", "to-client", "up"],
        &["link", "set", "to-pod", "up"],
    ] {
        node.output("ip", args);
    }
    node.output("sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
    for (ns, address, gateway) in [
        (&client, "192.168.50.2/24", "192.168.50.1"),
        (&pod, "10.244.0.2/24", "10.244.0.1"),
    ] {
        ns.output("ip", &["addr", "add", address, "dev", "eth0"]);
        ns.output("ip", &["link", "set", "eth0", "up"]);
        ns.output("ip", &["route", "add", "default", "via", gateway]);
    }
    let pod_ns = pod.name.clone();
    std::thread::spawn(move || {
        kube_proxy_rs::netlink::netns::run_in(Some(&pod_ns), || {
            pin(0);
            runtime().block_on(pods());
            Ok(())
        })
    });
    println!(
        "== connections per second to a ClusterIP, client and pod over veths, by mode, {CPS_RUN:?} each"
    );
    // The pod's thread may not be listening yet.
    in_client(&client, || async {
        let started = Instant::now();
        while TcpStream::connect(addr(GREETER)).await.is_err() {
            assert!(started.elapsed() < STEP, "the pod listens over its veth");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        0.0
    });
    let direct = in_client(&client, || cps(addr(GREETER)));
    let nftables = cps_in_mode(ProxyMode::Nftables, &node, &client);
    let userspace = cps_in_mode(ProxyMode::Userspace, &node, &client);
    // The eBPF mode balances sockets of its cgroup: this process joins one of its own, where
    // the mode's programs attach (pinned on a private bpffs), for this run only.
    let ebpf = {
        let _cgroup = BenchCgroup::join();
        cps_in_mode(ProxyMode::Ebpf, &node, &client)
    };
    println!(
        "direct to the pod {direct:.0}/s, nftables mode {nftables:.0}/s, userspace mode \
         {userspace:.0}/s ({:.0} % of nftables mode), ebpf mode {ebpf:.0}/s ({:.0} % of \
         nftables mode)",
        100.0 * userspace / nftables,
        100.0 * ebpf / nftables
    );
}

/// A cgroup v2 child this process joins and a private bpffs, for the eBPF mode's run: its
/// programs attach to the child (only this process's sockets are balanced) and pin on the
/// bpffs; dropped, the process is back in the root, the child and the mount are gone (and
/// with the mount every pin, so every program is detached), also when the run panics.
struct BenchCgroup {
    root: std::path::PathBuf,
    child: std::path::PathBuf,
    pins: std::path::PathBuf,
}

impl BenchCgroup {
    fn join() -> BenchCgroup {
        let root = kube_proxy_rs::dataplane::ebpf::backend::default_cgroup();
        let id = std::process::id();
        let guard = BenchCgroup {
            child: root.join(format!("kprs-relay-bench-{id}")),
            root,
            pins: std::env::temp_dir().join(format!("kprs-relay-bench-bpf-{id}")),
        };
        std::fs::create_dir(&guard.child).expect("create a cgroup");
        std::fs::create_dir_all(&guard.pins).expect("a bpffs mount point");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(&guard.pins)
            .status()
            .expect("mount");
        assert!(mounted.success(), "mount a bpffs");
        std::fs::write(guard.child.join("cgroup.procs"), id.to_string()).expect("join it");
        guard
    }
}

impl Drop for BenchCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.child);
        let _ = std::process::Command::new("umount")
            .arg(&self.pins)
            .status();
        let _ = std::fs::remove_dir(&self.pins);
    }
}

/// Runs `work` on a runtime of its own inside the client's namespace.
fn in_client<F, Fut>(client: &netns::NetNs, work: F) -> f64
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = f64>,
{
    kube_proxy_rs::netlink::netns::run_in(Some(&client.name), || {
        pin(0);
        Ok(runtime().block_on(work()))
    })
    .expect("the client's run")
}

/// Pins the calling thread to `cpu`, when the machine has more than one: the relay gets a
/// core of its own, the pods and the client share the other, so "one core" is what the relay
/// has and the direct path is not given more cores than the relayed one. No-op on one CPU.
fn pin(cpu: usize) {
    let cpus = machine_cpus();
    if cpus < 2 {
        return;
    }
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu.min(cpus - 1)).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
    }
}

/// The machine's CPUs, counted once before any thread is pinned: a thread's count is its own
/// affinity's, which a thread started from a pinned one inherits (the relay's thread, started
/// from the measuring thread pinned to CPU 0, counted one CPU and so stayed on CPU 0 with the
/// client and the pods: every figure before the fix gave the relay no core of its own).
fn machine_cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The relay's CPU; the pods and the client run on CPU 0.
const RELAY_CPU: usize = 1;

fn measure() {
    pin(0);
    // The pods, on a thread and runtime of their own.
    std::thread::spawn(|| {
        pin(0);
        runtime().block_on(pods())
    });
    // The relay, alone on its thread and its core: one listener per pod port.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        pin(RELAY_CPU);
        runtime().block_on(async move {
            let relay = Relay::new(Settings::default());
            let listeners: Vec<_> = [SOURCE, GREETER, ECHO]
                .iter()
                .map(|pod| {
                    let target = Target {
                        name: format!("bench/{pod}").into(),
                        endpoints: vec![addr(pod)],
                        affinity: None,
                        limit: relay.service_limit(),
                    };
                    relay
                        .listen_tcp(addr("127.0.0.1:0"), target)
                        .expect("the relay listens")
                })
                .collect();
            tx.send(listeners.iter().map(|l| l.local_addr()).collect::<Vec<_>>())
                .expect("main waits");
            std::future::pending::<()>().await;
            drop(listeners);
        })
    });
    let relayed = rx.recv().expect("the relay's listeners");
    let (via_source, via_greeter, via_echo) = (relayed[0], relayed[1], relayed[2]);

    runtime().block_on(async {
        // The pods' thread may not be listening yet (a refused first connect was seen).
        let started = Instant::now();
        while TcpStream::connect(addr(ECHO)).await.is_err() {
            assert!(started.elapsed() < STEP, "the pods listen");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("== bulk TCP download, {} MiB each, best of 3", BULK >> 20);
        let direct = best_of_3(|| bulk(addr(SOURCE))).await;
        let relay = best_of_3(|| bulk(via_source)).await;
        println!(
            "direct {direct:.2} Gbit/s, through the relay {relay:.2} Gbit/s ({:.0} %)",
            100.0 * relay / direct
        );

        println!("== connections per second, one after another, {CPS_RUN:?} each");
        let direct = cps(addr(GREETER)).await;
        let dnat = cps(addr(CLUSTER_IP)).await;
        let relay = cps(via_greeter).await;
        println!(
            "direct {direct:.0}/s, kernel DNAT rule {dnat:.0}/s, through the relay {relay:.0}/s \
             ({:.0} % of DNAT)",
            100.0 * relay / dnat
        );

        println!("== request/response round trips of 64 bytes, {ROUND_TRIPS} each");
        let (d50, d99) = latency(addr(ECHO)).await;
        let (r50, r99) = latency(via_echo).await;
        println!(
            "direct p50 {d50:?} p99 {d99:?}; through the relay p50 {r50:?} p99 {r99:?}; \
             added p50 {:?} p99 {:?}",
            r50.saturating_sub(d50),
            r99.saturating_sub(d99)
        );
    });
}

/// Connections per second from the client to [`SERVICE_IP`] as `mode`'s dataplane programs it
/// for [`cluster`] in the node's namespace: the nftables mode's rules alone, or the userspace
/// mode's redirect rule and relay (on a thread and current-thread runtime of its own, as in the
/// other runs). The mode's tables are removed afterwards, so the next mode starts clean.
fn cps_in_mode(mode: ProxyMode, node: &netns::NetNs, client: &netns::NetNs) -> f64 {
    let dir = std::env::temp_dir().join(format!("kprs-relay-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    std::fs::write(dir.join("cluster.yaml"), cluster()).expect("the cluster's manifests");
    let loaded = kube_proxy_rs::cli::load_manifests(&dir, "bench", Default::default())
        .expect("the bench's manifests load");
    let _ = std::fs::remove_dir_all(&dir);
    let id = std::process::id();
    let config = Config {
        mode,
        cluster_cidrs: vec!["10.244.0.0/16".parse().expect("a CIDR")],
        // Only read in ebpf mode: the cgroup and bpffs of [`BenchCgroup`].
        bpf_cgroup: Some(
            kube_proxy_rs::dataplane::ebpf::backend::default_cgroup()
                .join(format!("kprs-relay-bench-{id}")),
        ),
        bpf_pin_root: Some(
            std::env::temp_dir()
                .join(format!("kprs-relay-bench-bpf-{id}"))
                .join("kube-proxy-rs"),
        ),
        ..Config::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let node_ns = node.name.clone();
    let proxy = std::thread::spawn(move || {
        kube_proxy_rs::netlink::netns::run_in(Some(&node_ns), || {
            pin(RELAY_CPU);
            runtime().block_on(async move {
                let mut dataplane = kube_proxy_rs::dataplane::modes::of(config.mode)
                    .start(&config)
                    .expect("the mode's dataplane")
                    .dataplane;
                let synced = dataplane.sync(&loaded.snapshot, &Default::default(), true);
                tx.send(synced.map(|_| ()).map_err(|e| e.to_string()))
                    .expect("main waits");
                let _ = stop_rx.await;
                drop(dataplane);
            });
            Ok(())
        })
    });
    rx.recv()
        .expect("the proxy thread answers")
        .unwrap_or_else(|e| panic!("{} mode's sync: {e}", mode.as_str()));
    let rate = in_client(client, || cps(addr(SERVICE_IP)));
    let _ = stop_tx.send(());
    proxy
        .join()
        .expect("the proxy thread ends")
        .expect("the proxy thread's namespace");
    if mode != ProxyMode::Ebpf {
        for family in ["ip", "ip6"] {
            node.output("nft", &["delete", "table", family, "kube-proxy-rs"]);
        }
    }
    rate
}

async fn best_of_3<F, Fut>(mut run: F) -> f64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    let mut best: f64 = 0.0;
    for _ in 0..3 {
        best = best.max(run().await);
    }
    best
}

/// Reads `BULK` bytes from the source pod at `to`; Gbit/s.
async fn bulk(to: SocketAddr) -> f64 {
    let mut s = TcpStream::connect(to).await.expect("connect");
    let mut buf = vec![0u8; 256 * 1024];
    let start = Instant::now();
    let mut got = 0;
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        got += n;
    }
    assert_eq!(got, BULK, "the whole download arrived");
    (got as f64 * 8.0) / start.elapsed().as_secs_f64() / 1e9
}

/// Connections per second to the greeter at `to`: connect, read its byte, close.
async fn cps(to: SocketAddr) -> f64 {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < CPS_RUN {
        let step = async {
            let mut s = TcpStream::connect(to).await.expect("connect");
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.expect("the greeting");
        };
        tokio::time::timeout(STEP, step)
            .await
            .unwrap_or_else(|_| panic!("connection {n} to {to} took over {STEP:?}"));
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// p50 and p99 of a 64-byte round trip over one connection to the echo pod at `to`.
async fn latency(to: SocketAddr) -> (Duration, Duration) {
    let mut s = TcpStream::connect(to).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let msg = [7u8; 64];
    let mut back = [0u8; 64];
    let mut samples = Vec::with_capacity(ROUND_TRIPS);
    for i in 0..ROUND_TRIPS + 1000 {
        let start = Instant::now();
        s.write_all(&msg).await.expect("write");
        s.read_exact(&mut back).await.expect("echo");
        if i >= 1000 {
            samples.push(start.elapsed()); // the first 1,000 warm up
        }
    }
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

/// The source (sends `BULK` bytes, then closes), the greeter (one byte, then closes) and the
/// echo pod (sends back what it reads).
async fn pods() {
    let source = TcpListener::bind(SOURCE).await.expect("source pod");
    let greeter = TcpListener::bind(GREETER).await.expect("greeter pod");
    let echo = TcpListener::bind(ECHO).await.expect("echo pod");
    let sources = async {
        let chunk = vec![1u8; 256 * 1024];
        while let Ok((mut s, _)) = source.accept().await {
            let chunk = chunk.clone();
            tokio::spawn(async move {
                let mut left = BULK;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    };
    let greeters = async {
        while let Ok((mut s, _)) = greeter.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"g").await;
            });
        }
    };
    let echoes = async {
        while let Ok((mut s, _)) = echo.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    };
    tokio::join!(sources, greeters, echoes);
}
