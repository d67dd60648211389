use std::net::SocketAddr;

use super::super::{Dropped, Fate, Hook, Packet, Remembered, planned_maps, trace};
use super::client_key;
use crate::cluster::Protocol;
use crate::config::NodePortAddresses;
use crate::dataplane::ebpf::diff::{self, Maps};
use crate::dataplane::ebpf::layout::{AffVal, Backend, SrcKey};
use crate::dataplane::ebpf::plan::{self, Frontend, Plan, Scope, Transport};
use crate::testing::snapshots::{Svc, node, snapshot, svc};

const CLIENT: &str = "203.0.113.9";
const OTHER: &str = "192.0.2.77";

fn planned(services: Vec<Svc>) -> (Plan, Maps) {
    let snap = snapshot(node(), services);
    let primary = NodePortAddresses {
        primary: true,
        ..NodePortAddresses::default()
    };
    let p = plan::plan(&snap, &plan::node_ports(&primary, &snap.node));
    let maps = planned_maps(&p);
    (p, maps)
}

fn from(client: &str, to: &str) -> Packet {
    Packet {
        protocol: Protocol::Tcp,
        to: to.parse().unwrap(),
        outside: true,
        source: client.parse().unwrap(),
    }
}

fn addrs(list: &[&str]) -> Vec<SocketAddr> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn reached(t: &super::Trace) -> Vec<SocketAddr> {
    t.backends().into_iter().map(|(b, _)| b).collect()
}

#[test]
fn node_port_from_outside_is_balanced_at_tc_ingress_with_the_source_rewritten_under_cluster() {
    let (_, maps) = planned(vec![
        svc("default/web", "10.96.0.10", 80)
            .node_port(30080)
            .ep("10.244.1.5", 8080, "node-a")
            .ep("10.244.2.5", 8080, "node-b"),
    ]);
    let t = trace(&maps, &from(CLIENT, "10.0.0.11:30080"), None);
    assert_eq!(t.hooks, [Hook::TcIngress]);
    assert_eq!(reached(&t), addrs(&["10.244.1.5:8080", "10.244.2.5:8080"]));
    let e = t.entry.unwrap();
    assert!(e.snat && !e.drop);
    assert_eq!(t.source_ranges, None);
    // The socket programs' entry for the same NodePort is another one: no source rewrite.
    let inside = Packet {
        outside: false,
        ..from(CLIENT, "10.0.0.11:30080")
    };
    let s = trace(&maps, &inside, None);
    assert_eq!(s.hooks, [Hook::Connect4]);
    assert!(!s.entry.unwrap().snat);
    // A port no NodePort has goes on to the node's stack.
    let t = trace(&maps, &from(CLIENT, "10.0.0.11:30081"), None);
    assert_eq!((t.fate, t.entry), (Fate::Untouched, None));
}

#[test]
fn local_policy_keeps_the_client_address_and_uses_local_endpoints_or_drops() {
    let (_, maps) = planned(vec![
        svc("default/local", "10.96.0.11", 80)
            .node_port(30081)
            .external_local()
            .ep("10.244.1.6", 8080, "node-a")
            .ep("10.244.2.6", 8080, "node-b"),
        svc("default/away", "10.96.0.12", 80)
            .node_port(30082)
            .external_local()
            .ep("10.244.2.7", 8080, "node-b"),
        svc("default/none", "10.96.0.13", 80).node_port(30083),
    ]);
    let t = trace(&maps, &from(CLIENT, "10.0.0.11:30081"), None);
    assert_eq!(reached(&t), addrs(&["10.244.1.6:8080"]));
    assert!(!t.entry.unwrap().snat);
    let t = trace(&maps, &from(CLIENT, "10.0.0.11:30082"), None);
    assert_eq!(t.fate, Fate::Dropped(Dropped::NoLocalEndpoint));
    let t = trace(&maps, &from(CLIENT, "10.0.0.11:30083"), None);
    assert_eq!(t.fate, Fate::Refused);
}

