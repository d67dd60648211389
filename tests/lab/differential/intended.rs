//! The differences between ours and upstream that are intended: one named list, each entry
//! with its reason (the behaviour is documented in docs/operations.md, "Where kube-proxy-rs
//! behaves differently from upstream") and an exact test of which differences it covers: the
//! outcomes must differ in that way and no other. A difference no entry covers fails the
//! differential test.

use super::frontends::{Key, Source, Via};
use super::model::{ProxyLabel, Svc, node_of_pod};
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
        name: "another node's pod at a Local NodePort gets no answer that upstream loses",
        modes: &[Mode::Userspace, Mode::Ebpf],
        reason: "upstream counts every address of the cluster CIDR as local traffic, so a pod \
                 of another node reaching this node's NodePort under externalTrafficPolicy \
                 Local is sent to any endpoint of the cluster, unmasqueraded: an endpoint on a \
                 third node answers the pod directly and the pod drops the answer (under \
                 ClientIP affinity every time, when that is the endpoint upstream sticks to). \
                 The eBPF mode serves such a pod from this node's endpoints, as any client from \
                 outside the node; the userspace relay connects to the endpoint itself, so \
                 every answer comes back through it. Every endpoint upstream served, ours \
                 serves too",
        covers: |svc, key, up, ours| {
            let Source::Pod { node: from } = key.source else {
                return false;
            };
            let Via::NodePort { node: to } = key.via else {
                return false;
            };
            let ours_pods: Vec<(&str, u16)> = ours
                .0
                .iter()
                .filter_map(|o| match o {
                    Obs::Served { pod, port, .. } => Some((pod.as_str(), *port)),
                    _ => None,
                })
                .collect();
            to != from
                && svc.is_some_and(Svc::etp_applies)
                && !ours.0.is_empty()
                && ours_pods.len() == ours.0.len()
                && up.0.contains(&Obs::Dropped)
                && up.0.iter().all(|o| match o {
                    Obs::Dropped => true,
                    Obs::Served { pod, port, .. } => {
                        ours_pods.contains(&(pod.as_str(), *port))
                            && (pod == "(sticky)" || node_of_pod(pod) == to)
                    }
                    _ => false,
                })
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
        name: "IPVS: internalTrafficPolicy Local without a local endpoint drops",
        modes: &[Mode::Ipvs],
        reason: "a ClusterIP whose internal policy is Local and that has no endpoint on this \
                 node is dropped, as the iptables and nftables modes drop it (the node's own \
                 UDP send then fails with EPERM); upstream's IPVS mode falls back to the \
                 cluster's endpoints there when the Service is externally accessible (it keeps \
                 them for the external frontends; a pod that is one of those endpoints without \
                 being a local one, having no nodeName, gets no answer from itself, as upstream \
                 masquerades only a local endpoint's hairpin), and otherwise has a virtual \
                 service without destinations, which IPVS refuses (docs/operations.md, \"IPVS \
                 mode behaves like the iptables and nftables modes\")",
        covers: |svc, key, up, ours| {
            let Some(svc) = svc.filter(|s| s.itp_local) else {
                return false;
            };
            let upstream_as_ipvs_does = if svc.externally_accessible() {
                up.0.iter().any(|o| matches!(o, Obs::Served { .. }))
                    && up.0.iter().all(|o| {
                        matches!(o, Obs::Served { .. })
                            || (*o == Obs::Dropped && source_is_endpoint(svc, key))
                    })
            } else {
                *up == Outcome([Obs::Refused].into())
            };
            key.via == Via::ClusterIp
                && (*ours == Outcome([Obs::Dropped].into()) || node_udp_eperm(key, ours))
                && upstream_as_ipvs_does
        },
    },
    Intended {
        name: "IPVS: externalTrafficPolicy Local without a local endpoint drops outside traffic",
        modes: &[Mode::Ipvs],
        reason: "an external frontend whose external policy is Local and that has no endpoint \
                 on this node drops traffic from outside the node, as the iptables and \
                 nftables modes do; upstream's IPVS mode sends it to the cluster's endpoints \
                 unmasqueraded, whose replies carry a pod's address (kubernetes#97081)",
        covers: |svc, key, up, ours| {
            matches!(
                key.via,
                Via::NodePort { .. }
                    | Via::NodePortGateway { .. }
                    | Via::ExternalIp(_)
                    | Via::LoadBalancer(_)
            ) && matches!(key.source, Source::Client | Source::OtherClient)
                && svc.is_some_and(|s| s.etp_local)
                && *ours == Outcome([Obs::Dropped].into())
                && !up.0.is_empty()
                && *up != *ours
        },
    },
    Intended {
        name: "IPVS: the node and its pods reach a Local external frontend without a local \
               endpoint",
        modes: &[Mode::Ipvs],
        reason: "what the node or one of its pods sends to an externalIP or LoadBalancer IP of \
                 a Service with externalTrafficPolicy Local goes to the Service's cluster-wide \
                 endpoints, as upstream's iptables and nftables modes send it (their \
                 short-circuit for traffic from inside the node); upstream's IPVS mode gives \
                 the external frontend's virtual service only this node's endpoints, so with \
                 none here IPVS has no destination and the connection fails \
                 (docs/operations.md, \"IPVS mode behaves like the iptables and nftables \
                 modes\")",
        covers: |svc, key, up, ours| {
            matches!(key.via, Via::ExternalIp(_) | Via::LoadBalancer(_))
                && inside(key.source)
                && svc.is_some_and(Svc::etp_applies)
                && !up.0.is_empty()
                && up
                    .0
                    .iter()
                    .all(|o| matches!(o, Obs::Refused | Obs::Dropped))
                && !ours.0.is_empty()
                && ours.0.iter().all(|o| matches!(o, Obs::Served { .. }))
        },
    },
    Intended {
        name: "IPVS: the node's own connections to a Local externalIP or LoadBalancer IP are \
               masqueraded",
        modes: &[Mode::Ipvs],
        reason: "what the node itself sends to an external frontend of a Service with \
                 externalTrafficPolicy Local is masqueraded, as upstream's iptables and \
                 nftables modes do, so the endpoint sees one of the node's addresses; \
                 upstream's IPVS mode leaves it as it is, and because it holds every Service \
                 address on kube-ipvs0, the node's connection to one leaves from that Service \
                 address, which the endpoint then takes for its client (docs/operations.md, \
                 \"IPVS mode behaves like the iptables and nftables modes\"); which endpoints \
                 serve is the same",
        covers: |svc, key, up, ours| {
            let (Via::ExternalIp(ip) | Via::LoadBalancer(ip)) = key.via else {
                return false;
            };
            let from_frontend =
                |o: &Obs| matches!(o, Obs::Served { seen, .. } if *seen == Seen::Other(ip));
            matches!(key.source, Source::Node(_))
                && svc.is_some_and(Svc::etp_applies)
                && same_but_seen(up, ours)
                && all_seen_are_clients(ours)
                && up.0.iter().any(from_frontend)
                && up.0.iter().all(|o| {
                    from_frontend(o)
                        || matches!(
                            o,
                            Obs::Served {
                                seen: Seen::Client,
                                ..
                            }
                        )
                })
        },
    },
    Intended {
        name: "IPVS: the node's own connection to a LoadBalancer IP outside its source ranges \
               drops",
        modes: &[Mode::Ipvs],
        reason: "the node's own connection to a LoadBalancer IP whose loadBalancerSourceRanges \
                 leave the node out is dropped whether the Service has endpoints or not, as \
                 upstream's iptables and nftables modes drop it (the node's own UDP send then \
                 fails with EPERM); upstream's IPVS mode drops it in its output filter only \
                 once IPVS has chosen an endpoint, so where there is none IPVS refuses the \
                 connection first (docs/operations.md, \"IPVS mode behaves like the iptables \
                 and nftables modes\")",
        covers: |svc, key, up, ours| {
            matches!(key.via, Via::LoadBalancer(_))
                && matches!(key.source, Source::Node(_))
                && svc.is_some_and(|s| {
                    !s.source_ranges.is_empty() && !ranges_leave_out(s, key.family)
                })
                && !source_in_ranges(svc, key)
                && *up == Outcome([Obs::Refused].into())
                && (*ours == Outcome([Obs::Dropped].into()) || node_udp_eperm(key, ours))
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

/// Whether `ours` is the node's own UDP send failing with EPERM: how a drop in the node's output
/// path shows to the node's own UDP client.
fn node_udp_eperm(key: &Key, ours: &Outcome) -> bool {
    matches!(key.source, Source::Node(_)) && key.proto == Proto::Udp && is_eperm(ours)
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

/// Whether the source of `key` is a pod that is one of `svc`'s endpoints of `key`'s family.
fn source_is_endpoint(svc: &Svc, key: &Key) -> bool {
    let Source::Pod { node } = key.source else {
        return false;
    };
    let pod = Source::pod_name(node);
    svc.slices
        .iter()
        .filter(|s| s.family == key.family)
        .any(|s| s.endpoints.iter().any(|e| e.pod == pod))
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
#[path = "intended_tests.rs"]
mod tests;
