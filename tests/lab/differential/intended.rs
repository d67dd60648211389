//! The differences between ours and upstream that are intended: one named list, each entry
//! with its reason (the behaviour is documented in docs/operations.md, "Where kube-proxy-rs
//! behaves differently from upstream") and an exact test of which differences it covers: the
//! outcomes must differ in that way and no other. A difference no entry covers fails the
//! differential test.

use super::frontends::{Key, Source, Via};
use super::model::{ProxyLabel, Svc};
use super::outcome::{Obs, Outcome, Seen};
use crate::lab::Mode;
use crate::lab::Proto;
use crate::lab::cluster::Family;
use crate::lab::topology::{node_ip, node_ip6};
use std::net::IpAddr;

/// One intended difference.
pub struct Intended {
    pub name: &'static str,
    /// The modes of ours it applies to.
    pub modes: &'static [Mode],
    pub reason: &'static str,
    /// Whether upstream's outcome `up` and ours `ours` at frontend `key` of `svc` (none for
    /// an unallocated service address) differ exactly in this way.
    pub covers: fn(svc: Option<&Svc>, key: &Key, up: &Outcome, ours: &Outcome) -> bool,
}

/// Every intended difference.
pub const INTENDED: &[Intended] = &[
    Intended {
        name: "userspace relays from the node",
        modes: &[Mode::Userspace],
        reason: "the userspace proxy relays each connection itself, so an endpoint sees the \
                 relaying node's address, never the client's, whatever the traffic policy; which \
                 endpoints serve is the same",
        covers: |_, key, up, ours| all_seen_are_nodes(key.source, ours) && same_but_seen(up, ours),
    },
    Intended {
        name: "NodePorts on every node address",
        modes: &[Mode::Userspace, Mode::Ebpf],
        reason: "nodePortAddresses defaults to all of the node's addresses in these modes, as in \
                 upstream's iptables and ipvs modes; upstream's nftables mode, the reference \
                 here, defaults to the node's primary addresses, so it refuses a NodePort on the \
                 pod gateway (an address of the node that is not its InternalIP)",
        covers: |_, key, up, ours| {
            matches!(key.via, Via::NodePortGateway { .. })
                && *up == Outcome([Obs::Refused].into())
                && !ours.0.is_empty()
                && ours.0.iter().all(|o| matches!(o, Obs::Served { .. }))
        },
    },
    Intended {
        name: "eBPF balances the node's and pods' sockets without NAT",
        modes: &[Mode::Ebpf],
        reason: "the socket programs write the endpoint into a connecting socket of the node or \
                 a pod, so its packets carry the client's own address: nothing is masqueraded \
                 (where upstream masquerades a pod reaching itself, or a NodePort, externalIP \
                 or LoadBalancer IP under the Cluster policy); which endpoints serve is the same",
        covers: |_, key, up, ours| {
            inside(key.source) && all_seen_are_clients(ours) && same_but_seen(up, ours)
        },
    },
    Intended {
        name: "eBPF refuses the node's UDP to a Service without endpoints at once",
        modes: &[Mode::Ebpf],
        reason: "a Service port without endpoints fails connect() and sendmsg() with \
                 ECONNREFUSED (a cgroup socket program cannot send an ICMP error); upstream's \
                 reject drops the node's own datagram in the output path, which fails the send \
                 with EPERM",
        covers: |_, key, up, ours| {
            matches!(key.source, Source::Node(_))
                && key.proto == Proto::Udp
                && *ours == Outcome([Obs::Refused].into())
                && is_eperm(up)
        },
    },
    Intended {
        name: "eBPF fails the node's UDP that upstream drops with ETIMEDOUT",
        modes: &[Mode::Ebpf],
        reason: "where a Service port has endpoints but none this traffic may use (internal \
                 traffic policy Local without a local endpoint, say), the socket programs fail \
                 the node's sendmsg() with ETIMEDOUT, as its connect() of TCP; upstream's drop \
                 in the output path fails the node's own datagram with EPERM. The datagram \
                 goes nowhere either way",
        covers: |_, key, up, ours| {
            matches!(key.source, Source::Node(_))
                && key.proto == Proto::Udp
                && *ours == Outcome([Obs::Dropped].into())
                && is_eperm(up)
        },
    },
    Intended {
        name: "eBPF refuses a restricted LoadBalancer IP without endpoints before its ranges",
        modes: &[Mode::Ebpf],
        reason: "a node's or pod's socket connecting to a LoadBalancer IP with \
                 loadBalancerSourceRanges is checked against the ranges when its packets \
                 leave (the source address is chosen after connect()); a Service port without \
                 endpoints is refused at connect(), before that. Upstream checks the ranges \
                 first and drops a client outside them",
        covers: |svc, key, up, ours| {
            inside(key.source)
                && matches!(key.via, Via::LoadBalancer(_))
                && svc.is_some_and(|s| !s.source_ranges.is_empty())
                && !source_in_ranges(svc, key)
                && *ours == Outcome([Obs::Refused].into())
                && (*up == Outcome([Obs::Dropped].into()) || is_eperm(up))
        },
    },
    Intended {
        name: "unallocated ClusterIPs are routed, as in upstream's iptables and ipvs modes",
        modes: &[Mode::Userspace, Mode::Ebpf],
        reason: "these modes, like upstream's iptables and ipvs modes, claim only the \
                 ClusterIPs of the Services they serve: an address of a service CIDR that no \
                 such Service has (unallocated, or a Service labelled for another proxy) is \
                 routed as any other, which in the lab answers host unreachable; upstream's \
                 nftables mode, the reference here, watches the ServiceCIDRs and drops it",
        covers: |svc, key, up, ours| {
            matches!(
                key.via,
                Via::Unallocated | Via::ClusterIp | Via::UndefinedPort
            ) && svc.is_none_or(|s| s.label == Some(ProxyLabel::OtherProxyName))
                && (*up == Outcome([Obs::Dropped].into()) || is_eperm(up))
                && !ours.0.is_empty()
                && ours
                    .0
                    .iter()
                    .all(|o| matches!(o, Obs::Unreachable | Obs::Dropped))
        },
    },
    Intended {
        name: "source ranges of one family close the other family's LoadBalancer IPs",
        modes: &[
            Mode::Nftables,
            Mode::Iptables,
            Mode::Ipvs,
            Mode::Userspace,
            Mode::Ebpf,
        ],
        reason: "a Service whose loadBalancerSourceRanges name no range of a family gets no \
                 LoadBalancer IP of that family (fail closed: the owner asked for a \
                 restriction); upstream filters the ranges by family and, finding none, opens \
                 that family's LoadBalancer IPs to every client",
        covers: |svc, key, _, ours| {
            matches!(key.via, Via::LoadBalancer(_))
                && svc.is_some_and(|s| ranges_leave_out(s, key.family))
                && !ours.0.is_empty()
                && ours
                    .0
                    .iter()
                    .all(|o| matches!(o, Obs::Unreachable | Obs::Dropped))
        },
    },
];

