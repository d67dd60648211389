//! The fixed part of every table: base chains, role chains with their rules, and the sets and
//! maps the per-service elements go into.
//!
//! Everything here depends only on the settings, the node and the cluster's Service CIDRs,
//! never on Services, so it is the same from one sync to the next and costs nothing in a diff.
//! Sets are declared even when empty, so every rule always refers to something that exists.
//! The base chains and the rules of the chains the ipvs and userspace modes share with this
//! one are [`nft_table::skeleton`](crate::dataplane::nft_table::skeleton)'s.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::Builder;
use crate::cluster::IpFamily;
use crate::dataplane::nft_table::skeleton::{
    BASE_CHAINS, IP_KEY, cluster_ips_check_rules, firewall_check_rule, reject_rules, set_match,
};
use crate::dataplane::nftables::names::{self as n, FrontendKind};
use crate::dataplane::node::{Local, NodePortMatch};
use crate::nft::Name;
use crate::nft::ruleset::{
    CtState, Data, DataKind, Field, Kind, Match, Set, SetDecl, Statement, Tuple, Value, Verdict,
};

/// The key of a NodePort: protocol . port.
pub(super) const NODEPORT_KEY: [Field; 2] = [Field::L4Proto, Field::Dport];

pub(super) fn add(b: &mut Builder, service_cidrs: &[IpNet]) {
    sets(b);
    base_chains(b);
    capture(b);
    treatments(b);
    filters(b, service_cidrs);
    let mark = b.cfg.node.masquerade_mark;
    b.push(
        n::MASQUERADING,
        vec![Match::MarkSet(mark)],
        vec![Statement::MarkXor(mark), Statement::Masquerade],
    );
    b.push(
        n::MASQUERADING,
        vec![
            Match::CtStatusDnat,
            set_match(
                &[Field::Saddr, Field::Daddr, Field::L4Proto, Field::Dport],
                n::HAIRPIN,
            ),
        ],
        vec![Statement::Masquerade],
    );
}

/// The backends map a pick chain reads: `(frontend . index) → endpoint addr . port`, keyed by
/// address, protocol and port for IP frontends, by protocol and port for NodePorts.
pub(super) fn backends_decl(frontend: FrontendKind) -> Set {
    use Kind::{Addr, Index, Port, Proto};
    let endpoint = DataKind::Values(vec![Addr, Port]);
    match frontend {
        FrontendKind::Ip => decl(
            &[Addr, Proto, Port, Index],
            endpoint,
            "frontend and index to endpoint",
        ),
        FrontendKind::NodePort => decl(
            &[Proto, Port, Index],
            endpoint,
            "nodeport and index to endpoint",
        ),
    }
}

fn decl(key: &[Kind], data: DataKind, comment: &str) -> Set {
    Set::new(SetDecl::plain(key, data, comment))
}

