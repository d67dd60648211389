//! Planner behaviour on small snapshots, stated as the rules a chain must hold.

use super::plan;
use crate::cluster::{IpFamily, Protocol, Snapshot};
use crate::dataplane::iptables::mode_config::ModeConfig;
use crate::dataplane::iptables::names::{self as n, ChainName, PortChain};
use crate::dataplane::iptables::render::rule_words;
use crate::dataplane::iptables::ruleset::{Ruleset, Table};
use crate::dataplane::node::NodePolicy;
use crate::testing::snapshots::{Svc, node, snapshot, svc};

fn v4(services: Vec<Svc>) -> (Snapshot, Ruleset) {
    v4_with(services, &ModeConfig::default())
}

fn v4_with(services: Vec<Svc>, cfg: &ModeConfig) -> (Snapshot, Ruleset) {
    let snap = snapshot(node(), services);
    let r = plan(&snap, cfg, IpFamily::V4);
    (snap, r)
}

/// The rules of a chain as text after `-A CHAIN`.
fn chain(r: &Ruleset, table: Table, name: &str) -> Vec<String> {
    let name = ChainName::parse(name).expect("a chain name");
    r.chain(table, &name)
        .unwrap_or_else(|| panic!("{name} missing in {table:?}"))
        .iter()
        .map(|rule| {
            let mut s = String::new();
            rule_words(&mut s, rule, IpFamily::V4);
            s.trim_start().to_string()
        })
        .collect()
}

fn has_chain(r: &Ruleset, table: Table, name: &str) -> bool {
    r.chain(table, &ChainName::parse(name).unwrap()).is_some()
}

fn spn(s: &Svc) -> &crate::cluster::ServicePortName {
    &s.port.name
}

#[test]
fn a_service_without_endpoints_is_rejected_everywhere_and_gets_no_nat_chain() {
    let s = svc("ns/empty", "10.96.0.5", 80)
        .node_port(30005)
        .external("192.0.2.5");
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&s));
    let (_, r) = v4(vec![s]);
    assert_eq!(
        chain(&r, Table::Filter, n::SERVICES),
        [
            "-d 10.96.0.5/32 -p tcp -m comment --comment \"ns/empty has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with tcp-reset"
        ]
    );
    assert_eq!(
        chain(&r, Table::Filter, n::EXTERNAL_SERVICES),
        [
            "-d 192.0.2.5/32 -p tcp -m comment --comment \"ns/empty has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with tcp-reset",
            "-p tcp -m comment --comment \"ns/empty has no endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30005 -j REJECT --reject-with tcp-reset",
        ]
    );
    assert!(!has_chain(&r, Table::Nat, svc_chain.as_str()));
    assert_eq!(chain(&r, Table::Nat, n::NODEPORTS), Vec::<String>::new());
}

#[test]
fn a_udp_service_without_endpoints_is_refused_by_icmp_not_by_a_reset() {
    let s = svc("ns/dns", "10.96.0.53", 53).proto(Protocol::Udp);
    let (_, r) = v4(vec![s]);
    assert_eq!(
        chain(&r, Table::Filter, n::SERVICES),
        [
            "-d 10.96.0.53/32 -p udp -m comment --comment \"ns/dns has no endpoints\" -m udp --dport 53 -j REJECT"
        ]
    );
}

#[test]
fn endpoints_are_picked_with_upstreams_probabilities() {
    let s = svc("ns/web", "10.96.0.10", 80)
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b")
        .ep("10.244.3.2", 8080, "node-c");
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&s));
    let (_, r) = v4(vec![s]);
    let rules = chain(&r, Table::Nat, svc_chain.as_str());
    assert_eq!(rules.len(), 3);
    assert!(
        rules[0].contains("--probability 0.3333333333 -j KUBE-SEP-"),
        "{}",
        rules[0]
    );
    assert!(
        rules[1].contains("--probability 0.5000000000 -j KUBE-SEP-"),
        "{}",
        rules[1]
    );
    assert!(!rules[2].contains("statistic"), "{}", rules[2]);
    assert!(
        rules[2].contains("\"ns/web -> 10.244.3.2:8080\""),
        "{}",
        rules[2]
    );
}

