//! `explain` over a real kernel (root, a fresh network namespace per test): the nftables
//! mode's table, read back through the adopting reader, explains packets exactly as the plan
//! does, a client's affinity entry sends it to its endpoint, and a change another program
//! makes to our rules shows as drift. The iptables mode's counterpart is
//! `tests/explain_iptables.rs`.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft in their namespace"
)]

use support::example_cluster;
use support::host;

use example_cluster::{PACKETS, assert_explained_alike, reached, synced_example};
use host::NetNs;
use kube_proxy_rs::cli::explain::{Plan as _, Request, RulesFrom, explain, render};
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::inspect::table as kernel;
use kube_proxy_rs::dataplane::nftables::inspect::Planned;
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane};
use kube_proxy_rs::nft::{Family, backend};

/// The nftables mode's dataplane under `cfg`, programming `ns`.
fn dataplane(ns: &NetNs, cfg: &ModeConfig) -> NftablesDataplane {
    NftablesDataplane::new(
        cfg.clone(),
        backend::for_encoder(NftablesEncoder::default(), Some(&ns.name)),
        Drift::new(),
    )
}

#[test]
fn the_kernels_table_explains_packets_as_the_plan_does_and_drift_shows() {
    let ns = NetNs::new("explain-live");
    let cfg = ModeConfig::default();
    let mut dp = dataplane(&ns, &cfg);
    let snap = synced_example(&mut dp);
    let planned = Planned::new(&snap, &cfg);
    let read = || {
        kernel::read_nftables(NftablesEncoder::default(), Some(&ns.name), Family::Ip)
            .expect("reads")
            .expect("our table is there")
    };
    let live = read();
    let want = &planned.0[IpFamily::V4.index()];
    assert!(kernel::drift(Some(&live), want).is_empty(), "just synced");
    for (to, from) in PACKETS {
        let request = Request::parse(to, *from, None).unwrap();
        assert_explained_alike(
            &snap,
            &cfg.node,
            &request,
            planned.rules(IpFamily::V4),
            &live,
            &format!("{to} from {from:?}"),
        );
    }

    // Another program empties one of our sets: the ClusterIP of an undefined port is no longer
    // refused, and the drift says what a sync would put back.
    ns.output(
        "nft",
        &["flush", "set", "ip", "kube-proxy-rs", "cluster-ips"],
    );
    let live = read();
    let drift = kernel::drift(Some(&live), want);
    assert!(
        drift[0].contains("operations would bring the kernel to the plan"),
        "{drift:?}"
    );
    assert!(drift.iter().any(|l| l.contains("cluster-ips")), "{drift:?}");
    let request = Request::parse("10.96.1.10:81", None, None).unwrap();
    let before = explain(
        &snap,
        &cfg.node,
        planned.rules(IpFamily::V4),
        RulesFrom::Planned,
        &request,
    )
    .unwrap();
    let after = explain(&snap, &cfg.node, &live, RulesFrom::Kernel, &request).unwrap();
    assert_ne!(before.outcome, after.outcome, "{}", render::text(&after));

    // Our table gone: explained as untouched, and the drift says so.
    ns.output("nft", &["delete", "table", "ip", "kube-proxy-rs"]);
    let gone = kernel::read_nftables(NftablesEncoder::default(), Some(&ns.name), Family::Ip)
        .expect("reads");
    assert!(gone.is_none());
    assert!(kernel::drift(None, want)[0].contains("not in the kernel"));
}

