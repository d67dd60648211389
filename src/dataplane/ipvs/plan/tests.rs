//! Planner behaviour on small snapshots: which virtual services, destinations, bound addresses
//! and guards each kind of Service gets.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::{HostAddresses, plan};
use crate::cluster::{IpFamily, Protocol};
use crate::dataplane::ipvs::backend::link::addresses::wanted;
use crate::dataplane::ipvs::backend::netlink::{Flags, Forwarding, ServiceKey};
use crate::dataplane::ipvs::desired::{Desired, Frontend, Guard, VirtualService};
use crate::dataplane::ipvs::mode_config::ModeConfig;
use crate::testing::snapshots::{Svc, ip, node, snapshot, svc};

fn v4(services: Vec<Svc>) -> Desired {
    v4_on(services, &[])
}

/// The IPv4 plan with `host` as the node's addresses outside `kube-ipvs0`.
fn v4_on(services: Vec<Svc>, host: &[&str]) -> Desired {
    with(services, &ModeConfig::default(), IpFamily::V4, host)
}

fn with(services: Vec<Svc>, cfg: &ModeConfig, family: IpFamily, host: &[&str]) -> Desired {
    let host = HostAddresses(host.iter().map(|a| ip(a)).collect());
    plan(&snapshot(node(), services), cfg, family, &host)
}

fn key(addr: &str, port: u16) -> ServiceKey {
    ServiceKey::Address {
        protocol: crate::dataplane::ipvs::backend::netlink::Protocol::Tcp,
        address: SocketAddr::new(ip(addr), port),
    }
}

fn vs<'a>(d: &'a Desired, addr: &str, port: u16) -> &'a VirtualService {
    d.services.get(&key(addr, port)).unwrap_or_else(|| {
        panic!(
            "no virtual service {addr}:{port} in {:?}",
            d.services.keys()
        )
    })
}

fn dests(v: &VirtualService) -> Vec<String> {
    v.destinations
        .iter()
        .map(|d| d.address.to_string())
        .collect()
}

#[test]
fn a_cluster_ip_is_one_nat_virtual_service_with_every_endpoint_at_weight_one_and_is_bound() {
    let d = v4(vec![
        svc("ns/web", "10.96.0.10", 80)
            .ep("10.244.2.5", 8080, "node-b")
            .ep("10.244.1.7", 8080, "node-a"),
    ]);
    assert_eq!(d.services.len(), 1);
    let v = vs(&d, "10.96.0.10", 80);
    assert_eq!(v.frontend, Frontend::ClusterIp);
    assert_eq!(v.guard, Guard::None);
    assert_eq!(v.service.scheduler.as_str(), "rr");
    assert_eq!(v.service.flags, Flags::NONE);
    assert_eq!(dests(v), ["10.244.1.7:8080", "10.244.2.5:8080"]);
    assert!(
        v.destinations
            .iter()
            .all(|d| d.weight == 1 && d.forwarding == Forwarding::Masquerade)
    );
    assert_eq!(d.addresses.cluster_ips, BTreeSet::from([ip("10.96.0.10")]));
    assert!(d.addresses.external.is_empty());
    assert_eq!(d.objects(), 4);
}

#[test]
fn client_ip_affinity_is_persistence_with_the_services_timeout_per_client_address() {
    let d = v4(vec![svc("ns/web", "10.96.0.10", 80).affinity(600).ep(
        "10.244.2.5",
        8080,
        "node-b",
    )]);
    let s = &vs(&d, "10.96.0.10", 80).service;
    assert!(s.flags.contains(Flags::PERSISTENT));
    assert_eq!(s.timeout, 600);
    assert_eq!(s.netmask, u32::MAX, "one client address per entry");
}

#[test]
fn a_services_annotated_scheduler_replaces_the_nodes_unless_the_kernel_lacks_it() {
    use crate::cluster::scheduler_annotation::SchedulerChoice;
    let annotated = |name: &'static str| {
        let mut s =
            svc("ns/sticky", "10.96.0.20", 80)
                .node_port(30020)
                .ep("10.244.2.5", 8080, "node-b");
        s.port.ipvs_scheduler = Some(SchedulerChoice {
            name,
            fallback: true,
            port: false,
        });
        s
    };
    let plain = || svc("ns/web", "10.96.0.10", 80).ep("10.244.2.6", 8080, "node-b");
    let d = with(
        vec![annotated("sh"), plain()],
        &ModeConfig::default(),
        IpFamily::V4,
        &["10.0.0.11"],
    );
    for (addr, port) in [("10.96.0.20", 80), ("10.0.0.11", 30020)] {
        let v = vs(&d, addr, port);
        assert_eq!(v.service.scheduler.as_str(), "sh", "{addr}:{port}");
        assert_eq!(v.service.flags, Flags::SH_FALLBACK);
    }
    assert_eq!(vs(&d, "10.96.0.10", 80).service.scheduler.as_str(), "rr");

    let mut cfg = ModeConfig::default();
    cfg.unavailable_schedulers.insert("twos");
    let d = with(vec![annotated("twos")], &cfg, IpFamily::V4, &[]);
    let v = vs(&d, "10.96.0.20", 80);
    assert_eq!(
        (v.service.scheduler.as_str(), v.service.flags),
        ("rr", Flags::NONE),
        "the node's scheduler when the kernel has no ip_vs_twos"
    );
}

