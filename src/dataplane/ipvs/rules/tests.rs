//! The helper table for small snapshots: which treatment and guard each virtual service gets,
//! what is masqueraded under each detect-local setting, source ranges, hairpin, the VIP port
//! filter.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::plan as rules;
use crate::cluster::{IpFamily, Protocol};
use crate::dataplane::ipvs::backend::link::addresses::wanted;
use crate::dataplane::ipvs::mode_config::ModeConfig;
use crate::dataplane::ipvs::names::rules as r;
use crate::dataplane::ipvs::plan::{HostAddresses, plan};
use crate::dataplane::nft_table::names as n;
use crate::dataplane::node::DetectLocal;
use crate::nft::Name;
use crate::nft::ruleset::{Data, Field, Match, Ruleset, Statement, Tuple, Value, Verdict};
use crate::testing::snapshots::{Svc, ip, node, snapshot, svc};

fn table(services: Vec<Svc>, cfg: &ModeConfig) -> Ruleset {
    let snap = snapshot(node(), services);
    let host = HostAddresses(["10.0.0.11".parse().unwrap()].into());
    let d = plan(&snap, cfg, IpFamily::V4, &host);
    let bound = wanted(&d.addresses, &host.0);
    rules(&d, cfg, &snap.node, &bound)
}

fn frontend(addr: &str, port: u16) -> Tuple {
    Tuple::new(&[
        Value::Addr(ip(addr)),
        Value::Proto(Protocol::Tcp),
        Value::Port(port),
    ])
}

/// The verdict element `key` has in map `map`, if any.
fn verdict(t: &Ruleset, map: &str, key: &Tuple) -> Option<Verdict> {
    let set = &t.sets[&Name::parse(map).unwrap()];
    set.elements.get(key).map(|e| match &e.data {
        Data::Verdict(v) => v.clone(),
        other => panic!("{map} holds {other:?}"),
    })
}

fn goto(chain: &str) -> Verdict {
    Verdict::Goto(Name::parse(chain).unwrap())
}

fn has(t: &Ruleset, set: &str, key: &Tuple) -> bool {
    t.sets[&Name::parse(set).unwrap()]
        .elements
        .contains_key(key)
}

fn chain(t: &Ruleset, name: &str) -> Vec<(Vec<Match>, Vec<Statement>)> {
    t.chains[&Name::parse(name).unwrap()]
        .rules
        .iter()
        .map(|r| (r.matches.clone(), r.statements.clone()))
        .collect()
}

fn with_detect_local(d: DetectLocal) -> ModeConfig {
    let mut cfg = ModeConfig::default();
    cfg.node.detect_local = d;
    cfg
}

#[test]
fn a_cluster_ip_with_endpoints_is_treated_as_a_cluster_ip_and_has_no_guard() {
    let t = table(
        vec![svc("ns/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")],
        &ModeConfig::default(),
    );
    let f = frontend("10.96.0.10", 80);
    assert_eq!(verdict(&t, n::SERVICE_IPS, &f), Some(goto(n::CLUSTER_IP)));
    assert!(has(&t, r::SERVICE_PORTS, &f));
    assert_eq!(verdict(&t, n::NO_ENDPOINT_SERVICES, &f), None);
    let bound = Tuple::new(&[Value::Addr(ip("10.96.0.10"))]);
    assert!(has(&t, r::BOUND_ADDRESSES, &bound));
    let comment = t.sets[&Name::fixed(n::SERVICE_IPS)].elements[&f]
        .comment
        .clone();
    assert_eq!(comment.unwrap().as_str(), "ns/web");
}