#[test]
fn client_ip_affinity_checks_then_sets_the_recent_list_of_the_endpoint() {
    let s = svc("ns/sticky", "10.96.0.11", 80)
        .affinity(600)
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b");
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&s));
    let (snap, r) = v4(vec![s]);
    let view = snap
        .ports
        .values()
        .next()
        .unwrap()
        .family(IpFamily::V4)
        .unwrap();
    let sep = n::endpoint_chain(
        &snap.ports.keys().next().unwrap().clone(),
        &view.endpoints[0],
    );
    let rules = chain(&r, Table::Nat, svc_chain.as_str());
    assert_eq!(rules.len(), 4);
    assert!(rules[0].ends_with(&format!(
        "-m recent --name {sep} --mask 255.255.255.255 --rsource --rcheck --seconds 600 --reap -j {sep}"
    )), "{}", rules[0]);
    assert_eq!(
        chain(&r, Table::Nat, sep.as_str()),
        [
            "-s 10.244.1.2/32 -m comment --comment \"ns/sticky\" -j KUBE-MARK-MASQ".to_string(),
            format!(
                "-p tcp -m comment --comment \"ns/sticky\" -m recent --name {sep} --mask 255.255.255.255 --rsource --set -j DNAT --to-destination 10.244.1.2:8080"
            ),
        ]
    );
}

#[test]
fn internal_local_policy_without_a_local_endpoint_drops_cluster_ip_traffic() {
    let s = svc("ns/itp", "10.96.0.12", 80)
        .internal_local()
        .ep("10.244.2.2", 8080, "node-b");
    let (_, r) = v4(vec![s]);
    assert_eq!(
        chain(&r, Table::Filter, n::SERVICES),
        [
            "-d 10.96.0.12/32 -p tcp -m comment --comment \"ns/itp has no local endpoints\" -m tcp --dport 80 -j DROP"
        ]
    );
    let nat = chain(&r, Table::Nat, n::SERVICES);
    assert_eq!(nat.len(), 1, "only the NodePort rule: {nat:?}");
}

#[test]
fn external_local_policy_short_circuits_pods_and_the_host_and_drops_without_local_endpoints() {
    let cfg = crate::dataplane::iptables::golden_tests::settings("cluster-cidr");
    let with_local = svc("ns/etp", "10.96.0.13", 80)
        .node_port(30013)
        .external_local()
        .ep("10.244.1.2", 8080, "node-a")
        .ep("10.244.2.2", 8080, "node-b");
    let ext = n::port_chain(PortChain::External, spn(&with_local));
    let svl = n::port_chain(PortChain::Local, spn(&with_local));
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&with_local));
    let (_, r) = v4_with(vec![with_local], &cfg);
    let rules = chain(&r, Table::Nat, ext.as_str());
    assert_eq!(rules.len(), 4, "{rules:?}");
    assert!(
        rules[0].starts_with("-s 10.244.0.0/16 ") && rules[0].ends_with(&format!("-j {svc_chain}"))
    );
    assert!(rules[1].contains("--src-type LOCAL -j KUBE-MARK-MASQ"));
    assert_eq!(rules[3], format!("-j {svl}"));
    assert_eq!(
        chain(&r, Table::Nat, svl.as_str()).len(),
        1,
        "one local endpoint"
    );

    let remote_only = svc("ns/etp", "10.96.0.13", 80)
        .node_port(30013)
        .external_local()
        .ep("10.244.2.2", 8080, "node-b");
    let (_, r) = v4_with(vec![remote_only], &cfg);
    assert_eq!(
        chain(&r, Table::Nat, ext.as_str()).len(),
        3,
        "no jump to KUBE-SVL"
    );
    assert_eq!(
        chain(&r, Table::Filter, n::EXTERNAL_SERVICES),
        [
            "-p tcp -m comment --comment \"ns/etp has no local endpoints\" -m addrtype --dst-type LOCAL -m tcp --dport 30013 -j DROP"
        ]
    );
}

#[test]
fn the_masquerade_bit_and_masquerade_all_come_from_the_config() {
    let cfg = ModeConfig {
        node: NodePolicy {
            masquerade_mark: 1 << 3,
            masquerade_all: true,
            ..ModeConfig::default().node
        },
        ..ModeConfig::default()
    };
    let s = svc("ns/web", "10.96.0.10", 80).ep("10.244.2.2", 8080, "node-b");
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&s));
    let (_, r) = v4_with(vec![s], &cfg);
    assert_eq!(
        chain(&r, Table::Nat, n::MARK_MASQ),
        ["-j MARK --or-mark 0x8"]
    );
    assert_eq!(
        chain(&r, Table::Nat, n::POSTROUTING)[0],
        "-m mark ! --mark 0x8/0x8 -j RETURN"
    );
    assert!(chain(&r, Table::Nat, svc_chain.as_str())[0].ends_with("-j KUBE-MARK-MASQ"));
}