#[test]
fn a_clients_affinity_entry_in_the_kernel_sends_it_to_its_endpoint() {
    use kube_proxy_rs::dataplane::nftables::inspect::affinity;
    use kube_proxy_rs::nft::ruleset::{Match, Statement};

    let ns = NetNs::new("explain-aff");
    let cfg = ModeConfig::default();
    let mut dp = dataplane(&ns, &cfg);
    let snap = synced_example(&mut dp);
    let read = || {
        kernel::read_nftables(NftablesEncoder::default(), Some(&ns.name), Family::Ip)
            .expect("reads")
            .expect("our table is there")
    };
    // default/web-sticky (10.96.1.14:80, ClientIP for 3 h) over 10.244.1.10 and 10.244.2.10.
    let request = Request::parse("10.96.1.14:80", Some("10.244.1.77"), None).unwrap();
    let packet = kube_proxy_rs::cli::explain::packet(&snap, &cfg.node, &request).unwrap();
    let mut sets =
        affinity::NftablesSets::new(NftablesEncoder::default(), Some(&ns.name), Family::Ip);
    let ask = |table: &kube_proxy_rs::nft::Ruleset| {
        explain(&snap, &cfg.node, table, RulesFrom::Kernel, &request).unwrap()
    };

    let mut live = read();
    let found =
        affinity::add_entries(&snap, &packet, &mut live, &mut sets).expect("reads the sets");
    assert_eq!(found, Some(vec![]), "no client has connected yet");
    assert_eq!(ask(&live).outcome.endpoints.len(), 2);

    // The set remembering 10.244.2.10's clients, as the kernel fills it on a connection.
    let set = live
        .chains
        .values()
        .flat_map(|c| &c.rules)
        .find_map(|r| {
            let to_b = r.statements.iter().any(|s| {
                matches!(s, Statement::DnatTo { addr, port: 8080, .. }
                    if addr.to_string() == "10.244.2.10")
            });
            r.matches.iter().find_map(|m| match m {
                Match::InSet { set, .. } if to_b && set.as_str().starts_with("affinity-") => {
                    Some(set.as_str().to_owned())
                }
                _ => None,
            })
        })
        .expect("an affinity set for 10.244.2.10");
    for client in ["10.244.1.77", "10.244.1.78"] {
        ns.output(
            "nft",
            &[
                "add",
                "element",
                "ip",
                "kube-proxy-rs",
                &set,
                "{",
                client,
                "}",
            ],
        );
    }
    let mut live = read();
    assert_eq!(
        kernel::drift(Some(&live), &{
            let planned = Planned::new(&snap, &cfg);
            planned.0[IpFamily::V4.index()].clone()
        }),
        Vec::<String>::new(),
        "clients in an affinity set are not drift"
    );
    let found =
        affinity::add_entries(&snap, &packet, &mut live, &mut sets).expect("reads the sets");
    assert_eq!(found, Some(vec!["10.244.2.10:8080".parse().unwrap()]));
    let e = ask(&live);
    assert_eq!(reached(&e), ["10.244.2.10:8080"], "{}", render::text(&e));
    let why = kube_proxy_rs::cli::explain::affinity_reason(
        e.packet.source,
        found.as_deref().unwrap(),
        10800,
    );
    assert!(
        why.contains("remembers 10.244.1.77 for 10.244.2.10:8080"),
        "{why}"
    );
}

#[test]
fn other_tables_base_chains_are_listed_beside_ours() {
    use kube_proxy_rs::nft::ruleset::Hook;

    let ns = NetNs::new("explain-other");
    let mut dp = dataplane(&ns, &ModeConfig::default());
    synced_example(&mut dp);
    // A firewall's table: a forward chain that drops what it does not accept.
    ns.output("nft", &["add", "table", "inet", "fw"]);
    ns.output(
        "nft",
        &[
            "add",
            "chain",
            "inet",
            "fw",
            "filter_fw",
            "{",
            "type",
            "filter",
            "hook",
            "forward",
            "priority",
            "-5",
            ";",
            "policy",
            "drop",
            ";",
            "}",
        ],
    );
    ns.output("nft", &["add", "chain", "inet", "fw", "helper"]);
    let chains = kernel::base_chains(NftablesEncoder::default(), Some(&ns.name))
        .expect("lists")
        .expect("the netlink encoder lists base chains");
    let fw: Vec<_> = chains.iter().filter(|c| c.table == "fw").collect();
    assert_eq!(fw.len(), 1, "regular chains are not listed: {chains:?}");
    assert_eq!(
        (
            fw[0].family,
            fw[0].chain.as_str(),
            fw[0].hook,
            fw[0].priority,
            fw[0].drops
        ),
        ("inet", "filter_fw", Hook::Forward, -5, true)
    );
    assert!(
        chains
            .iter()
            .any(|c| c.family == "ip" && c.table == "kube-proxy-rs"),
        "ours is listed too (the caller leaves it out): {chains:?}"
    );
}
