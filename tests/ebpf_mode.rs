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

use support::ebpf_host;
use support::relay_pods;

use std::path::Path;

use ebpf_host::{
    BpfFs, Cgroup, HELPER, changes, client, in_ns, pinned_links, proxy, run_client, serve, until,
};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features, Snapshot};
use kube_proxy_rs::config::NodePortAddresses;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::backend::{self, Backend as _, Kernel};
use kube_proxy_rs::dataplane::ebpf::diff::Op;
use kube_proxy_rs::dataplane::ebpf::layout::{
    Backend as Slot, IPPROTO_TCP, RevKey, RevVal, SlotKey, SvcKey, SvcVal,
};
use kube_proxy_rs::dataplane::ebpf::stats::{FILLED, Stats};
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, names, tc};
use relay_pods::host::NetNs;
use relay_pods::{pod, udp_pod};

#[test]
fn every_program_loads_attaches_and_survives_a_restart() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let mut kernel = Kernel::open(&settings).expect("load and attach every program");
    // The tc programs, on an interface of a namespace of this test (a veth with an address).
    let ns = NetNs::new("kprs-ebpf-tc");
    ns.output(
        "ip",
        &["link", "add", "kp0", "type", "veth", "peer", "name", "kp1"],
    );
    ns.output("ip", &["addr", "add", "192.0.2.1/24", "dev", "kp0"]);
    ns.output("ip", &["link", "set", "kp0", "up"]);
    let ifaces = kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        let ifaces = tc::node_interfaces().expect("interfaces");
        kernel
            .attach_external(&ifaces)
            .expect("load and attach the tc programs");
        Ok(ifaces)
    })
    .expect("in the namespace");
    assert_eq!(ifaces.len(), 1);
    let mut want: Vec<String> = names::PROGRAMS.iter().map(|s| s.to_string()).collect();
    for (_, direction) in names::TC_PROGRAMS {
        want.push(names::tc_link(ifaces[0].index, direction));
    }
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

    // An upgrade that counts another reason finds a pinned kp_stats of another size (here:
    // another map pinned under its name): the counters are renewed, not refused.
    let pin_dir = names::pin_dir(&settings.pin_root);
    std::fs::remove_file(pin_dir.join(names::MAP_STATS)).expect("unpin kp_stats");
    let other =
        aya::maps::MapData::from_pin(pin_dir.join(names::MAP_NODEPORT)).expect("kp_nodeport");
    other
        .pin(pin_dir.join(names::MAP_STATS))
        .expect("pin it as kp_stats");
    drop(other);

    // A second start: the pinned maps are adopted with their contents, the links replaced.
    let mut again = Kernel::open(&settings).expect("open again over the pins");
    assert_eq!(again.read().unwrap().svc.get(&key), Some(&val));
    let stats = aya::maps::MapInfo::from_pin(pin_dir.join(names::MAP_STATS)).expect("kp_stats");
    assert_eq!(
        stats.max_entries() as usize,
        kube_proxy_rs::dataplane::ebpf::stats::REASONS.len()
    );
    kube_proxy_rs::netlink::netns::run_in(Some(&ns.name), || {
        again
            .attach_external(&ifaces)
            .expect("attach the tc programs again");
        Ok(())
    })
    .expect("in the namespace");
    assert_eq!(pinned_links(&settings), want);

    // The bounds the metrics report are the maps' own.
    for (name, bound) in FILLED {
        let info = aya::maps::MapInfo::from_pin(names::pin_dir(&settings.pin_root).join(name))
            .expect("pinned map");
        assert_eq!(info.max_entries(), bound, "{name}");
    }

    let removed = backend::remove(&settings.pin_root).expect("--cleanup's removal");
    assert_eq!(
        removed,
        names::PROGRAMS.len() + names::TC_PROGRAMS.len() + names::MAPS.len()
    );
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

/// What each test of a node needs: a cgroup for the programs, a private bpffs for the pins
/// (both gone when dropped), a manifest directory, and a namespace whose `lo` carries the
/// two pods' addresses.
struct Node {
    cgroup: Cgroup,
    fs: BpfFs,
    settings: backend::Settings,
    dir: tempfile::TempDir,
    ns: NetNs,
}

impl Node {
    fn new(prefix: &str) -> Node {
        let cgroup = Cgroup::new();
        let fs = BpfFs::new();
        let settings = fs.settings(&cgroup);
        let dir = tempfile::tempdir().expect("manifest dir");
        let ns = NetNs::new(prefix);
        for a in ["10.244.1.2/32", "10.244.1.3/32"] {
            ns.output("ip", &["addr", "add", a, "dev", "lo"]);
        }
        Node {
            cgroup,
            fs,
            settings,
            dir,
            ns,
        }
    }
}

