//! The seeded generator: a [`World`] of 6-11 Services from a `u64` seed, the same on every
//! machine (its own SplitMix64 generator, no library whose sequence could change).
//!
//! It covers every field a proxy reads: the four kinds a proxy programs plus headless and
//! ExternalName, single- and dual-stack, one to three ports (TCP and UDP, the same number over
//! both, named and numeric target ports, an unnamed single port), externalIPs (also of the
//! family the Service does not have), LoadBalancer ingress IPs with ipMode VIP and Proxy and
//! hostname-only ingress, source ranges, both traffic policies, ClientIP affinity with a
//! timeout, the service-proxy-name and headless labels; slices per family, with ports split
//! across slices and a port no Service port names, endpoints ready, not ready, terminating
//! serving and not serving, conditions left out, without a nodeName, zone and node hints, and
//! the same endpoint in two slices.
//!
//! Addresses the Services claim (externalIPs, ingress IPs) are unique within a world: two
//! Services on one address and port is a conflict each proxy resolves its own way, not a
//! behaviour to compare.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::model::{
    Ep, EpNode, Families, Hints, Ingress, IpMode, Kind, Port, ProxyLabel, Slice, SlicePort, Svc,
    Target, World, node_of_pod, pod_names,
};
use crate::lab::Proto;
use crate::lab::cluster::{Family, zone};
use crate::lab::pods::ECHO_PORTS;

/// SplitMix64: small, fast, and fixed forever (a seed names the same world in every report).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with `percent` % probability.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }

    /// One of `items`, each as likely as its weight.
    pub fn weighted<T: Clone>(&mut self, items: &[(u64, T)]) -> T {
        let total: u64 = items.iter().map(|(w, _)| w).sum();
        let mut n = self.next() % total;
        for (w, item) in items {
            if n < *w {
                return item.clone();
            }
            n -= w;
        }
        unreachable!("weights sum to {total}")
    }
}

/// The pods the probes start from (`frontends::Source::Pod`).
const PROBING_PODS: [&str; 2] = ["n1-b", "n2-b"];

/// Service port numbers the generator chooses from.
const SERVICE_PORTS: [u16; 6] = [80, 53, 443, 8080, 5000, 9000];

/// Source ranges the generator chooses from: the external client's two addresses, the whole
/// underlay (which holds the nodes), the pod network, one node's pods, everything, and their
/// IPv6 counterparts.
const SOURCE_RANGES: [&str; 9] = [
    "192.168.200.100/32",
    "192.168.200.101/32",
    "192.168.200.0/24",
    "10.244.0.0/16",
    "10.244.2.0/24",
    "0.0.0.0/0",
    "fd00:200::100/128",
    "fd00:200::/64",
    "fd00:244::/32",
];

/// Distribution values the generator writes (proxies read the hints, not these).
const DISTRIBUTIONS: [&str; 3] = ["PreferClose", "PreferSameZone", "PreferSameNode"];

/// Hands out externalIPs and ingress IPs, each once per world.
struct Addresses {
    next: u16,
}

impl Addresses {
    /// An externalIP (`203.0.113.x`, `fd00:203::x`) of `family`.
    fn external(&mut self, family: Family) -> IpAddr {
        self.take(family, Ipv4Addr::new(203, 0, 113, 0), 0x203)
    }

    /// A LoadBalancer ingress IP (`198.51.100.x`, `fd00:198::x`) of `family`.
    fn ingress(&mut self, family: Family) -> IpAddr {
        self.take(family, Ipv4Addr::new(198, 51, 100, 0), 0x198)
    }

    fn take(&mut self, family: Family, net4: Ipv4Addr, net6: u16) -> IpAddr {
        self.next += 1;
        let host = 10 + self.next;
        match family {
            Family::V4 => {
                let [a, b, c, _] = net4.octets();
                IpAddr::V4(Ipv4Addr::new(a, b, c, u8::try_from(host).expect("few")))
            }
            Family::V6 => IpAddr::V6(Ipv6Addr::new(0xfd00, net6, 0, 0, 0, 0, 0, host)),
        }
    }
}