/// Whether `o` is the one failure EPERM (a send that the node's output path dropped).
fn is_eperm(o: &Outcome) -> bool {
    o.0.len() == 1
        && o.0
            .iter()
            .all(|o| matches!(o, Obs::Other(e) if e.contains("os error 1)")))
}

/// Whether the address a pod or node source connects from (its pod address, or its node's
/// underlay address) is in one of `svc`'s source ranges.
fn source_in_ranges(svc: Option<&Svc>, key: &Key) -> bool {
    let from: IpAddr = match (key.source, key.family) {
        (Source::Pod { node }, family) => super::objects::pod_ip(&Source::pod_name(node), family),
        (Source::Node(i), Family::V4) => node_ip(i).into(),
        (Source::Node(i), Family::V6) => node_ip6(i).into(),
        _ => return false,
    };
    svc.is_some_and(|s| {
        s.source_ranges.iter().any(|r| {
            r.trim()
                .parse::<ipnet::IpNet>()
                .is_ok_and(|n| n.contains(&from))
        })
    })
}

/// Whether `svc` has source ranges and none of them (a CIDR) is of `family`.
fn ranges_leave_out(svc: &Svc, family: Family) -> bool {
    !svc.source_ranges.is_empty()
        && !svc.source_ranges.iter().any(|r| {
            r.trim()
                .parse::<ipnet::IpNet>()
                .is_ok_and(|n| n.addr().is_ipv6() == (family == Family::V6))
        })
}

/// The intended difference that covers this one, if any.
pub fn find(
    mode: Mode,
    svc: Option<&Svc>,
    key: &Key,
    up: &Outcome,
    ours: &Outcome,
) -> Option<&'static Intended> {
    INTENDED
        .iter()
        .find(|i| i.modes.contains(&mode) && (i.covers)(svc, key, up, ours))
}

/// `o` with whose address each endpoint saw left out.
fn without_seen(o: &Outcome) -> Outcome {
    Outcome(
        o.0.iter()
            .map(|obs| match obs {
                Obs::Served { pod, port, .. } => Obs::Served {
                    pod: pod.clone(),
                    port: *port,
                    seen: Seen::Other(std::net::Ipv4Addr::UNSPECIFIED.into()),
                },
                other => other.clone(),
            })
            .collect(),
    )
}