#[test]
fn large_clusters_lose_per_endpoint_comments() {
    let mut services = Vec::new();
    for i in 0..101u16 {
        let mut s = svc(
            &format!("ns/s{i}"),
            &format!("10.96.{}.{}", i / 200, i % 200 + 1),
            80,
        );
        for e in 0..10u16 {
            s = s.ep(&format!("10.244.{}.{}", e, i % 250 + 1), 8080, "node-b");
        }
        services.push(s);
    }
    let svc_chain = n::port_chain(PortChain::Cluster, spn(&services[0]));
    let (_, r) = v4(services);
    let rules = chain(&r, Table::Nat, svc_chain.as_str());
    assert!(rules.iter().all(|r| !r.contains("comment")), "{rules:?}");
    // Capture rules keep theirs.
    assert!(chain(&r, Table::Nat, n::SERVICES)[0].contains("cluster IP"));
}

#[test]
fn source_ranges_go_through_the_firewall_chain_and_unmatched_traffic_is_dropped_in_filter() {
    let s = svc("ns/lb", "10.96.0.14", 443)
        .lb("192.0.2.14")
        .range("198.51.100.0/24")
        .range("10.0.0.0/24")
        .ep("10.244.2.2", 8443, "node-b");
    let fw = n::port_chain(PortChain::Firewall, spn(&s));
    let ext = n::port_chain(PortChain::External, spn(&s));
    let (_, r) = v4(vec![s]);
    let rules = chain(&r, Table::Nat, fw.as_str());
    // The node (10.0.0.11) is inside 10.0.0.0/24: the LoadBalancer IP is allowed as a source.
    assert_eq!(rules.len(), 4, "{rules:?}");
    assert!(rules[2].starts_with("-s 192.0.2.14/32 ") && rules[2].ends_with(&format!("-j {ext}")));
    assert!(!rules[3].contains(" -j "));
    assert_eq!(
        chain(&r, Table::Filter, n::PROXY_FIREWALL),
        [format!(
            "-d 192.0.2.14/32 -p tcp -m comment --comment \"ns/lb traffic not accepted by {fw}\" -m tcp --dport 443 -j DROP"
        )]
    );
}

#[test]
fn reusing_the_previous_plan_gives_the_fresh_plan_and_the_same_partial_input() {
    use crate::dataplane::iptables::diff;
    use crate::dataplane::iptables::plan::plan_reusing;
    let services = || {
        vec![
            svc("ns/a", "10.96.0.1", 80).ep("10.244.1.2", 8080, "node-a"),
            svc("ns/b", "10.96.0.2", 80)
                .node_port(30002)
                .ep("10.244.2.2", 8080, "node-b")
                .ep("10.244.2.3", 8080, "node-b"),
            svc("ns/c", "10.96.0.3", 80)
                .affinity(60)
                .ep("10.244.3.2", 80, "node-c"),
        ]
    };
    let before = snapshot(node(), services());
    let mut changed = services();
    changed[1].endpoints.pop();
    changed.remove(2);
    changed.push(svc("ns/d", "10.96.0.4", 53).ep("10.244.1.9", 53, "node-a"));
    // Ports "a" (and the node) are the same values; `snapshot` builds new Arcs, so share them
    // as the tracker does for unchanged ports.
    let mut after = snapshot(node(), changed);
    let mut ports = (*after.ports).clone();
    for (name, state) in before.ports.iter() {
        if ports.get(name) == Some(state) {
            ports.insert(name.clone(), state.clone());
        }
    }
    after.ports = std::sync::Arc::new(ports);
    after.node = before.node.clone();

    let cfg = ModeConfig::default();
    let old = plan(&before, &cfg, IpFamily::V4);
    let reused = plan_reusing(&after, &cfg, IpFamily::V4, Some(&old));
    let fresh = plan(&after, &cfg, IpFamily::V4);
    assert_eq!(reused, fresh);
    let a = before.ports.keys().next().unwrap();
    assert!(
        std::sync::Arc::ptr_eq(&old.ports[a], &reused.ports[a]),
        "port a reused"
    );
    assert_eq!(diff::partial(&old, &reused), diff::partial(&old, &fresh));
    let p = diff::partial(&old, &reused);
    assert!(
        p.text.contains("-X KUBE-SVC-"),
        "ns/c's chains deleted:\n{}",
        p.text
    );
    assert!(
        !p.text.contains(":KUBE-SVC-") || !p.text.contains("10.244.1.2"),
        "{}",
        p.text
    );
}