/// The world of `seed`.
pub fn generate(seed: u64) -> World {
    let mut rng = Rng::new(seed);
    let mut addresses = Addresses { next: 0 };
    let count = 6 + rng.below(6);
    let services = (0..count)
        .map(|i| service(&mut rng, &mut addresses, i))
        .collect();
    let mut world = World { services };
    make_duplicates_consistent(&mut world);
    world
}

fn service(rng: &mut Rng, addresses: &mut Addresses, index: usize) -> Svc {
    let kind = rng.weighted(&[
        (35, Kind::ClusterIp),
        (20, Kind::NodePort),
        (
            20,
            Kind::LoadBalancer {
                allocate_node_ports: true,
            },
        ),
        (
            5,
            Kind::LoadBalancer {
                allocate_node_ports: false,
            },
        ),
        (12, Kind::Headless),
        (8, Kind::ExternalName),
    ]);
    let families = rng.weighted(&[(50, Families::V4), (20, Families::V6), (30, Families::Dual)]);
    let ports = ports(rng);
    let own = families.list();
    let mut external_ips = Vec::new();
    if rng.chance(if kind == Kind::ExternalName { 10 } else { 30 }) {
        for _ in 0..=rng.below(2) {
            // Mostly of a family the Service has; sometimes of the other, which no proxy uses.
            let family = if rng.chance(80) {
                rng.pick(&own)
            } else {
                rng.pick(&[Family::V4, Family::V6])
            };
            external_ips.push(addresses.external(family));
        }
    }
    let is_lb = matches!(kind, Kind::LoadBalancer { .. });
    let mut ingress = Vec::new();
    let mut source_ranges = Vec::new();
    if is_lb {
        for _ in 0..rng.below(3) {
            if rng.chance(15) {
                ingress.push(Ingress::Hostname(format!("lb{index}.example.com")));
            } else {
                let mode = if rng.chance(70) {
                    IpMode::Vip
                } else {
                    IpMode::Proxy
                };
                ingress.push(Ingress::Ip(addresses.ingress(rng.pick(&own)), mode));
            }
        }
        if rng.chance(35) {
            for _ in 0..=rng.below(2) {
                let range = rng.pick(&SOURCE_RANGES).to_owned();
                if !source_ranges.contains(&range) {
                    source_ranges.push(range);
                }
            }
        }
    }
    let external_name = kind == Kind::ExternalName;
    let mut svc = Svc {
        name: format!("s{index}"),
        kind,
        families,
        ports,
        external_ips,
        ingress,
        source_ranges,
        etp_local: rng.chance(40),
        itp_local: !external_name && rng.chance(25),
        affinity: (!external_name && rng.chance(20)).then(|| rng.pick(&[60, 600, 10800])),
        distribution: (!external_name && rng.chance(15)).then(|| rng.pick(&DISTRIBUTIONS)),
        label: None,
        slices: Vec::new(),
    };
    if rng.chance(4) {
        svc.label = Some(ProxyLabel::OtherProxyName);
    } else if rng.chance(3) {
        svc.label = Some(ProxyLabel::HeadlessLabel);
    }
    svc.slices = slices(rng, &svc);
    svc
}

fn ports(rng: &mut Rng) -> Vec<Port> {
    let count = rng.weighted(&[(55, 1), (30, 2), (15, 3)]);
    let mut ports: Vec<Port> = Vec::new();
    while ports.len() < count {
        let j = ports.len();
        let proto = if rng.chance(65) {
            Proto::Tcp
        } else {
            Proto::Udp
        };
        // Sometimes the previous port's number over the other protocol.
        let port = match ports.last() {
            Some(prev) if rng.chance(25) => prev.port,
            _ => rng.pick(&SERVICE_PORTS),
        };
        if ports.iter().any(|p| p.port == port && p.proto == proto) {
            continue;
        }
        let name = if count == 1 && rng.chance(50) {
            String::new()
        } else {
            let prefix = match proto {
                Proto::Tcp => "t",
                Proto::Udp => "u",
            };
            format!("{prefix}{j}")
        };
        let target = if rng.chance(60) {
            Target::Number(rng.pick(&ECHO_PORTS))
        } else {
            Target::Named(format!("echo-{j}"))
        };
        ports.push(Port {
            name,
            port,
            proto,
            target,
        });
    }
    ports
}