#[test]
fn guards_refuse_services_without_endpoints_and_drop_local_policies_without_a_local_one() {
    let t = table(
        vec![
            svc("ns/empty", "10.96.0.1", 80).node_port(30001),
            svc("ns/itp", "10.96.0.2", 80)
                .internal_local()
                .ep("10.244.2.5", 8080, "node-b"),
            svc("ns/etp", "10.96.0.3", 80)
                .external("192.0.2.3")
                .node_port(30003)
                .external_local()
                .ep("10.244.2.6", 8080, "node-b"),
        ],
        &ModeConfig::default(),
    );
    let reject = Some(goto(n::REJECT_CHAIN));
    assert_eq!(
        verdict(&t, n::NO_ENDPOINT_SERVICES, &frontend("10.96.0.1", 80)),
        reject
    );
    assert_eq!(
        verdict(&t, n::NO_ENDPOINT_SERVICES, &frontend("10.0.0.11", 30001)),
        reject
    );
    assert_eq!(
        verdict(&t, n::NO_ENDPOINT_SERVICES, &frontend("10.96.0.2", 80)),
        Some(Verdict::Drop)
    );
    // externalTrafficPolicy Local: only the external frontends, and only from outside.
    assert_eq!(
        verdict(&t, n::NO_ENDPOINT_SERVICES, &frontend("10.96.0.3", 80)),
        None
    );
    for f in [frontend("192.0.2.3", 80), frontend("10.0.0.11", 30003)] {
        assert_eq!(
            verdict(&t, n::NO_ENDPOINT_SERVICES, &f),
            Some(goto(r::NO_LOCAL_ENDPOINT))
        );
        assert_eq!(
            verdict(&t, n::SERVICE_IPS, &f),
            Some(goto(n::EXTERNAL_LOCAL))
        );
    }
    let outside = chain(&t, r::NO_LOCAL_ENDPOINT);
    assert_eq!(
        outside.first().unwrap().0,
        vec![Match::FibLocal { source: true }],
        "the node itself goes on to the cluster's endpoints"
    );
    assert_eq!(
        outside.last().unwrap().1,
        vec![Statement::Verdict(Verdict::Drop)]
    );
}

