//! The redirect table's filters: what is refused or dropped, and where (a listener's own port,
//! a ClusterIP port no Service defines, the node's own traffic to a NodePort without
//! endpoints, `loadBalancerSourceRanges`), traced through the planned rules.

use super::tests::{elements, open_all, settings};
use super::*;
use crate::dataplane::nft_table::names as n;
use crate::testing::snapshots::{ip, node, snapshot, svc};

/// `src` → `dst`:`dport` over TCP arriving on `iface` (`lo` for the node's own traffic: the
/// input hook sees it after it loops back).
fn arriving(iface: &str, src: &str, dst: &str, dport: u16) -> crate::nft::trace::Packet {
    crate::nft::trace::Packet {
        protocol: Protocol::Tcp,
        src: ip(src),
        dst: ip(dst),
        dport,
        origin: crate::nft::trace::Origin::Interface(iface.into()),
    }
}

#[test]
fn a_listeners_port_is_refused_unless_the_redirect_sent_the_connection_there() {
    use crate::nft::trace::{Fate, trace};
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .lb("198.51.100.9")
                .range("192.168.200.0/24")
                .ep("10.244.2.5", 8080, "node-b"),
            svc("default/dns", "10.96.0.11", 53)
                .proto(Protocol::Udp)
                .ep("10.244.2.6", 53, "node-b"),
            svc("default/web6", "fd00:96::10", 80).ep("fd00:244:2::5", 8080, "node-b"),
        ],
    );
    let open = open_all(&snap);
    let [v4, v6] = plan(&snap, &open, &settings());
    let port = |proto, p| Tuple::new(&[Value::Proto(proto), Value::Port(p)]);
    // Every open listener's port, the one without endpoints too, in its own family's table.
    let ports: Vec<Tuple> = elements(&v4, RELAY_PORTS).into_keys().collect();
    assert_eq!(
        ports,
        [port(Protocol::Tcp, 30101), port(Protocol::Udp, 30100)]
    );
    let ports: Vec<Tuple> = elements(&v6, RELAY_PORTS).into_keys().collect();
    assert_eq!(ports, [port(Protocol::Tcp, 30102)]);

    let local: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    let external = 30101;
    for (what, packet) in [
        (
            "from outside",
            arriving("eth0", "192.168.200.7", "10.0.0.11", external),
        ),
        (
            "from outside, source ranges aside",
            arriving("eth0", "192.168.201.7", "10.0.0.11", external),
        ),
        (
            "from a pod",
            arriving("cni0", "10.244.1.7", "10.0.0.11", 30101),
        ),
        (
            "from the node",
            arriving("lo", "10.0.0.11", "10.0.0.11", 30101),
        ),
        (
            "from the node to loopback",
            arriving("lo", "127.0.0.1", "127.0.0.1", 30101),
        ),
    ] {
        let t = trace(&v4, &packet, &local);
        assert_eq!(t.fate(), Some(Fate::Reject), "{what}: {t:?}");
    }
    let mut udp = arriving("eth0", "192.168.200.7", "10.0.0.11", 30100);
    udp.protocol = Protocol::Udp;
    assert_eq!(trace(&v4, &udp, &local).fate(), Some(Fate::Reject));
    // A port no listener holds is none of ours.
    let other = trace(
        &v4,
        &arriving("eth0", "192.168.200.7", "10.0.0.11", 22),
        &local,
    );
    assert_eq!(other.fate(), Some(Fate::Accept));
    // Through the frontends, the same listeners serve.
    for packet in [
        arriving("eth0", "192.168.200.7", "198.51.100.9", 80),
        arriving("cni0", "10.244.1.7", "10.96.0.10", 80),
    ] {
        let t = trace(&v4, &packet, &local);
        assert_eq!(t.fate(), Some(Fate::Accept), "{t:?}");
        assert_eq!(t.endpoints().len(), 1, "{t:?}");
    }
}

