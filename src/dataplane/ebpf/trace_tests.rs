use std::path::Path;

use super::*;
use crate::cli::load_manifests;
use crate::cluster::{Features, Snapshot};
use crate::config::NodePortAddresses;
use crate::dataplane::ebpf::layout::{Backend, SvcKey};
use crate::dataplane::ebpf::plan::{self, NodePorts};
use crate::testing::snapshots::{node, snapshot, svc};

/// The example cluster as `node` sees it, and its plan with NodePorts on every address.
fn example(node: &str) -> (Snapshot, Plan) {
    let loaded = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads");
    let ports = plan::node_ports(
        &NodePortAddresses {
            all: true,
            ..NodePortAddresses::default()
        },
        &loaded.snapshot.node,
    );
    let p = plan::plan(&loaded.snapshot, &ports);
    (loaded.snapshot, p)
}

fn call(protocol: Protocol, to: &str) -> Packet {
    Packet {
        protocol,
        to: to.parse().unwrap(),
        outside: false,
        source: "10.244.1.5".parse().unwrap(),
    }
}

fn addrs(list: &[&str]) -> Vec<SocketAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn key(to: &str, transport: Transport) -> SvcKey {
    let to: SocketAddr = to.parse().unwrap();
    diff::svc_key(&Frontend {
        ip: to.ip(),
        port: to.port(),
        transport,
        scope: Scope::Socket,
    })
}

#[test]
fn cluster_ip_connect_draws_one_of_the_planned_backends_at_connect_time() {
    let (_, p) = example("node-a");
    let maps = planned_maps(&p);
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.1.10:80"), None);
    assert_eq!(t.hooks, [Hook::Connect4]);
    let set = &p.frontends[&Frontend {
        ip: "10.96.1.10".parse().unwrap(),
        port: 80,
        transport: Transport::Tcp,
        scope: Scope::Socket,
    }];
    let mut want = p.sets[set].clone();
    want.sort();
    let got: Vec<SocketAddr> = t.backends().iter().map(|(b, _)| *b).collect();
    assert_eq!(got, want);
    assert!(!want.is_empty());
    for (_, share) in t.backends() {
        assert!((share - 1.0 / want.len() as f64).abs() < 1e-9);
    }
    assert!(!t.has_missing_slots());
    assert_eq!(t.entry.unwrap().count as usize, want.len());
}

#[test]
fn udp_meets_connect_and_sendmsg_and_ipv6_the_6_hooks() {
    let snap = snapshot(
        node(),
        vec![
            svc("kube-system/dns", "10.96.0.10", 53)
                .proto(Protocol::Udp)
                .ep("10.244.1.3", 53, "node-a"),
            svc("default/v6", "fd00:96::10", 80).ep("fd00:244:1::5", 8080, "node-a"),
        ],
    );
    let maps = planned_maps(&plan::plan(&snap, &NodePorts::default()));
    let t = trace(&maps, &call(Protocol::Udp, "10.96.0.10:53"), None);
    assert_eq!(t.hooks, [Hook::Connect4, Hook::Sendmsg4]);
    assert_eq!(t.backends(), [(addrs(&["10.244.1.3:53"])[0], 1.0)]);
    let t = trace(&maps, &call(Protocol::Tcp, "[fd00:96::10]:80"), None);
    assert_eq!(t.hooks, [Hook::Connect6]);
    assert_eq!(t.backends(), [(addrs(&["[fd00:244:1::5]:8080"])[0], 1.0)]);
    // The same address over TCP is no frontend of the DNS port: a port the Service does not
    // define, refused.
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.0.10:53"), None);
    assert_eq!(t.fate, Fate::Refused);
}

#[test]
fn no_endpoints_is_refused_and_local_policy_with_endpoints_elsewhere_times_out() {
    let snap = snapshot(
        node(),
        vec![
            svc("default/empty", "10.96.0.20", 80),
            svc("default/elsewhere", "10.96.0.21", 80)
                .internal_local()
                .ep("10.244.2.9", 8080, "node-b"),
        ],
    );
    let maps = planned_maps(&plan::plan(&snap, &NodePorts::default()));
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.0.20:80"), None);
    assert_eq!(t.fate, Fate::Refused);
    assert!(t.backends().is_empty());
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.0.21:80"), None);
    assert_eq!(t.fate, Fate::TimedOut);
    assert!(t.entry.unwrap().drop);
}