/// How a Service's endpoints are hinted.
#[derive(Clone, Copy)]
enum HintMode {
    None,
    Zones,
    Nodes,
}

fn slices(rng: &mut Rng, svc: &Svc) -> Vec<Slice> {
    let families = if svc.kind == Kind::ExternalName {
        vec![Family::V4]
    } else {
        svc.families.list()
    };
    let hint_mode = rng.weighted(&[
        (65, HintMode::None),
        (25, HintMode::Zones),
        (10, HintMode::Nodes),
    ]);
    let mut slices = Vec::new();
    for family in families {
        if rng.chance(8) {
            continue;
        }
        let count = rng.weighted(&[(55, 1), (30, 2), (15, 3)]);
        let split = count > 1 && svc.ports.len() > 1 && rng.chance(50);
        for k in 0..count {
            let mut ports: Vec<SlicePort> = svc
                .ports
                .iter()
                .enumerate()
                .filter(|(j, _)| !split || j % count == k)
                .map(|(_, p)| SlicePort {
                    name: p.name.clone(),
                    port: match p.target {
                        Target::Number(n) => n,
                        // A named port resolves per pod: slices may differ.
                        Target::Named(_) => rng.pick(&ECHO_PORTS),
                    },
                    proto: p.proto,
                })
                .collect();
            if rng.chance(5) {
                ports.push(SlicePort {
                    name: "stray".to_owned(),
                    port: 8081,
                    proto: Proto::Tcp,
                });
            }
            // Under ClientIP affinity each proxy sticks to an endpoint of its own random
            // choice: none of them is a probing pod, whose reaching itself (hairpin) would
            // make the outcome depend on that choice.
            let mut pods: Vec<String> = pod_names()
                .into_iter()
                .filter(|p| svc.affinity.is_none() || !PROBING_PODS.contains(&p.as_str()))
                .collect();
            let n = rng.weighted(&[(10, 0), (30, 1), (35, 2), (25, 3)]);
            let endpoints = (0..n)
                .map(|_| {
                    let pod = pods.remove(rng.below(pods.len()));
                    endpoint(rng, pod, hint_mode)
                })
                .collect();
            // The EndpointSlice controller copies a Service's labels to its slices, and marks
            // a headless Service's slices; sometimes a slice carries a label by itself.
            let label = match (svc.kind, svc.label) {
                (_, Some(l)) if rng.chance(70) => Some(l),
                (Kind::Headless, _) if rng.chance(70) => Some(ProxyLabel::HeadlessLabel),
                _ if rng.chance(3) => {
                    Some(rng.pick(&[ProxyLabel::HeadlessLabel, ProxyLabel::OtherProxyName]))
                }
                _ => None,
            };
            slices.push(Slice {
                name: format!("{}-{}", svc.name, slices.len()),
                label,
                family,
                ports,
                endpoints,
            });
        }
    }
    duplicate_one(rng, &mut slices);
    slices
}

fn endpoint(rng: &mut Rng, pod: String, hint_mode: HintMode) -> Ep {
    let (ready, serving, terminating) = rng.weighted(&[
        (68, (Some(true), Some(true), Some(false))),
        (10, (Some(false), Some(false), Some(false))),
        (10, (Some(false), Some(true), Some(true))),
        (7, (Some(false), Some(false), Some(true))),
        (5, (None, None, None)),
    ]);
    let node = node_of_pod(&pod);
    let other = |rng: &mut Rng| (node + 1 + rng.below(2)) % 3;
    let mut hints = Hints::default();
    let zone_hint = |rng: &mut Rng| -> Vec<String> {
        let elsewhere = zone(other(rng)).to_owned();
        rng.weighted(&[
            (80, vec![zone(node).to_owned()]),
            (8, vec![elsewhere]),
            (7, vec!["zone-a".to_owned(), "zone-b".to_owned()]),
            (5, vec![]),
        ])
    };
    match hint_mode {
        HintMode::None => {}
        HintMode::Zones => hints.zones = zone_hint(rng),
        HintMode::Nodes => {
            let elsewhere = other(rng);
            let nodes = rng.weighted(&[(85, vec![node]), (10, vec![elsewhere]), (5, vec![])]);
            hints.nodes = nodes;
            if rng.chance(50) {
                hints.zones = zone_hint(rng);
            }
        }
    }
    Ep {
        pod,
        ready,
        serving,
        terminating,
        node: if rng.chance(6) {
            EpNode::Absent
        } else {
            EpNode::Own
        },
        hints,
    }
}