#[test]
fn source_ranges_are_checked_first_and_guard_only_the_load_balancer_ip() {
    let (_, maps) = planned(vec![
        svc("default/lb", "10.96.0.20", 80)
            .node_port(30090)
            .lb("198.51.100.7")
            .range("203.0.113.0/24")
            .ep("10.244.2.5", 8080, "node-b"),
        svc("default/lb-empty", "10.96.0.21", 80)
            .lb("198.51.100.8")
            .range("203.0.113.0/24"),
    ]);
    let t = trace(&maps, &from(CLIENT, "198.51.100.7:80"), None);
    assert_eq!(reached(&t), addrs(&["10.244.2.5:8080"]));
    let ranges = t.source_ranges.as_ref().unwrap();
    assert_eq!(ranges, &["203.0.113.0/24".parse::<ipnet::IpNet>().unwrap()]);
    let t = trace(&maps, &from(OTHER, "198.51.100.7:80"), None);
    assert_eq!(t.fate, Fate::Dropped(Dropped::SourceRange));
    assert!(t.backends().is_empty());
    // The NodePort of the same port is not restricted.
    let t = trace(&maps, &from(OTHER, "10.0.0.11:30090"), None);
    assert!(matches!(t.fate, Fate::Translated { .. }), "{t:?}");
    // Before the count: an outsider is dropped, not refused, where there is no endpoint.
    let t = trace(&maps, &from(OTHER, "198.51.100.8:80"), None);
    assert_eq!(t.fate, Fate::Dropped(Dropped::SourceRange));
    let t = trace(&maps, &from(CLIENT, "198.51.100.8:80"), None);
    assert_eq!(t.fate, Fate::Refused);
}

#[test]
fn a_socket_of_the_node_is_held_to_the_ranges_on_its_way_out() {
    let (_, maps) = planned(vec![
        svc("default/lb", "10.96.0.20", 80)
            .lb("198.51.100.7")
            .range("10.244.1.0/24")
            .ep("10.244.2.5", 8080, "node-b"),
        svc("default/lb-empty", "10.96.0.21", 80)
            .lb("198.51.100.8")
            .range("10.244.1.0/24"),
    ]);
    let socket = |source: &str, to: &str| Packet {
        protocol: Protocol::Tcp,
        to: to.parse().unwrap(),
        outside: false,
        source: source.parse().unwrap(),
    };
    // A pod inside the ranges is translated; the node's address is not in them: the socket
    // is translated at connect() and its packets dropped by the egress program.
    let t = trace(&maps, &socket("10.244.1.5", "198.51.100.7:80"), None);
    assert_eq!(reached(&t), addrs(&["10.244.2.5:8080"]));
    let ranges = t.source_ranges.as_ref().unwrap();
    assert_eq!(ranges, &["10.244.1.0/24".parse::<ipnet::IpNet>().unwrap()]);
    let t = trace(&maps, &socket("10.0.0.11", "198.51.100.7:80"), None);
    assert_eq!(t.fate, Fate::Dropped(Dropped::SourceRange));
    // connect() refuses before any packet leaves: no endpoint is refused, whatever the source.
    let t = trace(&maps, &socket("10.0.0.11", "198.51.100.8:80"), None);
    assert_eq!(t.fate, Fate::Refused);
    // The ClusterIP is not restricted.
    let t = trace(&maps, &socket("10.0.0.11", "10.96.0.20:80"), None);
    assert_eq!(t.source_ranges, None);
    assert!(matches!(t.fate, Fate::Translated { .. }), "{t:?}");
}

#[test]
fn a_restricted_frontend_without_its_range_entries_drops_everyone() {
    let (_, mut maps) = planned(vec![
        svc("default/lb", "10.96.0.20", 80)
            .lb("198.51.100.7")
            .range("203.0.113.0/24")
            .ep("10.244.2.5", 8080, "node-b"),
    ]);
    maps.src
        .retain(|k| k.prefixlen == crate::dataplane::ebpf::layout::SRC_FRONTEND_BITS);
    let t = trace(&maps, &from(CLIENT, "198.51.100.7:80"), None);
    assert_eq!(t.fate, Fate::Dropped(Dropped::SourceRange));
    assert_eq!(t.source_ranges, Some(Vec::new()));
}

