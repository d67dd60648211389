//! The helper rules: what IPVS cannot do itself, as one family's nftables table, planned from
//! the same [`Desired`] state as the virtual services.
//!
//! Pure. Upstream's IPVS mode writes these with `iptables-restore` and fills a dozen ipsets
//! with one `ipset` process per entry (kubernetes#133773, #93445); here they are one nftables
//! table with native sets, applied in one netlink batch by the nf_tables library's applier
//! (the same diff, adoption and repair as the nftables mode's), so no ipset and no iptables
//! process is ever run.
//!
//! Where the rules sit, against IPVS's own hooks (it takes packets to a local virtual service
//! at `LOCAL_IN` priority 99 and those the node sends at `LOCAL_OUT` -98, after nat output):
//! - `nat-prerouting` and `nat-output` (-100, before IPVS): the frontend's treatment, which
//!   sets the masquerade mark ([`Masquerade`]); `nat-postrouting` (100) masquerades marked
//!   connections and a pod sent to itself (hairpin). IPVS re-injects the packets it rewrote at
//!   `LOCAL_OUT`, so they reach postrouting, where NAT still sees an unconfirmed connection;
//!   that is why the mode sets `net.ipv4.vs.conntrack=1`.
//! - `filter-input` (0, before IPVS) and `filter-output-pre-dnat` (-110, before IPVS): the
//!   [`Guard`]s (refuse at once, drop), the LoadBalancer source ranges, and on input the VIP
//!   port filter ([`IPVS_FILTER`](super::names::rules::IPVS_FILTER)). Without the guards a
//!   virtual service with no destination answers even TCP with an ICMP error the kernel
//!   rate-limits per host.
//! - `filter-forward`: the conntrack-INVALID drop of the node policy.

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use super::backend::netlink::ServiceKey;
use super::desired::{Desired, Guard, Masquerade, VirtualService};
use super::mode_config::ModeConfig;
use super::names::rules as r;
use crate::cluster::{NodeContext, Protocol};
use crate::dataplane::nft_table::names as n;
use crate::dataplane::nft_table::skeleton::{self, BASE_CHAINS, IP_KEY};
use crate::dataplane::node::Local;
use crate::nft::Name;
use crate::nft::ruleset::{
    Comment, CtState, Data, DataKind, Family, Field, Kind, Match, Ruleset, Set, SetDecl, Statement,
    Tuple, Value, Verdict,
};

/// The helper table of `desired`'s family; `bound` is what [`LINK`](super::names::LINK) holds
/// once this sync's addresses are bound.
pub fn plan(
    desired: &Desired,
    cfg: &ModeConfig,
    node: &NodeContext,
    bound: &BTreeSet<IpAddr>,
) -> Ruleset {
    let mut rules = Ruleset::empty(Family::of(desired.family));
    declare_sets(&mut rules);
    base_chains(&mut rules, cfg);
    treatments(&mut rules, cfg, desired.family, node);
    filters(&mut rules, cfg, desired.family, node);

    for ip in bound
        .iter()
        .filter(|ip| crate::cluster::IpFamily::of(ip) == desired.family)
    {
        bound_element(&mut rules, *ip);
    }
    for (key, vs) in &desired.services {
        service_elements(&mut rules, key, vs);
    }
    for (endpoint, proto) in &desired.hairpin {
        hairpin_element(&mut rules, *endpoint, *proto);
    }
    rules
}

/// Some of the elements of `family`'s table: those of `services`, `hairpin` entries and
/// `bound` addresses, in a table that holds only the (declared) sets. What the incremental
/// [`Planner`](super::plan::Planner) compares before and after a change: every element of
/// [`plan`]'s table belongs to exactly one virtual service, hairpin entry or bound address,
/// so the elements of the touched ones are all that can differ.
pub fn elements_of<'a>(
    family: crate::cluster::IpFamily,
    services: impl IntoIterator<Item = (&'a ServiceKey, &'a VirtualService)>,
    hairpin: impl IntoIterator<Item = (SocketAddr, Protocol)>,
    bound: impl IntoIterator<Item = IpAddr>,
) -> Ruleset {
    let mut rules = Ruleset::empty(Family::of(family));
    declare_sets(&mut rules);
    for ip in bound {
        bound_element(&mut rules, ip);
    }
    for (key, vs) in services {
        service_elements(&mut rules, key, vs);
    }
    for (endpoint, proto) in hairpin {
        hairpin_element(&mut rules, endpoint, proto);
    }
    rules
}

fn bound_element(rules: &mut Ruleset, ip: IpAddr) {
    rules.element(
        r::BOUND_ADDRESSES,
        Tuple::new(&[Value::Addr(ip)]),
        Data::None,
        None,
    );
}

