//! eBPF mode on the host kernel (root): every program loads and attaches (a verifier change
//! fails here), a restart adopts the pinned maps and swaps the links, and real traffic from a
//! client process in the programs' cgroup reaches pods through ClusterIPs that exist only in
//! the maps.
//!
//! Isolation: the programs attach to a cgroup v2 child this test creates (never the root), so
//! only the client processes it puts there are balanced; pins go to a bpffs instance mounted
//! on a scratch directory, whose unmount drops every pin (and so detaches every link) even when
//! a test fails; pods and clients live in a fresh network namespace whose `lo` carries the pod
//! addresses. Nothing is sent outside that namespace.
#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: it starts processes, writes manifests and cgroup files"
)]

#[path = "support/relay_pods.rs"]
mod relay_pods;

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features, Snapshot};
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::backend::{self, Backend as _, Kernel, Settings};
use kube_proxy_rs::dataplane::ebpf::diff::Op;
use kube_proxy_rs::dataplane::ebpf::layout::{IPPROTO_TCP, RevKey, RevVal, SvcKey, SvcVal};
use kube_proxy_rs::dataplane::ebpf::stats::{FILLED, Stats};
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, names};
use relay_pods::host::helper_process::{self, HelperProcess};
use relay_pods::host::{self, NetNs};
use relay_pods::{pod, udp_pod};

const HELPER: HelperProcess = HelperProcess::new("client_helper");
const TIMEOUT: Duration = Duration::from_secs(3);

/// A cgroup v2 child of the hierarchy's root, removed on drop (its processes have exited by
/// then: every client is run to its end).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new() -> Cgroup {
        host::require_root();
        let path = backend::default_cgroup().join(unique("kprs-ebpf"));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        Cgroup(path)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.0) {
            eprintln!("cannot remove cgroup {}: {e}", self.0.display());
        }
    }
}

/// A private bpffs instance on a scratch directory, unmounted on drop: every pin in it goes,
/// so the links are detached and the maps freed whatever the test did.
struct BpfFs(PathBuf);

impl BpfFs {
    fn new() -> BpfFs {
        let dir = host::scratch_dir().join(unique("bpffs"));
        std::fs::create_dir_all(&dir).expect("create bpffs mount point");
        host::stdout_of(Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir));
        BpfFs(dir)
    }

    fn settings(&self, cgroup: &Cgroup) -> Settings {
        Settings {
            cgroup: cgroup.0.clone(),
            pin_root: self.0.join("kube-proxy-rs"),
        }
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn pinned_links(settings: &Settings) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(names::links_dir(&settings.pin_root))
        .expect("links dir")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_program_loads_attaches_and_survives_a_restart() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let mut kernel = Kernel::open(&settings).expect("load and attach every program");
    let mut want: Vec<String> = names::PROGRAMS.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(pinned_links(&settings), want);

    let key = SvcKey::new("10.96.0.10".parse().unwrap(), 80, IPPROTO_TCP);
    let val = SvcVal {
        svc_id: 7,
        count: 0,
        flags: 0,
        generation: 1,
        affinity_timeout: 0,
    };
    kernel.write(&Op::PutSvc(key, val)).expect("write an entry");
    drop(kernel);

    // A second start: the pinned maps are adopted with their contents, the links replaced.
    let mut again = Kernel::open(&settings).expect("open again over the pins");
    assert_eq!(again.read().unwrap().svc.get(&key), Some(&val));
    assert_eq!(pinned_links(&settings), want);

    // The bounds the metrics report are the maps' own.
    for (name, bound) in FILLED {
        let info = aya::maps::MapInfo::from_pin(names::pin_dir(&settings.pin_root).join(name))
            .expect("pinned map");
        assert_eq!(info.max_entries(), bound, "{name}");
    }

    let removed = backend::remove(&settings.pin_root).expect("--cleanup's removal");
    assert_eq!(removed, names::PROGRAMS.len() + names::MAPS.len());
    assert!(!settings.pin_root.exists());
}

