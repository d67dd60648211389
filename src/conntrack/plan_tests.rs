//! Table-driven tests of the stale-flow decision, on snapshots built by the tracker.

use std::net::IpAddr;

use super::*;
use crate::cluster::{Features, Tracker};
use crate::conntrack::flow::{IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, Tuple};
use crate::testing::*;

const NODE_IP: &str = "192.168.50.1";
const CLIENT: &str = "10.244.9.9";

/// kube-system/dns: ClusterIP 10.96.0.10, externalIP 203.0.113.10, LoadBalancer 198.51.100.10,
/// UDP 53 (NodePort 30053), TCP 53 and SCTP 53, all to target port 5353. Endpoints: .2 ready,
/// .3 terminating but serving, .4 neither. kube-system/empty: UDP 10.96.0.20:53, NodePort
/// 30054, no endpoints. kube-system/high: UDP on 10.96.0.30 port 30053 (the number of dns's
/// NodePort) with endpoint 10.244.2.1:9000.
fn frontends() -> Frontends {
    let mut tracker = Tracker::new("node-a", Features::default());
    let mut dns = load_balancer(
        service(
            "kube-system",
            "dns",
            "10.96.0.10",
            &[
                ("dns", 53, "UDP"),
                ("dns-tcp", 53, "TCP"),
                ("dns-sctp", 53, "SCTP"),
            ],
        ),
        &[30053, 30153, 30253],
        &[("198.51.100.10", None)],
    );
    spec(&mut dns).external_ips = Some(vec!["203.0.113.10".to_string()]);
    let ports = [
        ("dns", 5353, "UDP"),
        ("dns-tcp", 5353, "TCP"),
        ("dns-sctp", 5353, "SCTP"),
    ];
    let eps = [
        ep("10.244.1.2", "node-a"),
        ep("10.244.1.3", "node-b").terminating(),
        ep("10.244.1.4", "node-b").not_ready(),
    ];
    let empty = node_port(
        service("kube-system", "empty", "10.96.0.20", &[("u", 53, "UDP")]),
        &[30054],
    );
    let high = service("kube-system", "high", "10.96.0.30", &[("u", 30053, "UDP")]);
    let events = [
        applied_node(node("node-a", NODE_IP, None)),
        applied_service(dns),
        applied_slice(slice("kube-system", "dns", "dns-1", &ports, &eps)),
        applied_service(empty),
        applied_service(high),
        applied_slice(slice(
            "kube-system",
            "high",
            "high-1",
            &[("u", 9000, "UDP")],
            &[ep("10.244.2.1", "node-b")],
        )),
    ];
    for event in &events {
        assert!(tracker.apply(event).is_empty(), "{event:?}");
    }
    Frontends::from_snapshot(&tracker.snapshot().0)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A flow from the client's port 40000 to `dst:dport`, with replies from `reply:rport`.
fn flow(protocol: u8, dst: &str, dport: u16, reply: &str, rport: u16) -> Flow {
    Flow {
        protocol,
        original: Tuple {
            src: ip(CLIENT),
            dst: ip(dst),
            src_port: 40000,
            dst_port: dport,
        },
        reply: Tuple {
            src: ip(reply),
            dst: ip(CLIENT),
            src_port: rport,
            dst_port: 40000,
        },
        id: Some(7),
        zone: None,
    }
}

const UDP: u8 = IPPROTO_UDP;

#[test]
fn judges_each_flow_by_its_frontend_and_reply_source() {
    use Judgement::*;
    #[rustfmt::skip]
    let table: &[(&str, Flow, Judgement)] = &[
        ("ClusterIP to a ready endpoint", flow(UDP, "10.96.0.10", 53, "10.244.1.2", 5353), Valid),
        ("ClusterIP to a terminating, serving endpoint", flow(UDP, "10.96.0.10", 53, "10.244.1.3", 5353), Valid),
        ("ClusterIP to an endpoint that stopped serving", flow(UDP, "10.96.0.10", 53, "10.244.1.4", 5353), StaleEndpoint),
        ("ClusterIP to a deleted endpoint", flow(UDP, "10.96.0.10", 53, "10.244.1.99", 5353), StaleEndpoint),
        ("ClusterIP to the old target port of a live endpoint", flow(UDP, "10.96.0.10", 53, "10.244.1.2", 5354), StaleEndpoint),
        ("ClusterIP never DNATed (rejected before endpoints came)", flow(UDP, "10.96.0.10", 53, "10.96.0.10", 53), NotDnatted),
        ("externalIP to a deleted endpoint", flow(UDP, "203.0.113.10", 53, "10.244.1.99", 5353), StaleEndpoint),
        ("externalIP to a ready endpoint", flow(UDP, "203.0.113.10", 53, "10.244.1.2", 5353), Valid),
        ("LoadBalancer IP to a deleted endpoint", flow(UDP, "198.51.100.10", 53, "10.244.1.99", 5353), StaleEndpoint),
        ("LoadBalancer IP never DNATed", flow(UDP, "198.51.100.10", 53, "198.51.100.10", 53), NotDnatted),
        ("NodePort on the node IP to a deleted endpoint", flow(UDP, NODE_IP, 30053, "10.244.1.99", 5353), StaleEndpoint),
        ("NodePort on the node IP to a ready endpoint", flow(UDP, NODE_IP, 30053, "10.244.1.2", 5353), Valid),
        ("NodePort on another local address, DNATed to a deleted endpoint", flow(UDP, "172.17.0.1", 30053, "10.244.1.99", 5353), StaleEndpoint),
        ("NodePort on the node IP never DNATed", flow(UDP, NODE_IP, 30053, NODE_IP, 30053), NotDnatted),
        ("port 30053 of an outside server, not NATed", flow(UDP, "8.8.8.8", 30053, "8.8.8.8", 30053), NotOurs),
        ("a ClusterIP port numbered like a NodePort is judged by its own endpoints", flow(UDP, "10.96.0.30", 30053, "10.244.2.1", 9000), Valid),
        ("... and is stale by its own endpoints", flow(UDP, "10.96.0.30", 30053, "10.244.1.2", 5353), StaleEndpoint),
        ("TCP to a deleted endpoint is never touched", flow(IPPROTO_TCP, "10.96.0.10", 53, "10.244.1.99", 5353), NotOurs),
        ("TCP NodePort to a deleted endpoint is never touched", flow(IPPROTO_TCP, NODE_IP, 30153, "10.244.1.99", 5353), NotOurs),
        ("SCTP to a deleted endpoint", flow(IPPROTO_SCTP, "10.96.0.10", 53, "10.244.1.99", 5353), StaleEndpoint),
        ("SCTP NodePort to a ready endpoint", flow(IPPROTO_SCTP, NODE_IP, 30253, "10.244.1.2", 5353), Valid),
        ("ICMP is never touched", flow(1, "10.96.0.10", 0, "10.244.1.99", 0), NotOurs),
        ("UDP to a port the Service does not have", flow(UDP, "10.96.0.10", 54, "10.244.1.99", 5353), NotOurs),
        ("UDP to an address that is no frontend", flow(UDP, "10.96.0.99", 53, "10.244.1.99", 5353), NotOurs),
        ("a frontend without endpoints keeps its flows", flow(UDP, "10.96.0.20", 53, "10.244.1.99", 5353), NoEndpoints),
        ("... also its un-NATed ones", flow(UDP, "10.96.0.20", 53, "10.96.0.20", 53), NoEndpoints),
        ("a NodePort without endpoints keeps its flows", flow(UDP, NODE_IP, 30054, "10.244.1.99", 5353), NoEndpoints),
    ];
    let frontends = frontends();
    for (what, flow, want) in table {
        assert_eq!(frontends.judge(flow), *want, "{what}: {flow}");
    }
}

#[test]
fn stale_lists_exactly_the_stale_flows_in_order() {
    let flows = vec![
        flow(UDP, "10.96.0.10", 53, "10.244.1.99", 5353),
        flow(UDP, "10.96.0.10", 53, "10.244.1.2", 5353),
        flow(IPPROTO_TCP, "10.96.0.10", 53, "10.244.1.99", 5353),
        flow(UDP, NODE_IP, 30053, NODE_IP, 30053),
    ];
    let stale: Vec<_> = frontends()
        .stale(&flows, &Translation::ToEndpoint)
        .cloned()
        .collect();
    assert_eq!(stale, vec![flows[0].clone(), flows[3].clone()]);
}

/// Userspace mode: the redirect DNATs a frontend's flows to the relay on this node, whatever
/// endpoint the relay then uses; a flow redirected to a port the relay no longer listens on,
/// and one never redirected, are stale.
#[test]
fn relayed_flows_are_valid_while_their_listener_is_open() {
    use Judgement::*;
    let relay = (NODE_IP, 41_000);
    let table = [
        (
            "ClusterIP redirected to the relay",
            flow(UDP, "10.96.0.10", 53, relay.0, relay.1),
            Valid,
        ),
        (
            "NodePort redirected to the relay",
            flow(UDP, NODE_IP, 30053, relay.0, relay.1),
            Valid,
        ),
        (
            "ClusterIP redirected to a port the relay no longer listens on (a restart)",
            flow(UDP, "10.96.0.10", 53, relay.0, 39_999),
            StaleEndpoint,
        ),
        (
            "NodePort redirected to a closed listener's port, on loopback",
            flow(UDP, NODE_IP, 30053, "127.0.0.1", 39_999),
            StaleEndpoint,
        ),
        (
            "SCTP redirected: the relay has no SCTP listener",
            flow(IPPROTO_SCTP, "10.96.0.10", 53, relay.0, relay.1),
            StaleEndpoint,
        ),
        (
            "ClusterIP never redirected (began before the rules)",
            flow(UDP, "10.96.0.10", 53, "10.96.0.10", 53),
            NotDnatted,
        ),
        (
            "NodePort never redirected",
            flow(UDP, NODE_IP, 30053, NODE_IP, 30053),
            NotDnatted,
        ),
        (
            "a frontend without endpoints keeps its flows",
            flow(UDP, "10.96.0.20", 53, "10.96.0.20", 53),
            NoEndpoints,
        ),
        (
            "TCP is never touched",
            flow(IPPROTO_TCP, "10.96.0.10", 53, "10.96.0.10", 53),
            NotOurs,
        ),
    ];
    let frontends = frontends();
    let relaying = Translation::ToRelay {
        ports: Arc::new([(Protocol::Udp, relay.1), (Protocol::Tcp, 39_999)].into()),
    };
    for (what, flow, want) in &table {
        assert_eq!(frontends.judge_as(flow, &relaying), *want, "{what}: {flow}");
    }
    // The same flows judged as the NAT modes judge them: a relay is no endpoint.
    assert_eq!(frontends.judge(&table[0].1), StaleEndpoint);
}

#[test]
fn an_ipv4_node_port_is_judged_by_ipv4_endpoints_only() {
    let mut flow = flow(UDP, NODE_IP, 30053, "10.244.1.99", 5353);
    let frontends = frontends();
    assert!(frontends.judge(&flow).stale());
    // The same port over IPv6: this snapshot has no IPv6 view, so nothing there is ours.
    flow.original.src = ip("fd00::9");
    flow.original.dst = ip("fd00::1");
    flow.reply.src = ip("fd00::99");
    flow.reply.dst = ip("fd00::9");
    assert_eq!(frontends.judge(&flow), Judgement::NotOurs);
}

#[test]
fn a_snapshot_without_udp_or_sctp_ports_has_nothing_to_reconcile() {
    let mut tracker = Tracker::new("node-a", Features::default());
    tracker.apply(&applied_service(service(
        "default",
        "web",
        "10.96.0.80",
        &[("http", 80, "TCP")],
    )));
    let frontends = Frontends::from_snapshot(&tracker.snapshot().0);
    assert!(frontends.is_empty());
    assert_eq!(frontends, Frontends::default());
}

#[test]
fn equal_models_give_equal_frontends_and_an_endpoint_change_does_not() {
    assert_eq!(frontends(), frontends());
    let mut tracker = Tracker::new("node-a", Features::default());
    tracker.apply(&applied_service(service(
        "kube-system",
        "dns",
        "10.96.0.10",
        &[("dns", 53, "UDP")],
    )));
    let before = Frontends::from_snapshot(&tracker.snapshot().0);
    tracker.apply(&applied_slice(slice(
        "kube-system",
        "dns",
        "dns-1",
        &[("dns", 5353, "UDP")],
        &[ep("10.244.1.2", "node-a")],
    )));
    let after = Frontends::from_snapshot(&tracker.snapshot().0);
    assert_ne!(before, after);
}

#[test]
fn a_translated_socket_is_judged_by_the_frontend_it_asked_for() {
    use Judgement::*;
    let sa = |s: &str| -> std::net::SocketAddr { s.parse().unwrap() };
    let udp = Protocol::Udp;
    #[rustfmt::skip]
    let table: &[(&str, Protocol, &str, &str, Judgement)] = &[
        ("ClusterIP, backend ready", udp, "10.96.0.10:53", "10.244.1.2:5353", Valid),
        ("ClusterIP, backend terminating but serving", udp, "10.96.0.10:53", "10.244.1.3:5353", Valid),
        ("ClusterIP, backend stopped serving", udp, "10.96.0.10:53", "10.244.1.4:5353", StaleEndpoint),
        ("ClusterIP, backend deleted", udp, "10.96.0.10:53", "10.244.1.99:5353", StaleEndpoint),
        ("ClusterIP, the old target port", udp, "10.96.0.10:53", "10.244.1.2:5354", StaleEndpoint),
        ("externalIP, backend deleted", udp, "203.0.113.10:53", "10.244.1.99:5353", StaleEndpoint),
        ("NodePort on 127.0.0.1 from the node, backend deleted", udp, "127.0.0.1:30053", "10.244.1.99:5353", StaleEndpoint),
        ("NodePort on the node IP, backend ready", udp, "192.168.50.1:30053", "10.244.1.2:5353", Valid),
        ("a ClusterIP port numbered like a NodePort, by its own endpoints", udp, "10.96.0.30:30053", "10.244.2.1:9000", Valid),
        ("a frontend without endpoints keeps its sockets", udp, "10.96.0.20:53", "10.244.1.99:5353", NoEndpoints),
        ("no such frontend", udp, "10.96.0.99:53", "10.244.1.99:5353", NotOurs),
        ("TCP is never touched", Protocol::Tcp, "10.96.0.10:53", "10.244.1.99:5353", NotOurs),
        ("SCTP, backend deleted", Protocol::Sctp, "10.96.0.10:53", "10.244.1.99:5353", StaleEndpoint),
        ("an IPv6 NodePort frontend has no IPv6 endpoints here", udp, "[::1]:30053", "[fd00::99]:5353", NotOurs),
    ];
    let frontends = frontends();
    for (what, protocol, frontend, backend, want) in table {
        assert_eq!(
            frontends.judge_translated(*protocol, sa(frontend), sa(backend)),
            *want,
            "{what}"
        );
    }
}