#[test]
fn with_a_specific_bind_address_only_that_address_is_guarded() {
    use crate::nft::trace::{Fate, trace};
    let snap = snapshot(
        node(),
        vec![svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")],
    );
    let settings = Settings {
        bind: ip("10.0.0.11"),
        ..settings()
    };
    let [v4, _] = plan(&snap, &open_all(&snap), &settings);
    let local: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    let direct = trace(
        &v4,
        &arriving("eth0", "192.168.200.7", "10.0.0.11", 30100),
        &local,
    );
    assert_eq!(direct.fate(), Some(Fate::Reject), "{direct:?}");
    // Another program's socket on the same port elsewhere (a loopback NodePort) is left be.
    let other = trace(
        &v4,
        &arriving("lo", "127.0.0.1", "127.0.0.1", 30100),
        &local,
    );
    assert_eq!(other.fate(), Some(Fate::Accept), "{other:?}");
}

#[test]
fn a_cluster_ip_at_a_port_its_service_does_not_define_is_refused() {
    use crate::nft::trace::{Fate, Origin, trace};
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b"),
            svc("default/sig", "10.96.0.11", 3868)
                .proto(Protocol::Sctp)
                .ep("10.244.2.6", 3868, "node-b"),
        ],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    let cluster_ips: Vec<Tuple> = elements(&v4, n::CLUSTER_IPS).into_keys().collect();
    let addr = |a| Tuple::new(&[Value::Addr(ip(a))]);
    assert_eq!(cluster_ips, [addr("10.96.0.10"), addr("10.96.0.11")]);
    let local: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    for origin in [Origin::Interface("cni0".into()), Origin::Host] {
        for protocol in [Protocol::Tcp, Protocol::Udp] {
            let packet = crate::nft::trace::Packet {
                protocol,
                origin: origin.clone(),
                ..arriving("cni0", "10.244.1.7", "10.96.0.10", 81)
            };
            let t = trace(&v4, &packet, &local);
            assert_eq!(t.fate(), Some(Fate::Reject), "{packet:?}: {t:?}");
        }
    }
    // The defined port is served; an address that is no ClusterIP is routed on.
    let served = trace(
        &v4,
        &arriving("cni0", "10.244.1.7", "10.96.0.10", 80),
        &local,
    );
    assert_eq!(served.fate(), Some(Fate::Accept), "{served:?}");
    let other = trace(
        &v4,
        &arriving("cni0", "10.244.1.7", "10.96.0.99", 81),
        &local,
    );
    assert_eq!(
        (other.fate(), other.endpoints().len()),
        (Some(Fate::Accept), 0)
    );
}

#[test]
fn the_nodes_own_traffic_to_a_node_port_without_endpoints_is_refused_where_it_arrives() {
    use crate::nft::ruleset::Hook;
    use crate::nft::trace::{Fate, Flight, Origin, Packet, through_hook, trace};
    let snap = snapshot(
        node(),
        vec![
            svc("default/dns", "10.96.0.20", 53)
                .proto(Protocol::Udp)
                .node_port(30053),
        ],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    let local: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    let to_node_port = Packet {
        protocol: Protocol::Udp,
        src: ip("10.0.0.11"),
        dst: ip("10.0.0.11"),
        dport: 30053,
        origin: Origin::Host,
    };
    assert_eq!(trace(&v4, &to_node_port, &local).fate(), Some(Fate::Reject));
    // Not in the output hook, where the send itself would fail (EPERM): in the input hook.
    let output = through_hook(
        &v4,
        &to_node_port,
        &local,
        Hook::Output,
        Flight::start(&to_node_port),
    );
    assert!(
        output.iter().all(|(_, fate)| *fate == Fate::Accept),
        "{output:?}"
    );
    let input = through_hook(
        &v4,
        &to_node_port,
        &local,
        Hook::Input,
        Flight::start(&to_node_port),
    );
    assert!(
        input.iter().all(|(_, fate)| *fate == Fate::Reject),
        "{input:?}"
    );
    // The ClusterIP, not a node address, is still refused on its way out.
    let to_cluster_ip = Packet {
        dst: ip("10.96.0.20"),
        dport: 53,
        ..to_node_port.clone()
    };
    let output = through_hook(
        &v4,
        &to_cluster_ip,
        &local,
        Hook::Output,
        Flight::start(&to_cluster_ip),
    );
    assert!(
        output.iter().all(|(_, fate)| *fate == Fate::Reject),
        "{output:?}"
    );
}

#[test]
fn load_balancer_source_ranges_drop_other_sources_before_the_redirect() {
    use crate::nft::trace::{Fate, Origin, Packet, trace};
    let snap = snapshot(
        node(),
        vec![
            svc("default/web", "10.96.0.10", 80)
                .lb("198.51.100.9")
                .range("192.168.200.0/24")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
    );
    let [v4, _] = plan(&snap, &open_all(&snap), &settings());
    let local: Vec<IpAddr> = snap.node.local_addresses().into_iter().collect();
    let from = |src: &str| Packet {
        protocol: Protocol::Tcp,
        src: ip(src),
        dst: ip("198.51.100.9"),
        dport: 80,
        origin: Origin::Interface("eth0".into()),
    };
    let allowed = trace(&v4, &from("192.168.200.100"), &local);
    assert_eq!(allowed.fate(), Some(Fate::Accept), "{allowed:?}");
    assert_eq!(allowed.endpoints().len(), 1, "sent to the listener");
    let other = trace(&v4, &from("192.168.201.100"), &local);
    assert_eq!(other.fate(), Some(Fate::Drop), "{other:?}");
    // The ClusterIP has no ranges.
    let cluster = Packet {
        dst: ip("10.96.0.10"),
        ..from("192.168.201.100")
    };
    assert_eq!(trace(&v4, &cluster, &local).fate(), Some(Fate::Accept));
}