/// The cluster: node-a at 192.168.50.1; `web` (TCP 10.96.0.10:80 and NodePort 30080 → `web`
/// endpoints on 8080), `dns` (UDP
/// 10.96.0.11:53 → 10.244.1.2:5353), `empty` (10.96.0.12:80, no endpoints) and `web6`
/// (TCP [fd00:96::10]:80 → [fd00:244::2]:8080) and `sticky` (10.96.0.13:80 → both pods, ClientIP
/// affinity).
fn manifests(web: &[&str]) -> String {
    let endpoints: String = web
        .iter()
        .map(|ip| format!("  - addresses: [\"{ip}\"]\n    conditions: {{ready: true}}\n"))
        .collect();
    let service = |name: &str, ip: &str, proto: &str, port: u16, target: u16| {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\n\
             spec:\n  clusterIP: \"{ip}\"\n  clusterIPs: [\"{ip}\"]\n  \
             ports: [{{name: p, protocol: {proto}, port: {port}, targetPort: {target}}}]\n"
        )
    };
    let slice = |name: &str, family: &str, proto: &str, port: u16, eps: &str| {
        format!(
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  \
             namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\n\
             addressType: {family}\nports: [{{name: p, protocol: {proto}, port: {port}}}]\n\
             endpoints:\n{eps}"
        )
    };
    let one = |ip: &str| format!("  - addresses: [\"{ip}\"]\n    conditions: {{ready: true}}\n");
    [
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n\
         status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n"
            .to_string(),
        service("web", "10.96.0.10", "TCP", 80, 8080)
            .replace("spec:\n", "spec:\n  type: NodePort\n")
            .replace("targetPort: 8080}", "targetPort: 8080, nodePort: 30080}"),
        slice("web", "IPv4", "TCP", 8080, &endpoints),
        service("dns", "10.96.0.11", "UDP", 53, 5353),
        slice("dns", "IPv4", "UDP", 5353, &one("10.244.1.2")),
        service("empty", "10.96.0.12", "TCP", 80, 8080),
        service("web6", "fd00:96::10", "TCP", 80, 8080),
        slice("web6", "IPv6", "TCP", 8080, &one("fd00:244::2")),
        service("sticky", "10.96.0.13", "TCP", 80, 8080).replace(
            "spec:\n",
            "spec:\n  sessionAffinity: ClientIP\n  \
             sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}\n",
        ),
        service("local", "10.96.0.14", "TCP", 80, 8080)
            .replace("spec:\n", "spec:\n  internalTrafficPolicy: Local\n"),
        slice(
            "local",
            "IPv4",
            "TCP",
            8080,
            "  - addresses: [\"10.244.1.2\"]\n    conditions: {ready: true}\n    nodeName: node-b\n",
        ),
        slice(
            "sticky",
            "IPv4",
            "TCP",
            8080,
            &[one("10.244.1.2"), one("10.244.1.3")].concat(),
        ),
    ]
    .concat()
}

