//! Times the eBPF mode on the host kernel (root): how long syncs take at 1,000,
//! 10,000 and 30,000 Services of 10 endpoints (the first, cold sync; an idle one; one endpoint
//! moved), and what a TCP connect() to a ClusterIP balanced by the socket programs costs
//! against a direct connect() to the pod (the no-rules floor) and against one nftables DNAT
//! rule (the NAT modes' path), with those Services in the maps: the median connect() time,
//! and connections per second from one client (connect, accept, close with a reset so no
//! TIME_WAIT piles up, one after another for [`CPS_WINDOW`]). The DNAT rule is a lower bound
//! of the nftables mode's cost per connection: that mode's lookups are verdict maps, and the
//! cost that grows with connections (a conntrack entry and NAT per connection) is the same.
//!
//! Isolation as in `tests/ebpf_mode.rs`: the programs attach to a cgroup v2 child this harness
//! creates and joins (so only its own sockets are balanced), pins go to a private bpffs
//! instance on a scratch directory (unmounted at the end), and the pod listens on a fresh
//! network namespace's `lo`. Everything is removed afterwards, also when a step fails.
//!
//! Run: `sudo cargo run --release --example ebpf_mode`. Not a test: numbers are reported,
//! never asserted. Results go to docs/benchmarks.md.

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock, runs mount and nft, writes cgroup files"
)]

use support::netns;
use support::synthetic;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_proxy_rs::cluster::model::{
    Endpoint, FamilyView, IpFamily, ServiceKey, ServicePortName, Snapshot,
};
use kube_proxy_rs::cluster::{Changes, Protocol};
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::EbpfDataplane;
use kube_proxy_rs::dataplane::ebpf::backend::{self, Kernel, Settings};
use synthetic::Synthetic;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const POD: &str = "10.244.0.2:8080";
/// The Service the socket programs balance to the pod.
const BENCH_VIP: &str = "10.94.0.1:80";
/// The address the nftables DNAT rule sends to the pod.
const DNAT_VIP: &str = "10.95.0.1:80";
const CONNECTS: usize = 4000;
/// How long connections per second are counted for, per path.
const CPS_WINDOW: Duration = Duration::from_secs(2);

struct Cleanup {
    cgroup: PathBuf,
    root: PathBuf,
    bpffs: PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        // Back to the root first: a cgroup with a process in it cannot be removed.
        let _ = std::fs::write(
            self.root.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.cgroup);
        let _ = Command::new("umount").arg(&self.bpffs).status();
        let _ = std::fs::remove_dir(&self.bpffs);
    }
}

fn main() {
    netns::require_root();
    let root = backend::default_cgroup();
    let id = std::process::id();
    let guard = Cleanup {
        cgroup: root.join(format!("kprs-ebpf-bench-{id}")),
        root,
        bpffs: std::env::temp_dir().join(format!("kprs-ebpf-bench-{id}")),
    };
    std::fs::create_dir(&guard.cgroup).expect("create cgroup");
    std::fs::create_dir_all(&guard.bpffs).expect("create bpffs mount point");
    let mounted = Command::new("mount")
        .args(["-t", "bpf", "bpf"])
        .arg(&guard.bpffs)
        .status()
        .expect("mount");
    assert!(mounted.success(), "mount bpffs");
    std::fs::write(guard.cgroup.join("cgroup.procs"), id.to_string()).expect("join cgroup");

    let ns = netns::NetNs::new("kprs-ebpf-bench");
    ns.output("ip", &["addr", "add", "10.244.0.2/32", "dev", "lo"]);
    ns.output("ip", &["route", "add", "10.95.0.0/16", "dev", "lo"]);
    ns.output(
        "sysctl",
        &["-qw", "net.ipv4.ip_local_port_range=1024 65000"],
    );
    let rules = "table ip ebpf-bench {\n\
        chain output { type nat hook output priority -100; \
        ip daddr 10.95.0.1 tcp dport 80 dnat to 10.244.0.2:8080; }\n}\n";
    ns.output_fed("nft", &["-f", "-"], rules);

    kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        measure(&guard.cgroup, &guard.bpffs);
        Ok(())
    })
    .expect("the measurement inside the namespace");
}