/// A virtual service's elements: its treatment, the port filter's entry, its guard and its
/// source ranges, each keyed by the frontend (so no two virtual services share a key).
fn service_elements(rules: &mut Ruleset, key: &ServiceKey, vs: &VirtualService) {
    let ServiceKey::Address { address, .. } = key else {
        return;
    };
    let proto = vs.owner.protocol;
    let frontend = [
        Value::Addr(address.ip()),
        Value::Proto(proto),
        Value::Port(address.port()),
    ];
    let comment = Comment::sanitised(&vs.owner.to_string());
    let treatment = match vs.masquerade {
        Masquerade::ClusterIp => n::CLUSTER_IP,
        Masquerade::Always => n::EXTERNAL,
        Masquerade::FromNode => n::EXTERNAL_LOCAL,
    };
    rules.element(
        n::SERVICE_IPS,
        Tuple::new(&frontend),
        Data::Verdict(goto(treatment)),
        Some(&comment),
    );
    rules.element(r::SERVICE_PORTS, Tuple::new(&frontend), Data::None, None);
    let guard = match vs.guard {
        Guard::None => None,
        Guard::Reject => Some(goto(n::REJECT_CHAIN)),
        Guard::Drop => Some(Verdict::Drop),
        Guard::DropFromOutside => Some(goto(r::NO_LOCAL_ENDPOINT)),
    };
    if let Some(verdict) = guard {
        rules.element(
            n::NO_ENDPOINT_SERVICES,
            Tuple::new(&frontend),
            Data::Verdict(verdict),
            Some(&comment),
        );
    }
    if let Some(allowed) = &vs.allowed_sources {
        rules.element(
            n::FIREWALL_IPS,
            Tuple::new(&frontend),
            Data::None,
            Some(&comment),
        );
        for net in allowed {
            let mut key = frontend.to_vec();
            key.push(Value::Net(*net));
            rules.element(n::FIREWALL_ALLOW, Tuple::new(&key), Data::None, None);
        }
    }
}

fn hairpin_element(rules: &mut Ruleset, endpoint: SocketAddr, proto: Protocol) {
    let key = [
        Value::Addr(endpoint.ip()),
        Value::Addr(endpoint.ip()),
        Value::Proto(proto),
        Value::Port(endpoint.port()),
    ];
    rules.element(n::HAIRPIN, Tuple::new(&key), Data::None, None);
}

/// Declares one of the table's sets, empty; only `firewall-allow` holds ranges.
fn declare(rules: &mut Ruleset, name: &'static str, key: &[Kind], data: DataKind, comment: &str) {
    let decl = SetDecl {
        interval: name == n::FIREWALL_ALLOW,
        ..SetDecl::plain(key, data, comment)
    };
    rules.sets.insert(Name::fixed(name), Set::new(decl));
}

fn goto(chain: &'static str) -> Verdict {
    Verdict::Goto(Name::fixed(chain))
}

fn jump(chain: &'static str) -> Vec<Statement> {
    vec![Statement::Verdict(Verdict::Jump(Name::fixed(chain)))]
}

fn in_set(key: &[Field], set: &'static str, negate: bool) -> Match {
    Match::InSet {
        key: key.to_vec(),
        set: Name::fixed(set),
        negate,
    }
}

fn vmap(key: &[Field], map: &'static str) -> Vec<Statement> {
    vec![Statement::VerdictMap {
        key: key.to_vec(),
        map: Name::fixed(map),
    }]
}

fn declare_sets(rules: &mut Ruleset) {
    use Kind::{Addr, Port, Proto};
    let frontend = [Addr, Proto, Port];
    declare(
        rules,
        n::SERVICE_IPS,
        &frontend,
        DataKind::Verdict,
        "virtual service to treatment",
    );
    declare(
        rules,
        r::SERVICE_PORTS,
        &frontend,
        DataKind::None,
        "every virtual service",
    );
    declare(
        rules,
        n::NO_ENDPOINT_SERVICES,
        &frontend,
        DataKind::Verdict,
        "virtual services without a usable endpoint",
    );
    declare(
        rules,
        n::FIREWALL_IPS,
        &frontend,
        DataKind::None,
        "frontends with source ranges",
    );
    declare(
        rules,
        n::FIREWALL_ALLOW,
        &[Addr, Proto, Port, Addr],
        DataKind::None,
        "allowed sources per frontend",
    );
    declare(
        rules,
        n::HAIRPIN,
        &[Addr, Addr, Proto, Port],
        DataKind::None,
        "local endpoints reaching themselves",
    );
    declare(
        rules,
        r::BOUND_ADDRESSES,
        &[Addr],
        DataKind::None,
        "addresses bound on kube-ipvs0",
    );
}

/// The shared base chains this mode hooks, in this order: IPVS does the DNAT, so
/// the pre-DNAT prerouting filter and the plain output filter have nothing to do here.
const HOOKED: [&str; 6] = [
    n::NAT_PREROUTING,
    n::NAT_OUTPUT,
    n::NAT_POSTROUTING,
    n::FILTER_INPUT,
    n::FILTER_OUTPUT_PRE_DNAT,
    n::FILTER_FORWARD,
];