fn snapshot(dir: &Path, manifests: &str) -> Snapshot {
    std::fs::write(dir.join("cluster.yaml"), manifests).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

/// The service ports that differ between two snapshots, as the tracker reports them.
fn changes(old: &Snapshot, new: &Snapshot) -> Changes {
    let mut c = Changes::default();
    for name in old.ports.keys().chain(new.ports.keys()) {
        if old.ports.get(name) != new.ports.get(name) {
            c.ports.insert(name.clone());
        }
    }
    c
}

/// Runs the client helper doing `work` in `netns`, inside `cgroup` when given (it joins
/// before `ip netns exec`, so before it opens a socket), and returns its result lines.
async fn client(netns: &str, cgroup: Option<&Cgroup>, work: &str) -> Vec<String> {
    run_client(Some(netns), cgroup, work).await
}

/// [`client`] in the host's own network namespace (`netns` `None`): for bind() checks only.
/// That is the namespace of this process's main thread (the test body runs on a thread that
/// entered the test's namespace, which a child would inherit), entered with `nsenter`.
async fn run_client(netns: Option<&str>, cgroup: Option<&Cgroup>, work: &str) -> Vec<String> {
    let inner = HELPER.in_netns(netns.unwrap_or("-"), work);
    let host = std::ffi::OsString::from(format!("--net=/proc/{}/ns/net", std::process::id()));
    // `ip netns exec NS EXE ARGS…`; on the host, `nsenter --net=… EXE ARGS…`.
    let line: Vec<&std::ffi::OsStr> = match netns {
        Some(_) => std::iter::once(inner.get_program())
            .chain(inner.get_args())
            .collect(),
        None => [std::ffi::OsStr::new("nsenter"), &host]
            .into_iter()
            .chain(inner.get_args().skip(3))
            .collect(),
    };
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(r#"if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 9; fi; shift; exec "$@""#)
        .arg("sh")
        .arg(cgroup.map(|c| c.0.clone()).unwrap_or_default())
        .args(line);
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the client finishes")
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client {work} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    helper_process::results(&stdout)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

#[test]
fn cluster_ips_in_the_maps_reach_pods_from_the_cgroup() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let ns = NetNs::new("kprs-ebpf");
    for a in ["10.244.1.2/32", "10.244.1.3/32"] {
        ns.output("ip", &["addr", "add", a, "dev", "lo"]);
    }
    ns.output(
        "ip",
        &["addr", "add", "fd00:244::2/128", "dev", "lo", "nodad"],
    );
    // A rule that makes the namespace track connections, so conntrack's table shows what the
    // packets carried.
    ns.output_fed(
        "nft",
        &["-f", "-"],
        "table inet kprs-ct {\n chain out {\n  type filter hook output priority 0;\n  ct state new counter\n }\n}\n",
    );

    let kernel = Kernel::open(&settings).expect("load and attach");
    let stats = Stats::open(&settings.pin_root).expect("open the counters");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default()).with_stats(stats.clone());
    let mut last = snapshot(dir.path(), &manifests(&[]));
    let mut sync = move |dp: &mut EbpfDataplane<Kernel>, web: &[&str]| {
        let next = snapshot(dir.path(), &manifests(web));
        let report = dp.sync(&next, &changes(&last, &next), false).expect("sync");
        last = next;
        report
    };
    let name = ns.name.clone();
    let cg = &cgroup;
    let nsr = &ns;
    let pin_root = settings.pin_root.clone();
    in_ns(&ns, || async move {
        sync(&mut dp, &["10.244.1.2", "10.244.1.3"]);
        pod("10.244.1.2:8080", "a").await;
        pod("10.244.1.3:8080", "b").await;
        pod("[fd00:244::2]:8080", "a6").await;
        udp_pod("10.244.1.2:5353", "dns-a").await;

        // Outside the cgroup nothing is translated: the namespace has no route there.
        let outside = client(&name, None, "tcp 10.96.0.10:80 1").await;
        assert_eq!(outside, ["tcp 10.96.0.10:80 -> unreachable"]);

        let tcp = client(&name, Some(cg), "tcp 10.96.0.10:80 24").await;
        // No conntrack entry names the ClusterIP: the packets carried a pod's address from the
        // first one (no NAT); the entries are the pods'.
        let tracked = nsr.output("conntrack", &["-L", "-p", "tcp"]);
        assert!(!tracked.contains("10.96.0.10"), "{tracked}");
        assert!(tracked.contains("dport=8080"), "{tracked}");
        let mut seen: Vec<&str> = tcp.iter().map(String::as_str).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(
            seen,
            [
                "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80",
                "tcp 10.96.0.10:80 -> b peer 10.96.0.10:80"
            ],
            "random choice over both pods; getpeername shows the Service"
        );

        let rest = client(
            &name,
            Some(cg),
            "refused 10.96.0.12:80 1;udp-connected 10.96.0.11:53 1;\
             udp-unconnected 10.96.0.11:53 1;tcp [fd00:96::10]:80 1;\
             tcp [::ffff:10.96.0.10]:80 1",
        )
        .await;
        assert_eq!(rest[0], "refused 10.96.0.12:80 -> refused at once");
        // internalTrafficPolicy Local, the only endpoint on another node: dropped, as
        // kube-proxy does; the client sees a timeout (at once), not a refusal.
        let local = client(&name, Some(cg), "tcp 10.96.0.14:80 1").await;
        assert_eq!(local, ["tcp 10.96.0.14:80 -> timed out at once"]);
        assert_eq!(
            rest[1],
            "udp-connected 10.96.0.11:53 -> dns-a:ping peer 10.96.0.11:53"
        );
        assert_eq!(
            rest[2],
            "udp-unconnected 10.96.0.11:53 -> dns-a:ping from 10.96.0.11:53"
        );
        assert_eq!(rest[3], "tcp [fd00:96::10]:80 -> a6 peer [fd00:96::10]:80");
        assert!(
            rest[4].starts_with("tcp [::ffff:10.96.0.10]:80 -> a peer")
                || rest[4].starts_with("tcp [::ffff:10.96.0.10]:80 -> b peer"),
            "an IPv6 socket reaches the IPv4 Service by its mapped address: {}",
            rest[4]
        );

        // The NodePort on the node's address and on loopback (nodePortAddresses: all), from a
        // process of the node: the socket is built to a pod as for the ClusterIP.
        let node_port = client(
            &name,
            Some(cg),
            "tcp 192.168.50.1:30080 8;tcp 127.0.0.1:30080 8",
        )
        .await;
        let mut pods: Vec<&str> = node_port
            .iter()
            .map(|l| l.split(" -> ").nth(1).unwrap().split(' ').next().unwrap())
            .collect();
        pods.sort();
        pods.dedup();
        assert_eq!(pods, ["a", "b"], "{node_port:?}");
        assert!(
            node_port
                .iter()
                .all(|l| l.ends_with("peer 192.168.50.1:30080")
                    || l.ends_with("peer 127.0.0.1:30080")),
            "getpeername shows the NodePort: {node_port:?}"
        );

        // NodePort bind protection: in the node's namespace (here: the host's, where the proxy
        // runs) a bind to the TCP NodePort fails, UDP on that number does not; in a pod's
        // namespace the port is the pod's own. (No traffic: the sockets are bound and closed.)
        let host = run_client(
            None,
            Some(cg),
            "bind-tcp 0.0.0.0:30080 1;bind-udp 0.0.0.0:30080 1",
        )
        .await;
        assert_eq!(
            host,
            [
                "bind-tcp 0.0.0.0:30080 -> in use",
                "bind-udp 0.0.0.0:30080 -> bound"
            ]
        );
        let pod_ns = client(&name, Some(cg), "bind-tcp 0.0.0.0:30080 1").await;
        assert_eq!(pod_ns, ["bind-tcp 0.0.0.0:30080 -> bound"]);

        // ClientIP affinity: every connection from this namespace goes to one pod, across
        // client processes.
        let mut sticky = client(&name, Some(cg), "tcp 10.96.0.13:80 12").await;
        sticky.extend(client(&name, Some(cg), "tcp 10.96.0.13:80 4").await);
        sticky.dedup();
        assert_eq!(sticky.len(), 1, "one pod for the namespace: {sticky:?}");

        // A backend change: new connections go to the remaining pod only.
        sync(&mut dp, &["10.244.1.3"]);
        let tcp = client(&name, Some(cg), "tcp 10.96.0.10:80 12").await;
        assert!(
            tcp.iter()
                .all(|l| l == "tcp 10.96.0.10:80 -> b peer 10.96.0.10:80"),
            "{tcp:?}"
        );

        // The datapath counted what it did, and the applier what the maps hold.
        let reading = stats.read();
        let count = |r: &str| reading.reasons.iter().find(|(n, _)| *n == r).unwrap().1;
        assert!(count("translated") >= 24 + 12 + 16 + 16, "{reading:?}");
        assert_eq!(count("refused"), 1, "{reading:?}");
        assert_eq!(count("dropped"), 1, "{reading:?}");
        assert!(count("affine") >= 15, "{reading:?}");
        assert!(count("reversed") >= 2, "{reading:?}");
        assert!(reading.maps.iter().all(|(_, n, _)| *n > 0), "{reading:?}");

        // Closed connected sockets took their reverse entries with them (sock_release); the
        // one unconnected UDP socket's entry is left to age out of the LRU.
        let rev = aya::maps::MapData::from_pin(names::pin_dir(&pin_root).join(names::MAP_REV))
            .expect("pinned kp_rev");
        let rev: aya::maps::HashMap<_, RevKey, RevVal> =
            aya::maps::HashMap::try_from(aya::maps::Map::LruHashMap(rev)).expect("a hash map");
        assert_eq!(rev.keys().count(), 1);

        // --cleanup's removal detaches the programs: the ClusterIP is unknown again.
        drop(dp);
        assert!(backend::remove(&pin_root).unwrap() > 0);
        let after = client(&name, Some(cg), "tcp 10.96.0.10:80 1").await;
        assert_eq!(after, ["tcp 10.96.0.10:80 -> unreachable"]);
    });
}

/// The proxy binary in `--proxy-mode ebpf`, in `ns` by `nsenter --net` (not `ip netns exec`,
/// whose private /sys would hide the cgroup hierarchy), with its cgroup and pins the test's.
fn proxy(ns: &NetNs, dir: &Path, settings: &Settings) -> host::ChildGuard {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net=/var/run/netns/{}", ns.name))
        .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args(["--proxy-mode=ebpf", "--hostname-override=node-a", "-v=4"])
        .arg("--manifests")
        .arg(dir)
        .arg("--bpf-cgroup")
        .arg(&settings.cgroup)
        .arg("--bpf-pin-root")
        .arg(&settings.pin_root);
    host::ChildGuard::spawn(&unique("proxy"), &mut cmd)
}

/// Asks the client until `want` is its answer, for up to 20 s.
async fn until(netns: &str, cgroup: &Cgroup, work: &str, want: &str, proxy: &host::ChildGuard) {
    for _ in 0..100 {
        if client(netns, Some(cgroup), work).await == [want] {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("never {want}; proxy log:\n{}", proxy.log_tail(30));
}

#[test]
fn the_running_proxy_programs_the_maps_and_its_pins_outlive_it() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let ns = NetNs::new("kprs-ebpf");
    for a in ["10.244.1.2/32", "10.244.1.3/32"] {
        ns.output("ip", &["addr", "add", a, "dev", "lo"]);
    }
    std::fs::write(dir.path().join("cluster.yaml"), manifests(&["10.244.1.2"])).unwrap();
    let mut running = proxy(&ns, dir.path(), &settings);
    let name = ns.name.clone();
    let cg = &cgroup;
    let manifest_dir = dir.path().to_path_buf();
    let pin_root = settings.pin_root.clone();
    in_ns(&ns, || async move {
        pod("10.244.1.2:8080", "a").await;
        pod("10.244.1.3:8080", "b").await;
        let work = "tcp 10.96.0.10:80 1";
        until(
            &name,
            cg,
            work,
            "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80",
            &running,
        )
        .await;

        // The proxy follows the directory: the endpoint moves.
        std::fs::write(
            manifest_dir.join("cluster.yaml"),
            manifests(&["10.244.1.3"]),
        )
        .unwrap();
        until(
            &name,
            cg,
            work,
            "tcp 10.96.0.10:80 -> b peer 10.96.0.10:80",
            &running,
        )
        .await;
        assert!(running.exited().is_none(), "{}", running.log_tail(30));

        // Stopped, the proxy leaves its programs and maps pinned: Services keep working.
        drop(running);
        let still = client(&name, Some(cg), work).await;
        assert_eq!(still, ["tcp 10.96.0.10:80 -> b peer 10.96.0.10:80"]);

        // --cleanup detaches them (run in the namespace: it also cleans the other modes' rules).
        let out = tokio::process::Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{name}"))
            .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .arg("--cleanup")
            .arg("--bpf-pin-root")
            .arg(&pin_root)
            .output()
            .await
            .expect("run --cleanup");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!pin_root.exists());
        let after = client(&name, Some(cg), work).await;
        assert_eq!(after, ["tcp 10.96.0.10:80 -> unreachable"]);
    });
}

/// Runs `test` on a current-thread runtime on a thread inside `ns`, so the pods' sockets are
/// the namespace's.
fn in_ns<F, Fut>(ns: &NetNs, test: F)
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = ()>,
{
    kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(test());
        Ok(())
    })
    .expect("the test inside the namespace failed (its panic is printed above)");
}

