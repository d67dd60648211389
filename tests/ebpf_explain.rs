//! `explain` and `status` in eBPF mode over a real dataplane (root): the maps a sync pinned
//! are read back through the applier's own reader, traced as the plan is, and entries removed
//! by hand show as drift and change the answer.
//!
//! Isolation as in `tests/ebpf_mode.rs`: the programs attach to a cgroup v2 child this test
//! creates, pins go to a private bpffs instance unmounted on drop (which detaches every link
//! and frees every map, also when the test fails); the one client run in the cgroup connects
//! inside a fresh network namespace, to a pod address on its `lo`.
#![allow(
    clippy::disallowed_methods,
    reason = "a kernel test: it writes manifests and mounts bpffs"
)]

use support::ebpf_host;
use support::manifest_yaml;
use support::relay_pods;

use std::path::Path;

use aya::maps::{HashMap, Map, MapData};
use ebpf_host::{BpfFs, Cgroup, HELPER, client, explain, explain_config, proxy, serve};
use kube_proxy_rs::cli::explain::{Verdict, live};
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cli::status::{self, Runtime};
use kube_proxy_rs::cluster::{Changes, Features, IpFamily, Snapshot};
use kube_proxy_rs::config::Config;
use kube_proxy_rs::dataplane::Dataplane as _;
use kube_proxy_rs::dataplane::ebpf::backend::Kernel;
use kube_proxy_rs::dataplane::ebpf::layout::{Backend, IPPROTO_TCP, SlotKey, SvcKey, SvcVal};
use kube_proxy_rs::dataplane::ebpf::{EbpfDataplane, names};
use manifest_yaml::{HTTP, STICKY, documents, ready_on, service, slice};
use relay_pods::host::NetNs;

/// node-a (192.168.50.1): `web` (10.96.0.10:80, NodePort 30080, two endpoints), `empty`
/// (10.96.0.12:80, none), `local` (10.96.0.14:80, internalTrafficPolicy Local, its endpoint
/// on node-b) and `sticky` (10.96.0.13:80, ClientIP affinity 60 s).
fn cluster() -> String {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n\
        spec: {podCIDR: 10.244.1.0/24, podCIDRs: [10.244.1.0/24]}\n\
        status: {addresses: [{type: InternalIP, address: 192.168.50.1}]}\n";
    let web = HTTP.on_node_port(30080);
    documents(&[
        node.to_owned(),
        service("web", "10.96.0.10", web, "  type: NodePort\n"),
        slice(
            "web",
            web,
            &(ready_on("10.244.1.2", "node-a") + &ready_on("10.244.2.2", "node-b")),
        ),
        service("empty", "10.96.0.12", HTTP, ""),
        service(
            "local",
            "10.96.0.14",
            HTTP,
            "  internalTrafficPolicy: Local\n",
        ),
        slice("local", HTTP, &ready_on("10.244.2.4", "node-b")),
        service("sticky", "10.96.0.13", HTTP, STICKY),
        slice("sticky", HTTP, &ready_on("10.244.1.5", "node-a")),
    ])
}

fn snapshot(dir: &Path) -> Snapshot {
    std::fs::write(dir.join("cluster.yaml"), cluster()).expect("write manifests");
    let loaded = load_manifests(dir, "node-a", Features::default()).expect("manifests load");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    loaded.snapshot
}

fn status_text(cfg: &Config, snap: &Snapshot) -> (status::Status, String) {
    let (planned, node) = live::plan_on_node(cfg, snap, false).expect("plans");
    let read = IpFamily::ALL
        .map(|f| live::read_family(cfg, snap, planned.as_ref(), f, None).expect("reads"));
    let drift = read[0].drift().to_vec();
    let runtime = Runtime::default();
    let s = status::build(status::Inputs {
        snapshot: snap,
        node: &node,
        planned: IpFamily::ALL.map(|f| planned.rules(f)),
        kernel: Some(IpFamily::ALL.map(|f| read[f.index()].rules())),
        drift,
        runtime: &runtime,
        service: None,
    });
    let text = status::render::text(&s, false);
    (s, text)
}