fn measure(cgroup: &Path, bpffs: &Path) {
    let listener = TcpListener::bind(POD).expect("bind pod");
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let floor = connect_p50(POD);
    let dnat = connect_p50(DNAT_VIP);
    println!(
        "connect() p50 over {CONNECTS}: direct to the pod {floor:?}, nftables DNAT rule {dnat:?}"
    );
    println!(
        "connections per second: direct {:.0}, nftables DNAT rule {:.0}",
        cps(POD),
        cps(DNAT_VIP)
    );

    for services in [1_000, 10_000, 30_000] {
        let shape = Synthetic {
            services,
            endpoints: 10,
        };
        let settings = Settings {
            cgroup: cgroup.to_path_buf(),
            pin_root: bpffs.join(format!("n{services}")),
        };
        let kernel = Kernel::open(&settings).expect("load and attach");
        let mut dp = EbpfDataplane::new(kernel, Default::default());
        let snap = with_bench_service(shape.snapshot());
        let cold = timed(|| dp.sync(&snap, &Changes::default(), false));
        let idle = timed(|| dp.sync(&snap, &Changes::default(), false));
        let moved = with_bench_service(shape.moved(&snap, "10.200.0.1"));
        let mut one = Changes::default();
        one.ports.insert(shape.moved_port());
        let change = timed(|| dp.sync(&moved, &one, false));
        let full = timed(|| dp.sync(&moved, &Changes::default(), true));
        // What a live `explain` or `status` reads before it traces: every pinned map.
        let read = timed(|| backend::read_pinned(&settings.pin_root).map(|m| m.map(|_| ())));
        // The floor again, right before: loopback connect times drift by microseconds.
        let direct = connect_p50(POD);
        let via = connect_p50(BENCH_VIP);
        println!(
            "{services} x 10: cold sync {cold:?}, idle sync {idle:?}, one endpoint moved {change:?}, \
             full resync (reads the maps) {full:?}, explain's read of the pins {read:?}; \
             connect() p50 direct {direct:?}, via ClusterIP {via:?}"
        );
        // Connections per second, the three paths back to back (the host drifts).
        let (direct, dnat, via) = (cps(POD), cps(DNAT_VIP), cps(BENCH_VIP));
        println!(
            "{services} x 10: connections per second direct {direct:.0}, nftables DNAT rule \
             {dnat:.0}, via ClusterIP (socket programs) {via:.0} ({:.2}x the DNAT rule)",
            via / dnat
        );
        drop(dp);
        backend::remove(&settings.pin_root).expect("remove pins");
    }
    let after = connect_p50(POD);
    println!("connect() p50 direct to the pod again, programs detached: {after:?}");
}

fn timed<T, E: std::fmt::Debug>(f: impl FnOnce() -> Result<T, E>) -> Duration {
    let start = Instant::now();
    f().expect("sync");
    start.elapsed()
}

/// The median time of a TCP connect() to `to` (handshake on loopback included).
fn connect_p50(to: &str) -> Duration {
    let to: SocketAddr = to.parse().unwrap();
    let mut times: Vec<Duration> = (0..CONNECTS)
        .map(|_| {
            let start = Instant::now();
            let s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect("connect");
            let t = start.elapsed();
            drop(s);
            t
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

/// Connections per second to `to` from one client, one after another for [`CPS_WINDOW`]:
/// connect, wait until the pod's accept loop took it (it closes first: the client reads
/// the end), close with a reset.
fn cps(to: &str) -> f64 {
    let to: SocketAddr = to.parse().unwrap();
    let start = Instant::now();
    let mut made = 0u32;
    while start.elapsed() < CPS_WINDOW {
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).expect("connect");
        let _ = std::io::Read::read(&mut &s, &mut [0u8; 1]);
        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
        drop(s);
        made += 1;
    }
    f64::from(made) / start.elapsed().as_secs_f64()
}

/// `snap` plus the Service `bench` (BENCH_VIP → POD) on this node.
fn with_bench_service(snap: Snapshot) -> Snapshot {
    let name = ServicePortName {
        service: ServiceKey::new("bench", "bench"),
        port: "http".into(),
        protocol: Protocol::Tcp,
    };
    let vip: SocketAddr = BENCH_VIP.parse().unwrap();
    let pod: SocketAddr = POD.parse().unwrap();
    let view = FamilyView {
        family: IpFamily::V4,
        cluster_ip: vip.ip(),
        external_ips: vec![],
        load_balancer_ips: vec![],
        load_balancer_source_ranges: vec![],
        endpoints: vec![Endpoint {
            ip: pod.ip(),
            port: pod.port(),
            ready: true,
            serving: true,
            terminating: false,
            is_local: true,
            placement: Arc::new(kube_proxy_rs::cluster::model::Placement {
                node_name: Some("node-0".into()),
                ..Default::default()
            }),
        }],
        selection: Default::default(),
    };
    let port = synthetic::cluster_ip_port(name.clone(), vip.port());
    let mut ports: BTreeMap<_, _> = (*snap.ports).clone();
    ports.insert(name, synthetic::state(port, view, &snap.node));
    Snapshot::new(snap.node.clone(), Arc::new(ports))
}