fn entry(to: &str, age_s: u64) -> Remembered {
    let b = Backend::new(to.parse().unwrap());
    let now_ns = 10_000 * 1_000_000_000;
    Remembered {
        entry: AffVal {
            last_used_ns: now_ns - age_s * 1_000_000_000,
            addr: b.addr,
            port: b.port,
            slot: 7,
            generation: 1,
            pad: [0; 3],
        },
        now_ns,
    }
}

#[test]
fn a_clients_affinity_entry_is_followed_within_the_timeout_while_its_backend_is_in_the_set() {
    let (_, maps) = planned(vec![
        svc("default/sticky", "10.96.0.30", 80)
            .node_port(30100)
            .affinity(60)
            .ep("10.244.1.8", 8080, "node-a")
            .ep("10.244.2.8", 8080, "node-b"),
    ]);
    let p = from(CLIENT, "10.0.0.11:30100");
    // Found by a scan of the slots, whatever slot and generation the entry names.
    let t = trace(&maps, &p, Some(&entry("10.244.2.8:8080", 30)));
    assert_eq!(reached(&t), addrs(&["10.244.2.8:8080"]));
    let t = trace(&maps, &p, Some(&entry("10.244.2.8:8080", 61)));
    assert_eq!(reached(&t).len(), 2);
    let t = trace(&maps, &p, Some(&entry("10.244.3.9:8080", 1)));
    assert_eq!(reached(&t).len(), 2);
}

#[test]
fn a_client_from_outside_is_keyed_by_its_mapped_address_with_the_top_bit_set() {
    let v4 = client_key(CLIENT.parse().unwrap());
    // kp_client_key of 203.0.113.9 as the maps hold it (IPv4 mapped), worked out by hand
    // from bpf/kp_tc.c's multipliers.
    assert_eq!(v4, 0xbbed_bfe1_f77e_4937);
    assert_eq!(v4, client_key("::ffff:203.0.113.9".parse().unwrap()));
    assert_ne!(v4, client_key(OTHER.parse().unwrap()));
    assert!(client_key("::".parse().unwrap()) >> 63 == 1);
}

#[test]
fn drift_names_external_frontends_their_source_policy_and_source_ranges() {
    let (p, planned_maps) = planned(vec![
        svc("default/lb", "10.96.0.20", 80)
            .node_port(30090)
            .lb("198.51.100.7")
            .range("203.0.113.0/24")
            .ep("10.244.2.5", 8080, "node-b"),
    ]);
    assert!(super::super::drift(&planned_maps, &p).is_empty());
    let lb = diff::svc_key(&Frontend {
        ip: "198.51.100.7".parse().unwrap(),
        port: 80,
        transport: Transport::Tcp,
        scope: Scope::External,
    });
    let np = diff::svc_key(&Frontend {
        ip: "10.0.0.11".parse().unwrap(),
        port: 30090,
        transport: Transport::Tcp,
        scope: Scope::External,
    });
    let mut kernel = planned_maps.clone();
    kernel.svc.remove(&np);
    kernel.svc.get_mut(&lb).unwrap().flags &= !crate::dataplane::ebpf::layout::SVC_F_SNAT;
    kernel
        .src
        .remove(&SrcKey::range(&lb, &"203.0.113.0/24".parse().unwrap()));
    let lines = super::super::drift(&kernel, &p);
    let want = [
        "kp_svc has no entry for TCP 10.0.0.11:30090 from outside (default/lb): packets \
         from outside to it go to the node's stack untranslated",
        "TCP 198.51.100.7:80 from outside (default/lb): the kernel keeps the client's \
         address, the plan rewrites the source to the node's address",
        "kp_src has no range 203.0.113.0/24 for TCP 198.51.100.7:80 from outside \
         (default/lb): its clients there are dropped",
    ];
    for w in want {
        assert!(lines.iter().any(|l| l == w), "{w:?} not in {lines:#?}");
    }
    assert_eq!(lines.len(), want.len(), "{lines:#?}");
}