/// The client, re-run by the tests inside the namespace (and the cgroup): work is
/// `kind addr count` items separated by `;`, each connection reporting one result line.
#[test]
fn client_helper() {
    HELPER.when_requested(|work| {
        for item in work.split(';') {
            let mut parts = item.split_whitespace();
            let (kind, to, n) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap().parse::<usize>().unwrap(),
            );
            let addr: SocketAddr = to.parse().unwrap();
            for _ in 0..n {
                println!(
                    "{}{kind} {to} -> {}",
                    helper_process::RESULT,
                    probe(kind, addr)
                );
            }
        }
    });
}

fn probe(kind: &str, to: SocketAddr) -> String {
    let bound = |r: std::io::Result<()>| match r {
        Ok(()) => "bound".to_owned(),
        Err(e) if e.kind() == ErrorKind::AddrInUse => "in use".to_owned(),
        Err(e) => format!("error {e}"),
    };
    match kind {
        "bind-tcp" => bound(std::net::TcpListener::bind(to).map(drop)),
        "bind-udp" => bound(UdpSocket::bind(to).map(drop)),
        "tcp" | "refused" => tcp_probe(to),
        "udp-connected" => {
            let s = udp_socket(to);
            s.connect(to).expect("udp connect");
            s.send(b"ping").expect("send");
            let mut buf = [0u8; 256];
            let n = s.recv(&mut buf).expect("udp answer");
            let peer = s.peer_addr().expect("peer");
            format!("{} peer {peer}", String::from_utf8_lossy(&buf[..n]))
        }
        "udp-unconnected" => {
            let s = udp_socket(to);
            s.send_to(b"ping", to).expect("send_to");
            let mut buf = [0u8; 256];
            let (n, from) = s.recv_from(&mut buf).expect("udp answer");
            format!("{} from {from}", String::from_utf8_lossy(&buf[..n]))
        }
        other => panic!("unknown probe {other}"),
    }
}

fn udp_socket(to: SocketAddr) -> UdpSocket {
    let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let s = UdpSocket::bind(any).expect("bind");
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s
}

fn tcp_probe(to: SocketAddr) -> String {
    let started = std::time::Instant::now();
    match TcpStream::connect_timeout(&to, TIMEOUT) {
        Ok(mut s) => {
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            let peer = s.peer_addr().expect("peer");
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).expect("greeting");
            let greeting = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
            let _ = s.write_all(b"x");
            format!("{greeting} peer {peer}")
        }
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            if started.elapsed() < Duration::from_millis(500) {
                "refused at once".to_owned()
            } else {
                format!("refused after {:?}", started.elapsed())
            }
        }
        Err(e) if e.kind() == ErrorKind::NetworkUnreachable => "unreachable".to_owned(),
        Err(e)
            if e.kind() == ErrorKind::TimedOut
                && started.elapsed() < Duration::from_millis(500) =>
        {
            "timed out at once".to_owned()
        }
        Err(e) => format!("error {e}"),
    }
}