/// Whether `a` and `b` differ at most in whose address the endpoints saw.
fn same_but_seen(a: &Outcome, b: &Outcome) -> bool {
    without_seen(a) == without_seen(b)
}

/// Whether every served attempt of `o`, probed from `source`, reached its endpoint from a
/// node's address (for a source that is a node, its own counts).
fn all_seen_are_nodes(source: Source, o: &Outcome) -> bool {
    o.0.iter().all(|obs| match obs {
        Obs::Served { seen, .. } => {
            matches!(seen, Seen::Node(_))
                || (*seen == Seen::Client && matches!(source, Source::Node(_)))
        }
        _ => true,
    })
}

/// Whether every served attempt of `o` reached its endpoint from the client's own address.
fn all_seen_are_clients(o: &Outcome) -> bool {
    o.0.iter().all(|obs| match obs {
        Obs::Served { seen, .. } => *seen == Seen::Client,
        _ => true,
    })
}

/// Whether `source` is inside the cluster (a pod or a node).
fn inside(source: Source) -> bool {
    matches!(source, Source::Pod { .. } | Source::Node(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::differential::frontends::Via;
    use crate::differential::generate::generate;
    use crate::lab::Proto;
    use crate::lab::cluster::Family;

    fn served(pod: &str, seen: Seen) -> Obs {
        Obs::Served {
            pod: pod.into(),
            port: 8080,
            seen,
        }
    }

    fn key() -> Key {
        Key {
            service: "s0".into(),
            port: "t0/TCP".into(),
            proto: Proto::Tcp,
            family: Family::V4,
            via: Via::ClusterIp,
            source: Source::Pod { node: 0 },
        }
    }

    #[test]
    fn every_entry_names_its_modes_and_reason_once() {
        let mut names: Vec<&str> = INTENDED.iter().map(|i| i.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), INTENDED.len(), "names are unique");
        for i in INTENDED {
            assert!(!i.modes.is_empty() && i.reason.len() > 40, "{}", i.name);
        }
    }

    #[test]
    fn the_relay_covers_only_a_changed_source_address() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let up = Outcome([served("n2-a", Seen::Client), served("n3-a", Seen::Client)].into());
        let relayed =
            Outcome([served("n2-a", Seen::Node(0)), served("n3-a", Seen::Node(0))].into());
        let k = key();
        assert!(find(Mode::Userspace, svc, &k, &up, &relayed).is_some());
        // Not in another mode.
        assert!(find(Mode::Nftables, svc, &k, &up, &relayed).is_none());
        // Not when an endpoint is missing.
        let fewer = Outcome([served("n2-a", Seen::Node(0))].into());
        assert!(find(Mode::Userspace, svc, &k, &up, &fewer).is_none());
        // Not when a pod's own address reached the endpoint.
        let kept = Outcome([served("n2-a", Seen::Client), served("n3-a", Seen::Client)].into());
        let relayed_one =
            Outcome([served("n2-a", Seen::Node(0)), served("n3-a", Seen::Node(1))].into());
        assert!(find(Mode::Userspace, svc, &k, &relayed_one, &kept).is_none());
        // Not when a failure differs.
        let refused = Outcome([Obs::Refused].into());
        let dropped = Outcome([Obs::Dropped].into());
        assert!(find(Mode::Userspace, svc, &k, &refused, &dropped).is_none());
    }

    #[test]
    fn ebpf_without_nat_covers_only_inside_sources_that_kept_their_address() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let up = Outcome([served("n1-b", Seen::Node(0)), served("n2-a", Seen::Client)].into());
        let ours = Outcome([served("n1-b", Seen::Client), served("n2-a", Seen::Client)].into());
        let k = key();
        let name = |m| find(m, svc, &k, &up, &ours).map(|i| i.name);
        assert_eq!(
            name(Mode::Ebpf),
            Some("eBPF balances the node's and pods' sockets without NAT")
        );
        assert_eq!(name(Mode::Nftables), None);
        // Not from outside, where the tc programs rewrite the source as a masquerade would.
        let outside = Key {
            source: Source::Client,
            ..key()
        };
        assert!(find(Mode::Ebpf, svc, &outside, &up, &ours).is_none());
        // Not when ours masqueraded where upstream did not.
        assert!(find(Mode::Ebpf, svc, &k, &ours, &up).is_none());
    }

    #[test]
    fn node_ports_on_every_address_cover_only_the_pod_gateway_refused_upstream() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let gateway = Key {
            via: Via::NodePortGateway { node: 0 },
            ..key()
        };
        let refused = Outcome([Obs::Refused].into());
        let ours = Outcome([served("n2-a", Seen::Client)].into());
        assert!(find(Mode::Ebpf, svc, &gateway, &refused, &ours).is_some());
        assert!(find(Mode::Userspace, svc, &gateway, &refused, &ours).is_some());
        assert!(find(Mode::Nftables, svc, &gateway, &refused, &ours).is_none());
        let on_node = Key {
            via: Via::NodePort { node: 0 },
            ..key()
        };
        assert!(find(Mode::Ebpf, svc, &on_node, &refused, &ours).is_none());
        let dropped = Outcome([Obs::Dropped].into());
        assert!(find(Mode::Ebpf, svc, &gateway, &dropped, &ours).is_none());
    }

    #[test]
    fn ebpf_udp_refusal_covers_only_the_nodes_own_eperm() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let node_udp = Key {
            source: Source::Node(2),
            proto: Proto::Udp,
            port: "u0/UDP".into(),
            ..key()
        };
        let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
        let refused = Outcome([Obs::Refused].into());
        assert!(find(Mode::Ebpf, svc, &node_udp, &eperm, &refused).is_some());
        let pod_udp = Key {
            source: Source::Pod { node: 0 },
            ..node_udp.clone()
        };
        assert!(find(Mode::Ebpf, svc, &pod_udp, &eperm, &refused).is_none());
        let dropped = Outcome([Obs::Dropped].into());
        assert_ne!(
            find(Mode::Ebpf, svc, &node_udp, &eperm, &dropped).map(|i| i.name),
            Some("eBPF refuses the node's UDP to a Service without endpoints at once")
        );
    }

    #[test]
    fn closed_source_ranges_cover_only_a_load_balancer_ip_of_a_family_without_ranges() {
        let mut world = generate(1);
        let svc = &mut world.services[0];
        svc.source_ranges = vec!["fd00:200::/64".into()];
        let lb = Key {
            via: Via::LoadBalancer("198.51.100.15".parse().unwrap()),
            source: Source::Client,
            ..key()
        };
        let up = Outcome([served("n1-a", Seen::Node(0))].into());
        let unreachable = Outcome([Obs::Unreachable].into());
        let name = "source ranges of one family close the other family's LoadBalancer IPs";
        let found = |svc: &Svc, k: &Key, ours: &Outcome| {
            find(Mode::Nftables, Some(svc), k, &up, ours).map(|i| i.name)
        };
        assert_eq!(found(svc, &lb, &unreachable), Some(name));
        // Not where ours served, nor on another frontend.
        assert_eq!(found(svc, &lb, &up), None);
        let cluster_ip = Key {
            via: Via::ClusterIp,
            ..lb.clone()
        };
        assert_eq!(found(svc, &cluster_ip, &unreachable), None);
        // Not when a range of the family is there, nor without ranges.
        svc.source_ranges.push("192.168.200.100/32".into());
        assert_eq!(found(svc, &lb, &unreachable), None);
        svc.source_ranges.clear();
        assert_eq!(found(svc, &lb, &unreachable), None);
        // The IPv6 LoadBalancer IP of a Service with only IPv4 ranges.
        svc.source_ranges = vec!["10.244.0.0/16".into()];
        let lb6 = Key {
            via: Via::LoadBalancer("fd00:198::10".parse().unwrap()),
            family: Family::V6,
            ..lb.clone()
        };
        assert_eq!(found(svc, &lb6, &unreachable), Some(name));
    }

    #[test]
    fn ebpf_udp_timeout_covers_only_the_nodes_own_eperm() {
        let world = generate(1);
        let svc = Some(&world.services[0]);
        let node_udp = Key {
            source: Source::Node(2),
            proto: Proto::Udp,
            port: "u0/UDP".into(),
            ..key()
        };
        let eperm = Outcome([Obs::Other("Operation not permitted (os error 1)".into())].into());
        let dropped = Outcome([Obs::Dropped].into());
        let name =
            |m, k: &Key, up: &Outcome, ours: &Outcome| find(m, svc, k, up, ours).map(|i| i.name);
        assert_eq!(
            name(Mode::Ebpf, &node_udp, &eperm, &dropped),
            Some("eBPF fails the node's UDP that upstream drops with ETIMEDOUT")
        );
        assert_eq!(name(Mode::Nftables, &node_udp, &eperm, &dropped), None);
        let pod_udp = Key {
            source: Source::Pod { node: 0 },
            ..node_udp.clone()
        };
        assert_eq!(name(Mode::Ebpf, &pod_udp, &eperm, &dropped), None);
        let node_tcp = Key {
            proto: Proto::Tcp,
            ..node_udp.clone()
        };
        assert_eq!(name(Mode::Ebpf, &node_tcp, &eperm, &dropped), None);
        let served = Outcome([served("n3-a", Seen::Client)].into());
        assert_eq!(name(Mode::Ebpf, &node_udp, &served, &dropped), None);
    }

    #[test]
    fn ebpf_early_refusal_covers_only_inside_sources_outside_the_ranges() {
        let mut world = generate(1);
        let svc = &mut world.services[0];
        svc.source_ranges = vec!["10.244.2.0/24".into()];
        let lb = Key {
            via: Via::LoadBalancer("198.51.100.16".parse().unwrap()),
            source: Source::Node(2),
            ..key()
        };
        let dropped = Outcome([Obs::Dropped].into());
        let refused = Outcome([Obs::Refused].into());
        let name = "eBPF refuses a restricted LoadBalancer IP without endpoints before its ranges";
        let found = |svc: &Svc, k: &Key, up: &Outcome, ours: &Outcome| {
            find(Mode::Ebpf, Some(svc), k, up, ours).map(|i| i.name)
        };
        assert_eq!(found(svc, &lb, &dropped, &refused), Some(name));
        let pod_outside = Key {
            source: Source::Pod { node: 0 },
            ..lb.clone()
        };
        assert_eq!(found(svc, &pod_outside, &dropped, &refused), Some(name));
        // Not for a pod inside the ranges, nor from outside the node, nor without ranges.
        let pod_inside = Key {
            source: Source::Pod { node: 1 },
            ..lb.clone()
        };
        assert_eq!(found(svc, &pod_inside, &dropped, &refused), None);
        let outside = Key {
            source: Source::Client,
            ..lb.clone()
        };
        assert_eq!(found(svc, &outside, &dropped, &refused), None);
        // Not where upstream served, nor on another frontend.
        let served = Outcome([served("n3-a", Seen::Client)].into());
        assert_eq!(found(svc, &lb, &served, &refused), None);
        let cluster_ip = Key {
            via: Via::ClusterIp,
            ..lb.clone()
        };
        assert_eq!(found(svc, &cluster_ip, &dropped, &refused), None);
        assert_eq!(
            find(Mode::Nftables, Some(svc), &lb, &dropped, &refused).map(|i| i.name),
            None
        );
        svc.source_ranges.clear();
        assert_eq!(found(svc, &lb, &dropped, &refused), None);
    }

    #[test]
    fn routed_unallocated_addresses_cover_only_addresses_no_served_service_has() {
        let mut world = generate(1);
        let dropped = Outcome([Obs::Dropped].into());
        let unreachable = Outcome([Obs::Unreachable].into());
        let name = "unallocated ClusterIPs are routed, as in upstream's iptables and ipvs modes";
        let unallocated = Key {
            service: super::super::frontends::NO_SERVICE.into(),
            via: Via::Unallocated,
            ..key()
        };
        let found = |m, svc: Option<&Svc>, k: &Key, up: &Outcome, ours: &Outcome| {
            find(m, svc, k, up, ours).map(|i| i.name)
        };
        assert_eq!(
            found(Mode::Ebpf, None, &unallocated, &dropped, &unreachable),
            Some(name)
        );
        assert_eq!(
            found(Mode::Userspace, None, &unallocated, &dropped, &unreachable),
            Some(name)
        );
        // Not in nftables mode, where upstream's drop is the reference for ours.
        assert_eq!(
            found(Mode::Nftables, None, &unallocated, &dropped, &unreachable),
            None
        );
        // Not where ours served or refused.
        let refused = Outcome([Obs::Refused].into());
        assert_eq!(
            found(Mode::Ebpf, None, &unallocated, &dropped, &refused),
            None
        );
        // The ClusterIP of a Service for another proxy, not of one ours serves.
        let svc = &mut world.services[0];
        svc.label = None;
        let k = key();
        assert_eq!(
            found(Mode::Ebpf, Some(svc), &k, &dropped, &unreachable),
            None
        );
        svc.label = Some(ProxyLabel::OtherProxyName);
        assert_eq!(
            found(Mode::Ebpf, Some(svc), &k, &dropped, &unreachable),
            Some(name)
        );
        // Not its NodePort.
        let node_port = Key {
            via: Via::NodePort { node: 0 },
            ..k.clone()
        };
        assert_eq!(
            found(Mode::Ebpf, Some(svc), &node_port, &dropped, &unreachable),
            None
        );
    }
}