fn pinned<K: aya::Pod, V: aya::Pod>(pin_root: &Path, name: &str) -> HashMap<MapData, K, V> {
    let data = MapData::from_pin(names::pin_dir(pin_root).join(name)).expect("pinned map");
    HashMap::try_from(Map::HashMap(data)).expect("a hash map")
}

#[test]
fn live_maps_explain_services_and_entries_removed_by_hand_show_as_drift() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    let snap = snapshot(dir.path());
    let cfg = explain_config(&settings.pin_root);

    // Nothing pinned yet: the answer says so rather than failing.
    let e = explain(&cfg, &snap, "10.96.0.10:80", "node");
    assert_eq!(e.outcome.verdict, Verdict::Untouched);
    assert!(
        e.drift[0].contains("no maps of ours are pinned"),
        "{:?}",
        e.drift
    );

    let kernel = Kernel::open(&settings).expect("load and attach");
    let mut dp = EbpfDataplane::new(kernel, cfg.node_port_addresses.clone());
    dp.sync(&snap, &Changes::default(), true).expect("sync");

    let web = explain(&cfg, &snap, "10.96.0.10:80", "node");
    assert_eq!(web.mode, "ebpf");
    assert_eq!(
        web.service_port.as_ref().map(|s| s.name.as_str()),
        Some("default/web:http")
    );
    assert_eq!(web.hooks, ["connect4"]);
    assert_eq!(web.outcome.verdict, Verdict::Forwarded);
    let reached: Vec<String> = web
        .outcome
        .endpoints
        .iter()
        .map(|s| s.endpoint.to_string())
        .collect();
    assert_eq!(reached, ["10.244.1.2:8080", "10.244.2.2:8080"]);
    assert!(
        web.reasons.iter().any(|r| r.contains("no per-packet NAT")),
        "{:?}",
        web.reasons
    );
    assert!(web.drift.is_empty(), "just synced: {:?}", web.drift);

    // UDP at a port only TCP is defined on: refused, as kube-proxy rejects it.
    let udp = explain(&cfg, &snap, "10.96.0.10:80/udp", "pod");
    assert!(udp.service_port.is_none());
    assert_eq!(udp.hooks, ["connect4", "sendmsg4"]);
    assert_eq!(udp.outcome.verdict, Verdict::Rejected);
    assert!(
        udp.reasons
            .iter()
            .any(|r| r.contains("at port 0 (any port its Service does not define)")),
        "{:?}",
        udp.reasons
    );

    let empty = explain(&cfg, &snap, "10.96.0.12:80", "pod");
    assert_eq!(empty.outcome.verdict, Verdict::Rejected);
    assert!(
        empty.reasons.iter().any(|r| r.contains("ECONNREFUSED")),
        "{:?}",
        empty.reasons
    );

    let local = explain(&cfg, &snap, "10.96.0.14:80", "pod");
    assert_eq!(local.outcome.verdict, Verdict::Dropped);
    assert!(
        local.reasons.iter().any(|r| r.contains("ETIMEDOUT")),
        "{:?}",
        local.reasons
    );
    assert!(
        local
            .reasons
            .iter()
            .any(|r| r.contains("internalTrafficPolicy Local")),
        "{:?}",
        local.reasons
    );

    let outside = explain(&cfg, &snap, "192.168.50.1:30080", "outside");
    assert_eq!(
        outside.service_port.as_ref().map(|s| s.frontend),
        Some("NodePort")
    );
    // From outside the tc programs' entry: both endpoints, the source rewritten to the
    // node's address (externalTrafficPolicy Cluster).
    assert_eq!(outside.hooks, ["tc ingress"]);
    assert_eq!(outside.outcome.verdict, Verdict::Forwarded);
    assert_eq!(outside.outcome.masquerade, Some(true));
    assert_eq!(outside.outcome.endpoints.len(), 2);
    assert!(
        outside
            .reasons
            .iter()
            .any(|r| r.contains("kp_svc entry of scope external for TCP 192.168.50.1:30080")),
        "{:?}",
        outside.reasons
    );
    let inside = explain(&cfg, &snap, "192.168.50.1:30080", "node");
    assert_eq!(inside.outcome.verdict, Verdict::Forwarded);

    let sticky = explain(&cfg, &snap, "10.96.0.13:80", "pod");
    assert_eq!(
        sticky.affinity.as_ref().map(|a| a.timeout_seconds),
        Some(60)
    );
    assert!(
        sticky
            .reasons
            .iter()
            .any(|r| r.contains("kp_aff holds no entry")),
        "{:?}",
        sticky.reasons
    );

    // A client in the cgroup connects once (in a namespace of its own, where nothing listens on
    // the pod's address: the backend is chosen, and remembered, at connect()).
    let ns = NetNs::new("kprs-ebpf-explain");
    ns.output("ip", &["addr", "add", "10.244.1.5/32", "dev", "lo"]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let said = runtime.block_on(client(&ns.name, Some(&cgroup), "tcp 10.96.0.13:80 1"));
    assert_eq!(said.len(), 1, "{said:?}");
    let sticky = explain(&cfg, &snap, "10.96.0.13:80", "pod");
    assert!(
        sticky.reasons.iter().any(|r| r
            .contains("kp_aff: a network namespace was given 10.244.1.5:8080")
            && r.contains("within 60 s")),
        "{:?}",
        sticky.reasons
    );

    let (s, text) = status_text(&cfg, &snap);
    println!("$ kube-proxy-rs status\n{text}");
    let row = s
        .service_ports
        .iter()
        .find(|p| p.name == "default/web:http")
        .unwrap();
    assert_eq!((row.programmed, row.endpoints), (Some(2), 2));
    assert_eq!(row.drifted(), 0);
    assert!(s.drift.is_empty(), "{:?}", s.drift);

    // By hand: one of web's slots and empty's frontend entry go.
    let mut svc: HashMap<MapData, SvcKey, SvcVal> = pinned(&settings.pin_root, names::MAP_SVC);
    let web_key = SvcKey::new("10.96.0.10".parse().unwrap(), 80, IPPROTO_TCP);
    let v = svc.get(&web_key, 0).expect("web's entry");
    let mut slots: HashMap<MapData, SlotKey, Backend> = pinned(&settings.pin_root, names::MAP_SLOT);
    let slot = SlotKey {
        svc_id: v.svc_id,
        slot: 1,
        generation: v.generation,
        pad: 0,
    };
    let lost = slots.get(&slot, 0).expect("web's slot 1").socket_addr();
    slots.remove(&slot).expect("remove the slot");
    svc.remove(&SvcKey::new("10.96.0.12".parse().unwrap(), 80, IPPROTO_TCP))
        .expect("remove empty's entry");
    let node_port = SvcKey::new("192.168.50.1".parse().unwrap(), 30080, IPPROTO_TCP).external();
    svc.remove(&node_port)
        .expect("remove the NodePort's entry from outside");

    let web = explain(&cfg, &snap, "10.96.0.10:80", "node");
    assert_eq!(web.outcome.verdict, Verdict::Mixed);
    assert_eq!(web.outcome.endpoints.len(), 1);
    assert!(
        web.reasons.iter().any(|r| r.contains("slot 1 is missing")),
        "{:?}",
        web.reasons
    );
    assert!(
        web.drift[0].contains("map writes would bring the kernel to the plan"),
        "{:?}",
        web.drift
    );
    assert!(
        web.drift.iter().any(|d| d.contains(&format!(
            "(default/web:http): backend {lost} is not in the kernel"
        ))),
        "{:?}",
        web.drift
    );
    assert!(
        web.drift
            .iter()
            .any(|d| d.contains("kp_svc has no entry for TCP 10.96.0.12:80 (default/empty:http)")),
        "{:?}",
        web.drift
    );
    // Its own entry gone, the ClusterIP's entry for undefined ports answers, as the programs
    // look it up next: still refused.
    let empty = explain(&cfg, &snap, "10.96.0.12:80", "pod");
    assert_eq!(empty.outcome.verdict, Verdict::Rejected);
    let outside = explain(&cfg, &snap, "192.168.50.1:30080", "outside");
    assert_eq!(outside.outcome.verdict, Verdict::Untouched);
    assert!(
        outside.drift.iter().any(|d| d.contains(
            "kp_svc has no entry for TCP 192.168.50.1:30080 from outside (default/web:http): \
             packets from outside to it go to the node's stack untranslated"
        )),
        "{:?}",
        outside.drift
    );

    let (s, text) = status_text(&cfg, &snap);
    println!("$ kube-proxy-rs status\n{text}");
    let row = |name: &str| s.service_ports.iter().find(|p| p.name == name).unwrap();
    assert_eq!(
        (
            row("default/web:http").programmed,
            row("default/web:http").endpoints
        ),
        (Some(1), 2)
    );
    // Its entry gone, the ClusterIP's entry for undefined ports refuses it as planned: no
    // frontend answers otherwise, while the maps' drift still names the entry.
    assert_eq!(row("default/empty:http").drifted(), 0);
    assert!(
        s.drift.iter().any(|d| d.contains("TCP 10.96.0.12:80")),
        "{:?}",
        s.drift
    );

    // A link unpinned: its program is detached, and the drift names it.
    std::fs::remove_file(names::links_dir(&settings.pin_root).join("kp_connect4")).unwrap();
    let web = explain(&cfg, &snap, "10.96.0.10:80", "node");
    assert!(
        web.drift
            .iter()
            .any(|d| d.contains("not attached") && d.contains("kp_connect4")),
        "{:?}",
        web.drift
    );
}