fn sets(b: &mut Builder) {
    use Kind::{Addr, Port, Proto};
    let frontend = [Addr, Proto, Port];
    let nodeport = [Proto, Port];
    let mut all = vec![
        (
            n::SERVICE_IPS,
            decl(&frontend, DataKind::Verdict, "frontend to treatment"),
        ),
        (
            n::SERVICE_NODEPORTS,
            decl(&nodeport, DataKind::Verdict, "nodeport to treatment"),
        ),
        (
            n::CLUSTER_IPS,
            decl(&[Addr], DataKind::None, "every ClusterIP"),
        ),
        (
            n::NO_ENDPOINT_SERVICES,
            decl(&frontend, DataKind::Verdict, "frontends without endpoints"),
        ),
        (
            n::NO_ENDPOINT_NODEPORTS,
            decl(&nodeport, DataKind::Verdict, "nodeports without endpoints"),
        ),
        (
            n::FIREWALL_IPS,
            decl(&frontend, DataKind::None, "frontends with source ranges"),
        ),
        (
            n::HAIRPIN,
            decl(
                &[Addr, Addr, Proto, Port],
                DataKind::None,
                "local endpoints reaching themselves",
            ),
        ),
        (
            n::DISPATCH,
            decl(
                &frontend,
                DataKind::Verdict,
                "frontend to its policy endpoints",
            ),
        ),
        (
            n::DISPATCH_CLUSTER,
            decl(
                &frontend,
                DataKind::Verdict,
                "frontend to its cluster endpoints",
            ),
        ),
        (
            n::NODEPORT_DISPATCH,
            decl(
                &nodeport,
                DataKind::Verdict,
                "nodeport to its policy endpoints",
            ),
        ),
        (
            n::NODEPORT_DISPATCH_CLUSTER,
            decl(
                &nodeport,
                DataKind::Verdict,
                "nodeport to its cluster endpoints",
            ),
        ),
    ];
    let mut allow = decl(
        &[Addr, Proto, Port, Addr],
        DataKind::None,
        "allowed sources per frontend",
    );
    allow.decl.interval = true;
    all.push((n::FIREWALL_ALLOW, allow));
    if let NodePortMatch::Addresses { .. } = b.node_ports {
        all.push((
            n::NODEPORT_IPS,
            decl(
                &[Addr],
                DataKind::None,
                "node addresses accepting nodeports",
            ),
        ));
    }
    for (name, set) in all {
        b.rules.sets.insert(Name::fixed(name), set);
    }
    if let NodePortMatch::Addresses { addrs, .. } = &b.node_ports {
        let set = Name::fixed(n::NODEPORT_IPS);
        for ip in addrs.clone() {
            b.element(&set, Tuple::new(&[Value::Addr(ip)]), Data::None, None);
        }
    }
}

fn base_chains(b: &mut Builder) {
    b.rules.add_base_chains(&BASE_CHAINS);
    let jump = |to: &'static str| vec![Statement::Verdict(Verdict::Jump(Name::fixed(to)))];
    let new = || vec![Match::CtState(CtState::New)];
    b.push(n::NAT_PREROUTING, vec![], jump(n::SERVICES));
    b.push(n::NAT_OUTPUT, vec![], jump(n::SERVICES));
    b.push(n::NAT_POSTROUTING, vec![], jump(n::MASQUERADING));
    b.push(
        n::FILTER_PREROUTING_PRE_DNAT,
        new(),
        jump(n::FIREWALL_CHECK),
    );
    b.push(n::FILTER_OUTPUT_PRE_DNAT, new(), jump(n::FIREWALL_CHECK));
    b.push(n::FILTER_INPUT, new(), jump(n::NODEPORT_ENDPOINTS_CHECK));
    b.push(n::FILTER_INPUT, new(), jump(n::SERVICE_ENDPOINTS_CHECK));
    if b.cfg.node.drop_invalid {
        b.push(
            n::FILTER_FORWARD,
            vec![Match::CtState(CtState::Invalid)],
            vec![Statement::Verdict(Verdict::Drop)],
        );
    }
    for chain in [n::FILTER_FORWARD, n::FILTER_OUTPUT] {
        b.push(chain, new(), jump(n::SERVICE_ENDPOINTS_CHECK));
        b.push(chain, new(), jump(n::CLUSTER_IPS_CHECK));
    }
}

/// The destination test that makes a packet NodePort traffic.
pub(super) fn nodeport_matches(b: &Builder) -> Vec<Match> {
    match &b.node_ports {
        NodePortMatch::All { .. } => vec![
            Match::FibLocal { source: false },
            Match::Net {
                field: Field::Daddr,
                net: loopback(b.family),
                negate: true,
            },
        ],
        NodePortMatch::Addresses { .. } => vec![set_match(&[Field::Daddr], n::NODEPORT_IPS)],
    }
}

fn loopback(family: IpFamily) -> IpNet {
    match family {
        IpFamily::V4 => IpNet::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
        IpFamily::V6 => IpNet::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
    }
    .expect("valid prefix")
}

fn vmap(key: &[Field], map: &'static str) -> Statement {
    Statement::VerdictMap {
        key: key.to_vec(),
        map: Name::fixed(map),
    }
}

fn capture(b: &mut Builder) {
    b.push(n::SERVICES, vec![], vec![vmap(&IP_KEY, n::SERVICE_IPS)]);
    let m = nodeport_matches(b);
    b.push(
        n::SERVICES,
        m,
        vec![vmap(&NODEPORT_KEY, n::SERVICE_NODEPORTS)],
    );
}

