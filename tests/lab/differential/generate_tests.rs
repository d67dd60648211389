//! The generator's promises: the same seed gives the same world, worlds differ between seeds,
//! every field it claims to cover shows up within the seeds a full run uses, and every world
//! is one the API server takes and the proxies can be compared on.

use std::collections::BTreeSet;

use super::frontends;
use super::generate::{Rng, generate};
use super::model::{EpNode, Families, Ingress, IpMode, Kind, ProxyLabel, Target, World};
use crate::lab::Proto;
use crate::lab::cluster::Family;

#[test]
fn a_seed_always_gives_the_same_world() {
    assert_eq!(generate(7), generate(7));
    assert_ne!(generate(7), generate(8));
    // The generator's sequence is fixed forever: a seed names the same world in every report.
    let mut rng = Rng::new(1);
    assert_eq!(rng.next(), 0x910a_2dec_8902_5cc1);
}

/// Every feature the generator covers, as a name, present in `world`.
fn features(world: &World) -> BTreeSet<&'static str> {
    let mut f = BTreeSet::new();
    for s in &world.services {
        f.insert(match s.kind {
            Kind::ClusterIp => "ClusterIP",
            Kind::NodePort => "NodePort",
            Kind::LoadBalancer {
                allocate_node_ports: true,
            } => "LoadBalancer",
            Kind::LoadBalancer {
                allocate_node_ports: false,
            } => "LoadBalancer without NodePorts",
            Kind::Headless => "headless",
            Kind::ExternalName => "ExternalName",
        });
        f.insert(match s.families {
            Families::V4 => "IPv4",
            Families::V6 => "IPv6",
            Families::Dual => "dual-stack",
        });
        if s.ports.len() > 1 {
            f.insert("multiple ports");
        }
        let protos: BTreeSet<_> = s.ports.iter().map(|p| p.proto).collect();
        if protos.len() > 1 {
            f.insert("TCP and UDP");
        }
        for (i, a) in s.ports.iter().enumerate() {
            if s.ports[i + 1..].iter().any(|b| b.port == a.port) {
                f.insert("one port number over both protocols");
            }
            f.insert(match a.target {
                Target::Number(_) => "numeric target port",
                Target::Named(_) => "named target port",
            });
            if a.name.is_empty() {
                f.insert("unnamed port");
            }
        }
        let own = s.families.list();
        for ip in &s.external_ips {
            f.insert("externalIPs");
            if s.kind.has_cluster_ip() && !own.contains(&Family::of(*ip)) {
                f.insert("externalIP of another family");
            }
        }
        for i in &s.ingress {
            f.insert(match i {
                Ingress::Ip(_, IpMode::Vip) => "ingress ipMode VIP",
                Ingress::Ip(_, IpMode::Proxy) => "ingress ipMode Proxy",
                Ingress::Hostname(_) => "ingress hostname",
            });
        }
        if !s.source_ranges.is_empty() {
            f.insert("loadBalancerSourceRanges");
        }
        if s.etp_applies() {
            f.insert("externalTrafficPolicy Local");
            if s.kind == Kind::ClusterIp {
                f.insert("externalTrafficPolicy Local on a ClusterIP with externalIPs");
            }
        }
        if s.itp_local {
            f.insert("internalTrafficPolicy Local");
        }
        if s.etp_applies() && s.itp_local {
            f.insert("both policies Local");
        }
        if s.affinity.is_some() {
            f.insert("ClientIP affinity");
        }
        if s.distribution.is_some() {
            f.insert("trafficDistribution");
        }
        match s.label {
            Some(ProxyLabel::OtherProxyName) => f.insert("service-proxy-name label"),
            Some(ProxyLabel::HeadlessLabel) => f.insert("headless label"),
            None => false,
        };
        if s.slices.is_empty() && s.kind.has_cluster_ip() {
            f.insert("no slices");
        }
        let fams: BTreeSet<_> = s.slices.iter().map(|sl| sl.family).collect();
        if s.slices.len() > fams.len() {
            f.insert("several slices per family");
        }
        for sl in &s.slices {
            if sl.ports.len() < s.ports.len() {
                f.insert("ports split across slices");
            }
            if sl.ports.iter().any(|p| p.name == "stray") {
                f.insert("slice port no Service port names");
            }
            if sl.endpoints.is_empty() {
                f.insert("empty slice");
            }
            for e in &sl.endpoints {
                f.insert(match (e.ready, e.serving, e.terminating) {
                    (Some(true), _, _) => "ready",
                    (None, None, None) => "conditions left out",
                    (_, Some(true), Some(true)) => "terminating serving",
                    (_, Some(false), Some(true)) => "terminating not serving",
                    _ => "not ready",
                });
                if e.node == EpNode::Absent {
                    f.insert("no nodeName");
                }
                if !e.hints.zones.is_empty() {
                    f.insert("zone hints");
                }
                if !e.hints.nodes.is_empty() {
                    f.insert("node hints");
                }
            }
            for other in s
                .slices
                .iter()
                .filter(|o| o.name != sl.name && o.family == sl.family)
            {
                if sl
                    .endpoints
                    .iter()
                    .any(|e| other.endpoints.iter().any(|o| o.pod == e.pod))
                {
                    f.insert("an endpoint in two slices");
                }
            }
        }
        let nodes: BTreeSet<usize> = s
            .slices
            .iter()
            .flat_map(|sl| &sl.endpoints)
            .map(|e| super::model::node_of_pod(&e.pod))
            .collect();
        if nodes.len() > 1 {
            f.insert("endpoints on several nodes");
        }
    }
    f
}

