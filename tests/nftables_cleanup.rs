//! `--cleanup` against the real kernel in a fresh network namespace (root): our tables,
//! upstream's nftables table and upstream's `KUBE-*` iptables chains (nft and legacy back ends)
//! go; other tables and chains, and kubelet's, stay.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft and iptables"
)]

use support::host;

use std::path::Path;

use host::NetNs;
use kube_proxy_rs::cli::load_manifests;
use kube_proxy_rs::cluster::{Changes, Features};
use kube_proxy_rs::dataplane::nftables::cleanup::removed_table;
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane};
use kube_proxy_rs::dataplane::tool::Launcher;
use kube_proxy_rs::dataplane::{Dataplane, cleanup};
use kube_proxy_rs::nft::NftCommand;

fn sh(ns: &NetNs, line: &str) {
    let words: Vec<&str> = line.split(' ').collect();
    ns.output(words[0], &words[1..]);
}

#[test]
fn cleanup_removes_ours_and_upstreams_leftovers_and_nothing_else() {
    let ns = NetNs::new("nfa-clean");
    let snap = load_manifests(Path::new("examples/cluster"), "node-a", Features::default())
        .expect("example loads")
        .snapshot;
    NftablesDataplane::new(
        ModeConfig::default(),
        NftCommand::in_netns(&ns.name),
        Drift::new(),
    )
    .sync(&snap, &Changes::default(), true)
    .expect("program ours");
    // Upstream's nftables mode, as far as the name goes, and someone else's table.
    for line in [
        "nft add table ip kube-proxy",
        "nft add chain ip kube-proxy services",
        "nft add table ip6 kube-proxy",
        "nft add table inet other",
        // Upstream's iptables mode, through both back ends.
        "iptables-nft -t nat -N KUBE-SERVICES",
        "iptables-nft -t nat -N KUBE-SVC-ABC",
        "iptables-nft -t nat -A KUBE-SERVICES -j KUBE-SVC-ABC",
        "iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES",
        "iptables-nft -t nat -N MY-CHAIN",
        "iptables-nft -t nat -A POSTROUTING -j MY-CHAIN",
        "iptables-nft -t mangle -N KUBE-KUBELET-CANARY",
        "iptables-legacy -t nat -N KUBE-POSTROUTING",
        "iptables-legacy -t nat -A POSTROUTING -m comment --comment kube -j KUBE-POSTROUTING",
        "iptables-legacy -t filter -N KUBE-FORWARD",
        "iptables-legacy -t filter -A FORWARD -j KUBE-FORWARD",
    ] {
        sh(&ns, line);
    }

    let report = cleanup::cleanup(&Launcher::in_netns(&ns.name));
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let tables = [
        "ip kube-proxy-rs",
        "ip6 kube-proxy-rs",
        "ip kube-proxy",
        "ip6 kube-proxy",
    ]
    .map(removed_table);
    let removed: Vec<&String> = report
        .removed
        .iter()
        .map(|r| &r.what)
        .filter(|what| what.starts_with("nftables table "))
        .collect();
    assert_eq!(removed, tables.iter().collect::<Vec<_>>(), "{report:?}");

    let tables = ns.output("nft", &["list", "tables"]);
    assert!(!tables.contains("kube-proxy"), "{tables}");
    assert!(tables.contains("table inet other"), "{tables}");
    let nft_save = ns.output("iptables-nft-save", &[]);
    let legacy_save = ns.output("iptables-legacy-save", &[]);
    for saved in [&nft_save, &legacy_save] {
        for line in saved.lines().filter(|l| l.contains("KUBE-")) {
            assert!(
                line.contains("KUBE-KUBELET-CANARY"),
                "left behind: {line}\n{saved}"
            );
        }
    }
    // Someone else's chain, with its jump, and kubelet's canary stay.
    for kept in ["-A POSTROUTING -j MY-CHAIN", ":KUBE-KUBELET-CANARY"] {
        assert!(nft_save.contains(kept), "{kept:?} is gone:\n{nft_save}");
    }

    // Nothing left: a second run removes nothing and fails at nothing.
    let again = cleanup::cleanup(&Launcher::in_netns(&ns.name));
    assert_eq!(again, cleanup::Report::default());
}