fn base_chains(rules: &mut Ruleset, cfg: &ModeConfig) {
    let table: Vec<_> = HOOKED
        .iter()
        .filter_map(|name| BASE_CHAINS.iter().find(|c| c.0 == *name).copied())
        .collect();
    rules.add_base_chains(&table);
    let new = || vec![Match::CtState(CtState::New)];
    rules.push(n::NAT_PREROUTING, vec![], vmap(&IP_KEY, n::SERVICE_IPS));
    rules.push(n::NAT_OUTPUT, vec![], vmap(&IP_KEY, n::SERVICE_IPS));
    rules.push(n::NAT_POSTROUTING, vec![], jump(n::MASQUERADING));
    for chain in [n::FILTER_INPUT, n::FILTER_OUTPUT_PRE_DNAT] {
        rules.push(chain, new(), jump(n::FIREWALL_CHECK));
        rules.push(chain, new(), vmap(&IP_KEY, n::NO_ENDPOINT_SERVICES));
    }
    rules.push(
        n::FILTER_INPUT,
        vec![
            Match::CtState(CtState::New),
            in_set(&[Field::Daddr], r::BOUND_ADDRESSES, false),
        ],
        jump(r::IPVS_FILTER),
    );
    if cfg.node.drop_invalid {
        rules.push(
            n::FILTER_FORWARD,
            vec![Match::CtState(CtState::Invalid)],
            vec![Statement::Verdict(Verdict::Drop)],
        );
    }
}

/// Traffic from this node's pods, or (`negate`) from anywhere else; `None` without detection.
fn from_local_pod(
    cfg: &ModeConfig,
    family: crate::cluster::IpFamily,
    node: &NodeContext,
    negate: bool,
) -> Option<Match> {
    match cfg.node.detect_local.resolve(family, &node.pod_cidrs) {
        Local::Interface(name) => Some(Match::Iifname { name, negate }),
        Local::Cidr(net) => Some(Match::Net {
            field: Field::Saddr,
            net,
            negate,
        }),
        Local::None => None,
    }
}

fn treatments(
    rules: &mut Ruleset,
    cfg: &ModeConfig,
    family: crate::cluster::IpFamily,
    node: &NodeContext,
) {
    let mark = cfg.node.masquerade_mark;
    let set_mark = || vec![Statement::MarkOr(mark)];
    let from_node = || vec![Match::FibLocal { source: true }];
    // ClusterIP. Without detect-local, what the node sends must still be masqueraded: its
    // source is the service address itself (bound on the link), which an endpoint on another
    // node cannot answer.
    if cfg.node.masquerade_all {
        rules.push(n::CLUSTER_IP, vec![], set_mark());
    } else if let Some(m) = from_local_pod(cfg, family, node, true) {
        rules.push(n::CLUSTER_IP, vec![m], set_mark());
    } else {
        rules.push(n::CLUSTER_IP, from_node(), set_mark());
    }
    rules.push(n::EXTERNAL, vec![], set_mark());
    rules.push(n::EXTERNAL_LOCAL, from_node(), set_mark());

    rules.push(
        n::MASQUERADING,
        vec![Match::MarkSet(mark)],
        vec![Statement::MarkXor(mark), Statement::Masquerade],
    );
    rules.push(
        n::MASQUERADING,
        vec![in_set(
            &[Field::Saddr, Field::Daddr, Field::L4Proto, Field::Dport],
            n::HAIRPIN,
            false,
        )],
        vec![Statement::Masquerade],
    );
}

fn filters(
    rules: &mut Ruleset,
    cfg: &ModeConfig,
    family: crate::cluster::IpFamily,
    node: &NodeContext,
) {
    let verdict = |v: Verdict| vec![Statement::Verdict(v)];
    let (matches, statements) = skeleton::firewall_check_rule();
    rules.push(n::FIREWALL_CHECK, matches, statements);
    // Only the port protocols: a ping to a Service address still answers, as it does under
    // upstream's IPVS mode.
    for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
        rules.push(
            r::IPVS_FILTER,
            vec![
                Match::L4Proto(proto),
                in_set(&IP_KEY, r::SERVICE_PORTS, true),
            ],
            verdict(goto(n::REJECT_CHAIN)),
        );
    }
    rules.push(
        r::NO_LOCAL_ENDPOINT,
        vec![Match::FibLocal { source: true }],
        verdict(Verdict::Return),
    );
    if let Some(m) = from_local_pod(cfg, family, node, false) {
        rules.push(r::NO_LOCAL_ENDPOINT, vec![m], verdict(Verdict::Return));
    }
    rules.push(r::NO_LOCAL_ENDPOINT, vec![], verdict(Verdict::Drop));
    for (matches, statements) in skeleton::reject_rules() {
        rules.push(n::REJECT_CHAIN, matches, statements);
    }
}