fn snapshot(dir: &Path, manifests: &str) -> Snapshot {
    std::fs::write(dir.join("cluster.yaml"), manifests).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

#[test]
fn cluster_ips_in_the_maps_reach_pods_from_the_cgroup() {
    let Node {
        cgroup,
        fs: _pins,
        settings,
        dir,
        ns,
    } = Node::new("kprs-ebpf");
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
    let reopen_settings = settings.clone();
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
             tcp [::ffff:10.96.0.10]:80 1;refused 10.96.0.10:81 1;\
             refused [fd00:96::10]:81 1",
        )
        .await;
        assert_eq!(rest[0], "refused 10.96.0.12:80 -> refused at once");
        // A port the Service does not define: refused at once, as kube-proxy rejects it.
        assert_eq!(rest[5], "refused 10.96.0.10:81 -> refused at once");
        assert_eq!(rest[6], "refused [fd00:96::10]:81 -> refused at once");
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

        // A restart under load: while a client connects one connection after another for
        // 1.5 s, the programs are loaded and attached again five times (each time the new
        // links go in before the old ones are unpinned); not one connection fails.
        let reopen = async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            for _ in 0..5 {
                Kernel::open(&reopen_settings).expect("load and attach again");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        };
        let (under_load, ()) = tokio::join!(
            client(&name, Some(cg), "tcp-during 10.96.0.10:80 1500"),
            reopen
        );
        let line = &under_load[0];
        let made: usize = line
            .split(" -> ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(line.ends_with("failed: []") && made > 100, "{line}");
        assert_eq!(pinned_links(&reopen_settings).len(), names::PROGRAMS.len());

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
        // The Service without endpoints, and two ports a Service does not define.
        assert_eq!(count("refused"), 3, "{reading:?}");
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

/// Map pressure: a sync that needs more backend slots than `kp_slot` has room for fails with
/// the map named, and the Service keeps the backends it had (the new slot set is written
/// before the frontend switches to it, and the switch never happens); once room is made, the
/// next sync finishes the change. The map is filled through its pin, as another writer (or
/// a much larger cluster) would.
#[test]
fn a_sync_past_a_maps_bound_fails_and_the_old_backends_keep_serving() {
    let Node {
        cgroup,
        fs: _pins,
        settings,
        dir,
        ns,
    } = Node::new("kprs-ebpf-full");
    let kernel = Kernel::open(&settings).expect("load and attach");
    let mut dp = EbpfDataplane::new(kernel, NodePortAddresses::default());
    let one = snapshot(dir.path(), &manifests(&["10.244.1.2"]));
    let two = snapshot(dir.path(), &manifests(&["10.244.1.2", "10.244.1.3"]));
    dp.sync(&one, &Changes::default(), false)
        .expect("first sync");

    let slots = names::pin_dir(&settings.pin_root).join(names::MAP_SLOT);
    let slots = aya::maps::MapData::from_pin(slots).expect("pinned kp_slot");
    let mut slots: aya::maps::HashMap<_, SlotKey, Slot> =
        aya::maps::HashMap::try_from(aya::maps::Map::HashMap(slots)).expect("a hash map");
    let filler = |i: u32| SlotKey {
        svc_id: 0x4000_0000 + (i >> 16),
        slot: (i & 0xffff) as u16,
        generation: 0,
        pad: 0,
    };
    let backend = Slot::new("192.0.2.1:9".parse().unwrap());
    let mut filled = 0u32;
    while slots.insert(filler(filled), backend, 0).is_ok() {
        filled += 1;
    }
    assert!(filled > 1_000_000, "the map took {filled} more entries");

    let error = dp
        .sync(&two, &changes(&one, &two), false)
        .expect_err("no room for the new slot set");
    let text = kube_proxy_rs::causes::one_line(&error);
    assert!(text.contains("kp_slot"), "{text}");

    let name = ns.name.clone();
    let cg = &cgroup;
    in_ns(&ns, || async move {
        pod("10.244.1.2:8080", "a").await;
        pod("10.244.1.3:8080", "b").await;
        let work = "tcp 10.96.0.10:80 8";
        let kept = client(&name, Some(cg), work).await;
        assert!(
            kept.iter()
                .all(|l| l == "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80"),
            "the old backend only: {kept:?}"
        );

        for i in 0..filled {
            slots.remove(&filler(i)).expect("make room");
        }
        dp.sync(&two, &Changes::default(), false)
            .expect("the retry finishes the change");
        let both = client(&name, Some(cg), "tcp 10.96.0.10:80 24").await;
        let mut seen: Vec<&str> = both.iter().map(String::as_str).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(
            seen,
            [
                "tcp 10.96.0.10:80 -> a peer 10.96.0.10:80",
                "tcp 10.96.0.10:80 -> b peer 10.96.0.10:80"
            ]
        );
    });
}

#[test]
fn the_running_proxy_programs_the_maps_and_its_pins_outlive_it() {
    let Node {
        cgroup,
        fs: _pins,
        settings,
        dir,
        ns,
    } = Node::new("kprs-ebpf");
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

/// The client, re-run by the tests inside the namespace (and the cgroup): work is
/// `kind addr count` items separated by `;`, each connection reporting one result line.
#[test]
fn client_helper() {
    HELPER.when_requested(serve);
}