#[test]
fn internal_local_policy_on_a_node_without_local_endpoint_times_out_in_the_example() {
    // web-local's endpoints run on node-a and node-c; node-b has none of its own.
    let (_, p) = example("node-b");
    let maps = planned_maps(&p);
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.1.15:80"), None);
    assert_eq!(t.fate, Fate::TimedOut);
    let (_, p) = example("node-a");
    let t = trace(
        &planned_maps(&p),
        &call(Protocol::Tcp, "10.96.1.15:80"),
        None,
    );
    assert!(matches!(t.fate, Fate::Translated { .. }), "{t:?}");
}

#[test]
fn sctp_is_not_seen_undefined_ports_refused_and_other_addresses_untouched() {
    let (_, p) = example("node-a");
    let maps = planned_maps(&p);
    let t = trace(&maps, &call(Protocol::Sctp, "10.96.1.10:80"), None);
    assert_eq!(t.fate, Fate::NotSeen(Unseen::Protocol));
    assert!(t.hooks.is_empty());
    let t = trace(&maps, &call(Protocol::Tcp, "10.96.1.10:81"), None);
    assert_eq!(t.fate, Fate::Refused, "a port the Service does not define");
    let t = trace(&maps, &call(Protocol::Tcp, "192.0.2.200:80"), None);
    assert_eq!(t.fate, Fate::Untouched);
    assert!(t.entry.is_none());
}

fn sticky() -> (Maps, SvcVal) {
    let snap = snapshot(
        node(),
        vec![
            svc("default/sticky", "10.96.0.60", 80)
                .affinity(600)
                .ep("10.244.1.8", 8080, "node-a")
                .ep("10.244.2.8", 8080, "node-b"),
        ],
    );
    let maps = planned_maps(&plan::plan(&snap, &NodePorts::default()));
    let v = maps.svc[&key("10.96.0.60:80", Transport::Tcp)];
    (maps, v)
}

fn remembered(to: &str, slot: u16, generation: u8, age_s: u64) -> Remembered {
    let b = Backend::new(to.parse().unwrap());
    let now_ns = 10_000 * 1_000_000_000;
    Remembered {
        entry: AffVal {
            last_used_ns: now_ns - age_s * 1_000_000_000,
            addr: b.addr,
            port: b.port,
            slot,
            generation,
            pad: [0; 3],
        },
        now_ns,
    }
}

#[test]
fn affinity_entry_within_timeout_gives_its_backend_and_an_expired_one_draws_again() {
    let (maps, v) = sticky();
    let packet = call(Protocol::Tcp, "10.96.0.60:80");
    assert_eq!(
        trace(&maps, &packet, None).entry.unwrap().affinity,
        Some(600)
    );
    let slot_of = |b: &str| {
        (0..v.count)
            .find(|&i| {
                maps.slots[&SlotKey {
                    svc_id: v.svc_id,
                    slot: i,
                    generation: v.generation,
                    pad: 0,
                }]
                    .socket_addr()
                    == b.parse().unwrap()
            })
            .unwrap()
    };
    let at = slot_of("10.244.2.8:8080");
    let fresh = remembered("10.244.2.8:8080", at, v.generation, 30);
    assert_eq!(
        trace(&maps, &packet, Some(&fresh)).backends(),
        [(addrs(&["10.244.2.8:8080"])[0], 1.0)]
    );
    // Another generation: found by the scan.
    let moved = remembered("10.244.2.8:8080", 0, v.generation.wrapping_add(1), 30);
    assert_eq!(trace(&maps, &packet, Some(&moved)).backends().len(), 1);
    let old = remembered("10.244.2.8:8080", at, v.generation, 601);
    assert_eq!(trace(&maps, &packet, Some(&old)).backends().len(), 2);
    let gone = remembered("10.244.9.9:8080", 0, v.generation, 1);
    assert_eq!(trace(&maps, &packet, Some(&gone)).backends().len(), 2);
}