/// GETs `path` from the proxy's metrics address inside `ns`; `None` until it answers 200.
fn debug(ns: &NetNs, path: &str) -> Option<String> {
    ns.try_output("curl", &["-sf", &format!("http://127.0.0.1:10249{path}")])
        .ok()
}

#[test]
fn the_running_proxy_answers_debug_explain_and_status_from_its_maps() {
    let cgroup = Cgroup::new();
    let fs = BpfFs::new();
    let settings = fs.settings(&cgroup);
    let dir = tempfile::tempdir().expect("manifest dir");
    std::fs::write(dir.path().join("cluster.yaml"), cluster()).expect("write manifests");
    let ns = NetNs::new("kprs-ebpf-dbg");
    ns.output("ip", &["link", "set", "lo", "up"]);
    let running = proxy(&ns, dir.path(), &settings);
    let ask = "/debug/explain?to=10.96.0.10:80&from=node";
    // Settled: forwarded, and the maps are what the proxy plans now. Until then the answer may
    // plan from a snapshot newer than the last sync (the host-address watcher's event moves
    // the NodePorts from the Node object's address to this namespace's own, and the sync that
    // follows is due only after the minimum sync period), so the kernel differs for a moment.
    let mut answer = None;
    let mut last = None;
    for _ in 0..100 {
        last = debug(&ns, ask);
        answer = last
            .clone()
            .filter(|a| a.contains("outcome: forwarded") && !a.contains("kernel differs"));
        if answer.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let answer = answer.unwrap_or_else(|| {
        panic!(
            "never forwarded with the maps as planned: {last:?}\n{}",
            running.log_tail(30)
        )
    });
    println!("$ curl '127.0.0.1:10249{ask}'\n{answer}");
    assert!(
        answer.contains("(ebpf mode, maps read from the kernel)"),
        "{answer}"
    );
    assert!(
        answer.contains("service port: default/web:http"),
        "{answer}"
    );
    assert!(answer.contains("hook: cgroup connect4"), "{answer}");
    assert!(!answer.contains("kernel differs"), "{answer}");
    let status = debug(&ns, "/debug/status").expect("status answers");
    println!("$ curl 127.0.0.1:10249/debug/status\n{status}");
    assert!(
        status.contains("ebpf mode, maps read from the kernel"),
        "{status}"
    );
    assert!(status.contains("kernel: matches the plan"), "{status}");
    let web = status
        .lines()
        .find(|l| l.starts_with("default/web:http"))
        .expect("web's row");
    assert!(web.contains(" 2/2 "), "{status}");
}

/// The client, re-run by the test inside the namespace and the cgroup.
#[test]
fn client_helper() {
    HELPER.when_requested(serve);
}