#[test]
fn twenty_seeds_cover_every_field_a_proxy_reads() {
    let all: BTreeSet<&str> = (1..=20).flat_map(|s| features(&generate(s))).collect();
    let want = [
        "ClusterIP",
        "NodePort",
        "LoadBalancer",
        "LoadBalancer without NodePorts",
        "headless",
        "ExternalName",
        "IPv4",
        "IPv6",
        "dual-stack",
        "multiple ports",
        "TCP and UDP",
        "one port number over both protocols",
        "numeric target port",
        "named target port",
        "unnamed port",
        "externalIPs",
        "externalIP of another family",
        "ingress ipMode VIP",
        "ingress ipMode Proxy",
        "ingress hostname",
        "loadBalancerSourceRanges",
        "externalTrafficPolicy Local",
        "externalTrafficPolicy Local on a ClusterIP with externalIPs",
        "internalTrafficPolicy Local",
        "both policies Local",
        "ClientIP affinity",
        "trafficDistribution",
        "no slices",
        "several slices per family",
        "ports split across slices",
        "slice port no Service port names",
        "empty slice",
        "ready",
        "not ready",
        "terminating serving",
        "terminating not serving",
        "conditions left out",
        "no nodeName",
        "zone hints",
        "node hints",
        "an endpoint in two slices",
        "endpoints on several nodes",
    ];
    let missing: Vec<&str> = want.iter().copied().filter(|w| !all.contains(w)).collect();
    assert!(missing.is_empty(), "seeds 1-20 never generate: {missing:?}");
    // The proxy labels are rare: within a hundred seeds.
    let more: BTreeSet<&str> = (1..=100).flat_map(|s| features(&generate(s))).collect();
    for label in ["service-proxy-name label", "headless label"] {
        assert!(more.contains(label), "seeds 1-100 never generate {label}");
    }
}

#[test]
fn worlds_keep_the_api_servers_rules() {
    for seed in 0..300 {
        for s in generate(seed).services {
            let names: BTreeSet<&str> = s.ports.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(
                names.len(),
                s.ports.len(),
                "seed {seed} {}: port names unique",
                s.name
            );
            if s.ports.len() > 1 {
                assert!(
                    !names.contains(""),
                    "seed {seed}: only a single port may be unnamed"
                );
            }
            let pp: BTreeSet<(u16, Proto)> = s.ports.iter().map(|p| (p.port, p.proto)).collect();
            assert_eq!(
                pp.len(),
                s.ports.len(),
                "seed {seed}: port and protocol unique"
            );
            let lb = matches!(s.kind, Kind::LoadBalancer { .. });
            assert!(lb || (s.ingress.is_empty() && s.source_ranges.is_empty()));
            if s.kind == Kind::ExternalName {
                assert!(!s.itp_local && s.affinity.is_none(), "seed {seed}");
            }
            for sl in &s.slices {
                let pods: BTreeSet<&str> = sl.endpoints.iter().map(|e| e.pod.as_str()).collect();
                assert_eq!(
                    pods.len(),
                    sl.endpoints.len(),
                    "seed {seed}: a pod once per slice"
                );
            }
        }
        let ips: Vec<_> = generate(seed)
            .services
            .iter()
            .flat_map(|s| {
                let ingress = s.ingress.iter().filter_map(|i| match i {
                    Ingress::Ip(ip, _) => Some(*ip),
                    Ingress::Hostname(_) => None,
                });
                s.external_ips
                    .iter()
                    .copied()
                    .chain(ingress)
                    .collect::<Vec<_>>()
            })
            .collect();
        let unique: BTreeSet<_> = ips.iter().collect();
        assert_eq!(
            unique.len(),
            ips.len(),
            "seed {seed}: every claimed address once"
        );
    }
}

#[test]
fn a_duplicated_endpoint_has_one_winner() {
    // Upstream keeps the last non-terminating copy of an endpoint (address and port) it
    // visits, in map order, or the first terminating one when all are: the copies that could
    // win must be equal.
    use std::collections::BTreeMap;
    for seed in 0..300 {
        for s in generate(seed).services {
            let mut copies: BTreeMap<_, Vec<&super::model::Ep>> = BTreeMap::new();
            for sl in &s.slices {
                for p in &sl.ports {
                    for e in &sl.endpoints {
                        let key = (sl.family, e.pod.clone(), p.name.clone(), p.port, p.proto);
                        copies.entry(key).or_default().push(e);
                    }
                }
            }
            for (key, eps) in copies {
                let live: Vec<_> = eps.iter().filter(|e| e.terminating != Some(true)).collect();
                let could_win: Vec<_> = if live.is_empty() {
                    eps.iter().collect()
                } else {
                    live
                };
                assert!(
                    could_win.windows(2).all(|w| w[0] == w[1]),
                    "seed {seed} {}: copies of {key:?} differ: {could_win:?}",
                    s.name
                );
            }
        }
    }
}

#[test]
fn every_frontend_has_a_stable_unique_name() {
    for seed in 1..=20 {
        let world = generate(seed);
        let allocated = frontends::nominal(&world);
        let fs = frontends::enumerate(&world, &allocated);
        let keys: BTreeSet<_> = fs.iter().map(|f| &f.key).collect();
        assert_eq!(
            keys.len(),
            fs.len(),
            "seed {seed}: frontend names are unique"
        );
        assert!(fs.len() > 20, "seed {seed}: {} frontends", fs.len());
    }
}