#[test]
fn external_frontends_with_cluster_policy_are_always_masqueraded_local_ones_only_from_the_node() {
    let t = table(
        vec![
            svc("ns/cl", "10.96.0.4", 80)
                .lb("203.0.113.4")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &ModeConfig::default(),
    );
    assert_eq!(
        verdict(&t, n::SERVICE_IPS, &frontend("203.0.113.4", 80)),
        Some(goto(n::EXTERNAL))
    );
    let mark = ModeConfig::default().node.masquerade_mark;
    assert_eq!(
        chain(&t, n::EXTERNAL),
        vec![(vec![], vec![Statement::MarkOr(mark)])]
    );
    assert_eq!(
        chain(&t, n::EXTERNAL_LOCAL),
        vec![(
            vec![Match::FibLocal { source: true }],
            vec![Statement::MarkOr(mark)]
        )]
    );
    let masq = chain(&t, n::MASQUERADING);
    assert_eq!(
        masq[0],
        (
            vec![Match::MarkSet(mark)],
            vec![Statement::MarkXor(mark), Statement::Masquerade]
        )
    );
}

#[test]
fn cluster_ip_masquerading_follows_masquerade_all_then_detect_local_then_the_nodes_own_traffic() {
    let svcs = || vec![svc("ns/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")];
    let mut all = ModeConfig::default();
    all.node.masquerade_all = true;
    let mark = all.node.masquerade_mark;
    let marks = |t: &Ruleset| chain(t, n::CLUSTER_IP);
    assert_eq!(
        marks(&table(svcs(), &all)),
        vec![(vec![], vec![Statement::MarkOr(mark)])]
    );
    let cidr = table(svcs(), &with_detect_local(DetectLocal::NodeCidr));
    assert_eq!(
        marks(&cidr),
        vec![(
            vec![Match::Net {
                field: Field::Saddr,
                net: "10.244.1.0/24".parse().unwrap(),
                negate: true
            }],
            vec![Statement::MarkOr(mark)]
        )]
    );
    let none = table(svcs(), &with_detect_local(DetectLocal::None));
    assert_eq!(
        marks(&none),
        vec![(
            vec![Match::FibLocal { source: true }],
            vec![Statement::MarkOr(mark)]
        )]
    );
}

#[test]
fn source_ranges_allow_only_their_networks_on_the_load_balancer_ip() {
    let t = table(
        vec![
            svc("ns/fw", "10.96.0.5", 80)
                .lb("203.0.113.5")
                .range("198.51.100.0/24")
                .range("198.51.100.128/25")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &ModeConfig::default(),
    );
    let lb = frontend("203.0.113.5", 80);
    assert!(has(&t, n::FIREWALL_IPS, &lb));
    assert!(!has(&t, n::FIREWALL_IPS, &frontend("10.96.0.5", 80)));
    let allow = &t.sets[&Name::fixed(n::FIREWALL_ALLOW)];
    assert!(allow.decl.interval);
    let keys: Vec<&Tuple> = allow.elements.keys().collect();
    let want = Tuple::new(&[
        Value::Addr(ip("203.0.113.5")),
        Value::Proto(Protocol::Tcp),
        Value::Port(80),
        Value::Net("198.51.100.0/24".parse().unwrap()),
    ]);
    assert_eq!(keys, vec![&want], "nested ranges fold to the outermost");
}

#[test]
fn local_endpoints_reaching_themselves_are_masqueraded() {
    let t = table(
        vec![
            svc("ns/web", "10.96.0.10", 80)
                .ep("10.244.1.7", 8080, "node-a")
                .ep("10.244.2.5", 8080, "node-b"),
        ],
        &ModeConfig::default(),
    );
    let hairpin: BTreeSet<&Tuple> = t.sets[&Name::fixed(n::HAIRPIN)].elements.keys().collect();
    let local = Tuple::new(&[
        Value::Addr(ip("10.244.1.7")),
        Value::Addr(ip("10.244.1.7")),
        Value::Proto(Protocol::Tcp),
        Value::Port(8080),
    ]);
    assert_eq!(hairpin, [&local].into());
}

#[test]
fn new_connections_to_a_bound_address_on_a_port_without_virtual_service_are_refused() {
    let t = table(
        vec![svc("ns/web", "10.96.0.10", 80).ep("10.244.2.5", 8080, "node-b")],
        &ModeConfig::default(),
    );
    let input = chain(&t, n::FILTER_INPUT);
    let to_filter = input
        .iter()
        .find(|(_, s)| {
            *s == vec![Statement::Verdict(Verdict::Jump(Name::fixed(
                r::IPVS_FILTER,
            )))]
        })
        .expect("input jumps to the VIP port filter");
    assert!(to_filter.0.contains(&Match::InSet {
        key: vec![Field::Daddr],
        set: Name::fixed(r::BOUND_ADDRESSES),
        negate: false,
    }));
    let filter = chain(&t, r::IPVS_FILTER);
    let protocols: Vec<&Match> = filter.iter().map(|(m, _)| &m[0]).collect();
    assert_eq!(
        protocols,
        [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .map(Match::L4Proto)
            .iter()
            .collect::<Vec<_>>(),
        "ICMP to a Service address still answers"
    );
    for (m, s) in &filter {
        assert!(m.contains(&Match::InSet {
            key: vec![Field::Daddr, Field::L4Proto, Field::Dport],
            set: Name::fixed(r::SERVICE_PORTS),
            negate: true,
        }));
        assert_eq!(s, &vec![Statement::Verdict(goto(n::REJECT_CHAIN))]);
    }
}

#[test]
fn an_external_ip_the_node_already_has_is_not_bound_so_its_host_ports_stay_reachable() {
    let t = table(
        vec![svc("ns/web", "10.96.0.10", 80).external("10.0.0.11").ep(
            "10.244.2.5",
            8080,
            "node-b",
        )],
        &ModeConfig::default(),
    );
    let bound: Vec<IpAddr> = t.sets[&Name::fixed(r::BOUND_ADDRESSES)]
        .elements
        .keys()
        .map(|k| match k.values()[0] {
            Value::Addr(a) => a,
            ref other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(bound, vec![ip("10.96.0.10")]);
}

#[test]
fn the_table_renders_and_every_rule_refers_to_a_declared_set_or_chain() {
    let t = table(
        vec![
            svc("ns/a", "10.96.0.1", 80).node_port(30001),
            svc("ns/b", "10.96.0.2", 80)
                .lb("203.0.113.2")
                .range("198.51.100.0/24")
                .external_local()
                .ep("10.244.1.7", 8080, "node-a"),
        ],
        &with_detect_local(DetectLocal::NodeCidr),
    );
    let text = crate::nft::render::render(&crate::nft::diff::diff(&Ruleset::empty(t.family), &t));
    for chain in t.chains.keys() {
        assert!(
            text.contains(&format!("add chain ip kube-proxy-rs {chain}")),
            "{chain}\n{text}"
        );
    }
    for c in t.chains.values() {
        for rule in &c.rules {
            for s in &rule.statements {
                if let Statement::Verdict(Verdict::Jump(to) | Verdict::Goto(to)) = s {
                    assert!(t.chains.contains_key(to), "{to} is not a chain");
                }
                if let Statement::VerdictMap { map, .. } = s {
                    assert!(t.sets.contains_key(map), "{map} is not a map");
                }
            }
            for m in &rule.matches {
                if let Match::InSet { set, .. } = m {
                    assert!(t.sets.contains_key(set), "{set} is not a set");
                }
            }
        }
    }
}