/// Sometimes puts an endpoint of one slice into another slice of its family too: as it is, or
/// as a terminating copy.
fn duplicate_one(rng: &mut Rng, slices: &mut [Slice]) {
    if slices.len() < 2 || !rng.chance(30) {
        return;
    }
    let from = rng.below(slices.len());
    let to = rng.below(slices.len());
    if from == to || slices[from].family != slices[to].family || slices[from].endpoints.is_empty() {
        return;
    }
    let mut ep = rng.pick(&slices[from].endpoints);
    if slices[to].endpoints.iter().any(|e| e.pod == ep.pod) {
        return;
    }
    if rng.chance(40) {
        ep.ready = Some(false);
        ep.serving = Some(rng.chance(50));
        ep.terminating = Some(true);
    }
    slices[to].endpoints.push(ep);
}

/// Makes every endpoint that appears in more than one slice of a Service (the same pod
/// address, port name and number) decidable: upstream visits slices in map order, and keeps
/// the last non-terminating copy (a terminating copy never replaces one already seen), so
/// copies that differ are only defined when exactly one kind of copy could win. Copies of a
/// pod are grouped by the ports they share (through any number of slices); in a group, every
/// non-terminating copy becomes the first non-terminating one, and without any, every copy
/// becomes the first.
pub fn make_duplicates_consistent(world: &mut World) {
    for svc in &mut world.services {
        let n = svc.slices.len();
        let pods: Vec<String> = svc
            .slices
            .iter()
            .flat_map(|s| s.endpoints.iter().map(|e| e.pod.clone()))
            .collect();
        for pod in pods {
            // The slices holding a copy of `pod`, grouped by shared ports.
            let holders: Vec<usize> = (0..n)
                .filter(|&k| svc.slices[k].endpoints.iter().any(|e| e.pod == pod))
                .collect();
            let mut group: Vec<usize> = (0..holders.len()).collect();
            for x in 0..holders.len() {
                for y in (x + 1)..holders.len() {
                    let (a, b) = (holders[x], holders[y]);
                    if svc.slices[a].family == svc.slices[b].family && share_port(svc, a, b) {
                        let (gx, gy) = (group[x], group[y]);
                        for g in &mut group {
                            if *g == gy {
                                *g = gx;
                            }
                        }
                    }
                }
            }
            let copy = |svc: &Svc, k: usize| -> Ep {
                svc.slices[k]
                    .endpoints
                    .iter()
                    .find(|e| e.pod == pod)
                    .cloned()
                    .expect("a holder holds the pod")
            };
            let term = |e: &Ep| e.terminating == Some(true);
            for g in 0..holders.len() {
                let members: Vec<usize> = (0..holders.len())
                    .filter(|&x| group[x] == g)
                    .map(|x| holders[x])
                    .collect();
                if members.len() < 2 {
                    continue;
                }
                let winner = members
                    .iter()
                    .map(|&k| copy(svc, k))
                    .find(|e| !term(e))
                    .unwrap_or_else(|| copy(svc, members[0]));
                for &k in &members {
                    for e in svc.slices[k].endpoints.iter_mut().filter(|e| e.pod == pod) {
                        if term(e) == term(&winner) {
                            *e = winner.clone();
                        }
                    }
                }
            }
        }
    }
}

/// Whether slices `a` and `b` of `svc` have a port of the same name, number and protocol.
fn share_port(svc: &Svc, a: usize, b: usize) -> bool {
    svc.slices[a].ports.iter().any(|pa| {
        svc.slices[b]
            .ports
            .iter()
            .any(|pb| pa.name == pb.name && pa.port == pb.port && pa.proto == pb.proto)
    })
}