/// Traffic from this node's pods, or (`negate`) from anywhere else; `None` without detection.
fn from_local_pod(b: &Builder, negate: bool) -> Option<Match> {
    match b.cfg.node.detect_local.resolve(b.family, &b.node.pod_cidrs) {
        Local::Interface(name) => Some(Match::Iifname { name, negate }),
        Local::Cidr(net) => Some(Match::Net {
            field: Field::Saddr,
            net,
            negate,
        }),
        Local::None => None,
    }
}

fn treatments(b: &mut Builder) {
    let mark = Statement::MarkOr(b.cfg.node.masquerade_mark);
    // ClusterIP: masquerade everything, or what does not come from a local pod, so replies
    // from an endpoint on another node come back through this one.
    if b.cfg.node.masquerade_all {
        b.push(n::CLUSTER_IP, vec![], vec![mark.clone()]);
    } else if let Some(m) = from_local_pod(b, true) {
        b.push(n::CLUSTER_IP, vec![m], vec![mark.clone()]);
    }
    b.push(n::CLUSTER_IP, vec![], vec![vmap(&IP_KEY, n::DISPATCH)]);
    let local_pod = from_local_pod(b, false);
    for (cluster, local, key, dispatch, short) in [
        (
            n::EXTERNAL,
            n::EXTERNAL_LOCAL,
            &IP_KEY[..],
            n::DISPATCH,
            n::DISPATCH_CLUSTER,
        ),
        (
            n::NODEPORT,
            n::NODEPORT_LOCAL,
            &NODEPORT_KEY[..],
            n::NODEPORT_DISPATCH,
            n::NODEPORT_DISPATCH_CLUSTER,
        ),
    ] {
        // externalTrafficPolicy Cluster: always masquerade.
        b.push(cluster, vec![], vec![mark.clone()]);
        b.push(cluster, vec![], vec![vmap(key, dispatch)]);
        // externalTrafficPolicy Local: pods and the host itself use the cluster endpoints (the
        // host masqueraded); everyone else keeps its address and uses local endpoints only.
        if let Some(m) = local_pod.clone() {
            b.push(local, vec![m], vec![vmap(key, short)]);
        }
        b.push(
            local,
            vec![Match::FibLocal { source: true }],
            vec![mark.clone(), vmap(key, short)],
        );
        b.push(local, vec![], vec![vmap(key, dispatch)]);
    }
}

fn filters(b: &mut Builder, service_cidrs: &[IpNet]) {
    let (matches, statements) = firewall_check_rule();
    b.push(n::FIREWALL_CHECK, matches, statements);
    b.push(
        n::SERVICE_ENDPOINTS_CHECK,
        vec![],
        vec![vmap(&IP_KEY, n::NO_ENDPOINT_SERVICES)],
    );
    let m = nodeport_matches(b);
    b.push(
        n::NODEPORT_ENDPOINTS_CHECK,
        m,
        vec![vmap(&NODEPORT_KEY, n::NO_ENDPOINT_NODEPORTS)],
    );
    for (matches, statements) in cluster_ips_check_rules() {
        b.push(n::CLUSTER_IPS_CHECK, matches, statements);
    }
    for net in unallocated_ranges(service_cidrs, b.family) {
        b.push(
            n::CLUSTER_IPS_CHECK,
            vec![Match::Net {
                field: Field::Daddr,
                net,
                negate: false,
            }],
            vec![Statement::Verdict(Verdict::Drop)],
        );
    }
    for (matches, statements) in reject_rules() {
        b.push(n::REJECT_CHAIN, matches, statements);
    }
}

/// The ranges `cluster-ips-check` drops after refusing held ClusterIPs at undefined ports: the
/// Service CIDRs of `family`, overlapping and adjacent ones merged, so an address no Service
/// holds fails at once instead of being routed off the node. One rule per range: clusters have
/// one or two per family.
fn unallocated_ranges(service_cidrs: &[IpNet], family: IpFamily) -> Vec<IpNet> {
    let of_family: Vec<IpNet> = service_cidrs
        .iter()
        .filter(|net| IpFamily::of_net(net) == family)
        .copied()
        .collect();
    IpNet::aggregate(&of_family)
}