#[test]
fn a_missing_slot_leaves_its_draws_untranslated_and_is_drift() {
    let (_, p) = example("node-a");
    let planned = planned_maps(&p);
    assert!(drift(&planned, &p).is_empty(), "{:?}", drift(&planned, &p));
    let mut kernel = planned.clone();
    let v = kernel.svc[&key("10.96.1.10:80", Transport::Tcp)];
    let gone = SlotKey {
        svc_id: v.svc_id,
        slot: 0,
        generation: v.generation,
        pad: 0,
    };
    let lost = kernel.slots.remove(&gone).unwrap().socket_addr();
    let t = trace(&kernel, &call(Protocol::Tcp, "10.96.1.10:80"), None);
    assert!(t.has_missing_slots());
    assert!(!t.backends().iter().any(|(b, _)| *b == lost));
    let total: f64 = t.backends().iter().map(|(_, s)| s).sum();
    assert!(total < 1.0);
    let d = drift(&kernel, &p);
    assert!(
        d.iter().any(|l| l.contains("default/web:http")
            && l.contains(&format!("backend {lost} is not in the kernel"))),
        "{d:?}"
    );
    // Said once: the backend lost, not the slot too.
    assert!(!d.iter().any(|l| l.contains("slots are missing")), "{d:?}");
    // A count past the slots written loses no backend: the missing slot itself is named.
    let mut kernel = planned.clone();
    let k = key("10.96.1.10:80", Transport::Tcp);
    kernel.svc.get_mut(&k).unwrap().count += 1;
    let d = drift(&kernel, &p);
    assert!(
        d.iter()
            .any(|l| l.contains("(default/web:http): 1 of its 4 slots are missing")),
        "{d:?}"
    );
}

#[test]
fn drift_names_missing_extra_and_changed_frontends_and_node_ports() {
    let (_, p) = example("node-a");
    let mut kernel = planned_maps(&p);
    kernel.svc.remove(&key("10.96.1.11:80", Transport::Tcp));
    let extra = key("10.96.9.9:80", Transport::Tcp);
    let val = kernel.svc[&key("10.96.1.10:80", Transport::Tcp)];
    kernel.svc.insert(extra, val);
    let sticky = key("10.96.1.14:80", Transport::Tcp);
    kernel.svc.get_mut(&sticky).unwrap().flags = 0;
    let np = *kernel.node_ports.iter().next().unwrap();
    kernel.node_ports.remove(&np);
    let d = drift(&kernel, &p);
    let has = |s: &str| d.iter().any(|l| l.contains(s));
    assert!(
        has("kp_svc has no entry for TCP 10.96.1.11:80 (default/web-nodeport:http)"),
        "{d:?}"
    );
    assert!(
        has("kp_svc entry TCP 10.96.9.9:80 is not in the plan"),
        "{d:?}"
    );
    assert!(
        has(
            "TCP 10.96.1.14:80 (default/web-sticky:http): ClientIP affinity none in the kernel, 10800 s in the plan"
        ),
        "{d:?}"
    );
    assert!(
        has(&format!(
            "kp_nodeport has no entry for NodePort {}/TCP",
            np.port
        )),
        "{d:?}"
    );
}

#[test]
fn the_affinity_scan_bound_is_the_headers() {
    let header = include_str!("../../../bpf/kp_maps.h");
    let line = header
        .lines()
        .find(|l| l.starts_with("#define KP_AFFINITY_SCAN "))
        .expect("the header defines KP_AFFINITY_SCAN");
    let n: u16 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(n, AFFINITY_SCAN);
}

#[test]
fn the_undefined_port_is_the_headers() {
    let header = include_str!("../../../bpf/kp_maps.h");
    let line = header
        .lines()
        .find(|l| l.starts_with("#define KP_UNDEFINED_PORT "))
        .expect("the header defines KP_UNDEFINED_PORT");
    let n: u16 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert_eq!(n, crate::dataplane::ebpf::plan::UNDEFINED_PORT);
}