#[test]
fn the_scheduler_and_its_flags_go_on_every_virtual_service() {
    let cfg = ModeConfig {
        scheduler: crate::dataplane::ipvs::backend::netlink::Scheduler::new("mh"),
        scheduler_flags: Flags::MH_PORT,
        ..ModeConfig::default()
    };
    let d = with(
        vec![
            svc("ns/web", "10.96.0.10", 80)
                .node_port(30080)
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &cfg,
        IpFamily::V4,
        &["10.0.0.11"],
    );
    assert_eq!(d.services.len(), 2);
    for v in d.services.values() {
        assert_eq!(v.service.scheduler.as_str(), "mh");
        assert_eq!(v.service.flags, Flags::MH_PORT);
    }
}

#[test]
fn a_service_without_endpoints_keeps_its_virtual_service_and_is_rejected_by_the_guard() {
    let d = v4(vec![svc("ns/empty", "10.96.0.5", 80).node_port(30005)]);
    let v = vs(&d, "10.96.0.5", 80);
    assert!(v.destinations.is_empty());
    assert_eq!(v.guard, Guard::Reject);
    assert_eq!(vs(&d, "10.0.0.11", 30005).guard, Guard::Reject);
}

#[test]
fn node_ports_are_one_virtual_service_per_node_address_without_loopback_or_link_local() {
    let d = v4_on(
        vec![
            svc("ns/np", "10.96.0.20", 80)
                .node_port(30020)
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &["10.0.0.11", "192.168.7.1", "127.0.0.1", "fd00::11"],
    );
    let node_ports: Vec<String> = d
        .services
        .values()
        .filter(|v| v.frontend == Frontend::NodePort)
        .map(|v| v.service.key.to_string())
        .collect();
    assert_eq!(node_ports, ["TCP 10.0.0.11:30020", "TCP 192.168.7.1:30020"]);
    let d6 = with(
        vec![
            svc("ns/np6", "fd00:96::20", 80)
                .node_port(30021)
                .ep("fd00:244:2::5", 8080, "node-b"),
        ],
        &ModeConfig::default(),
        IpFamily::V6,
        &["fd00::11", "fe80::1", "::1", "10.0.0.11"],
    );
    let keys: Vec<String> = d6.services.keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, ["TCP [fd00::11]:30021", "TCP [fd00:96::20]:80"]);
}

#[test]
fn without_host_addresses_the_node_objects_addresses_serve_node_ports() {
    let d = v4(vec![svc("ns/np", "10.96.0.20", 80).node_port(30020).ep(
        "10.244.2.5",
        8080,
        "node-b",
    )]);
    assert_eq!(vs(&d, "10.0.0.11", 30020).frontend, Frontend::NodePort);
}

#[test]
fn node_port_addresses_choose_among_the_hosts_addresses() {
    let mut cfg = ModeConfig::default();
    cfg.node.node_ports = crate::config::NodePortAddresses {
        cidrs: vec!["192.168.0.0/16".parse().unwrap()],
        primary: false,
        localhost: false,
        all: false,
    };
    let mut n = node();
    n.host_addresses = Some(vec![ip("10.0.0.11"), ip("192.168.7.1")].into());
    let snap = snapshot(
        n,
        vec![
            svc("ns/np", "10.96.0.20", 80)
                .node_port(30020)
                .ep("10.244.2.5", 8080, "node-b"),
        ],
    );
    let host = HostAddresses(BTreeSet::from([ip("10.0.0.11"), ip("192.168.7.1")]));
    let d = plan(&snap, &cfg, IpFamily::V4, &host);
    let keys: Vec<String> = d.services.keys().map(|k| k.to_string()).collect();
    assert_eq!(keys, ["TCP 10.96.0.20:80", "TCP 192.168.7.1:30020"]);
}

#[test]
fn external_ips_and_load_balancer_ips_are_service_addresses_bound_unless_the_node_has_them() {
    let d = v4_on(
        vec![
            svc("ns/ext", "10.96.0.30", 80)
                .external("192.0.2.30")
                .external("10.0.0.11")
                .lb("198.51.100.30")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &["10.0.0.11"],
    );
    assert_eq!(vs(&d, "192.0.2.30", 80).frontend, Frontend::ExternalIp);
    assert_eq!(vs(&d, "10.0.0.11", 80).frontend, Frontend::ExternalIp);
    assert_eq!(vs(&d, "198.51.100.30", 80).frontend, Frontend::LoadBalancer);
    let host = BTreeSet::from([ip("10.0.0.11")]);
    let bound: Vec<IpAddr> = wanted(&d.addresses, &host).into_iter().collect();
    assert_eq!(
        bound,
        [ip("10.96.0.30"), ip("192.0.2.30"), ip("198.51.100.30")],
        "10.0.0.11 is the node's own address: not bound again"
    );
}

#[test]
fn internal_policy_local_uses_local_endpoints_and_without_one_drops() {
    let d = v4(vec![
        svc("ns/itp", "10.96.0.40", 80)
            .internal_local()
            .ep("10.244.1.7", 8080, "node-a")
            .ep("10.244.2.5", 8080, "node-b"),
        svc("ns/itp-none", "10.96.0.41", 80)
            .internal_local()
            .ep("10.244.2.5", 8080, "node-b"),
    ]);
    assert_eq!(dests(vs(&d, "10.96.0.40", 80)), ["10.244.1.7:8080"]);
    let none = vs(&d, "10.96.0.41", 80);
    assert!(none.destinations.is_empty());
    assert_eq!(
        none.guard,
        Guard::Drop,
        "not upstream IPVS's fallback to every endpoint"
    );
}

#[test]
fn external_policy_local_uses_local_endpoints_and_without_one_drops_only_outside_traffic() {
    let d = v4_on(
        vec![
            svc("ns/etp", "10.96.0.50", 80)
                .external_local()
                .node_port(30050)
                .lb("198.51.100.50")
                .ep("10.244.1.7", 8080, "node-a")
                .ep("10.244.2.5", 8080, "node-b"),
            svc("ns/etp-none", "10.96.0.51", 80)
                .external_local()
                .node_port(30051)
                .ep("10.244.2.5", 8080, "node-b")
                .ep("10.244.3.5", 8080, "node-c"),
        ],
        &["10.0.0.11"],
    );
    assert_eq!(
        dests(vs(&d, "10.96.0.50", 80)).len(),
        2,
        "the ClusterIP is Cluster"
    );
    assert_eq!(dests(vs(&d, "198.51.100.50", 80)), ["10.244.1.7:8080"]);
    assert_eq!(dests(vs(&d, "10.0.0.11", 30050)), ["10.244.1.7:8080"]);
    let none = vs(&d, "10.0.0.11", 30051);
    assert_eq!(none.guard, Guard::DropFromOutside);
    assert_eq!(
        dests(none),
        ["10.244.2.5:8080", "10.244.3.5:8080"],
        "for pods and the node"
    );
}

#[test]
fn terminating_endpoints_serve_only_when_no_ready_one_is_left() {
    let d = v4(vec![
        svc("ns/t", "10.96.0.60", 80)
            .ep("10.244.2.5", 8080, "node-b")
            .ep_state("10.244.2.6", 8080, "node-b", false, true),
        svc("ns/t-only", "10.96.0.61", 80).ep_state("10.244.2.6", 8080, "node-b", false, true),
    ]);
    assert_eq!(dests(vs(&d, "10.96.0.60", 80)), ["10.244.2.5:8080"]);
    assert_eq!(dests(vs(&d, "10.96.0.61", 80)), ["10.244.2.6:8080"]);
}

#[test]
fn each_family_plans_only_its_own_services_and_protocols_stay_apart() {
    let services = vec![
        svc("ns/v4", "10.96.0.70", 53)
            .proto(Protocol::Udp)
            .ep("10.244.2.5", 53, "node-b"),
        svc("ns/v6", "fd00:96::70", 80).ep("fd00:244:2::5", 8080, "node-b"),
    ];
    let d4 = with(services.clone(), &ModeConfig::default(), IpFamily::V4, &[]);
    let d6 = with(services, &ModeConfig::default(), IpFamily::V6, &[]);
    let k4: Vec<String> = d4.services.keys().map(|k| k.to_string()).collect();
    let k6: Vec<String> = d6.services.keys().map(|k| k.to_string()).collect();
    assert_eq!(k4, ["UDP 10.96.0.70:53"]);
    assert_eq!(k6, ["TCP [fd00:96::70]:80"]);
    assert_eq!(
        d6.addresses.cluster_ips,
        BTreeSet::from([ip("fd00:96::70")])
    );
}
