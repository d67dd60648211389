//! Another proxy's rules left on a node, against the real kernel in a fresh network namespace
//! (root): what upstream kube-proxy's modes leave is found and named, what this proxy's mode
//! uses or kubelet owns is not, and the running proxy removes it after its first sync, saying
//! so in one line, while kubelet's chain and its own rules stay.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft, iptables and the binary"
)]

use support::host;

use std::time::Duration;

use host::{ChildGuard, NetNs};
use kube_proxy_rs::config::ProxyMode;
use kube_proxy_rs::dataplane::leftovers::{self, Leftover, State};
use kube_proxy_rs::dataplane::modes;
use kube_proxy_rs::dataplane::tool::Launcher;

/// What upstream's nftables, iptables (both back ends) and IPVS modes leave, and kubelet's
/// chain, which is not kube-proxy's; the link is a veth (this kernel has no dummy device), and
/// only the name counts.
const UPSTREAM_LEFT: [&str; 7] = [
    "nft add table ip kube-proxy",
    "nft add table ip6 kube-proxy",
    "iptables-nft -t nat -N KUBE-SERVICES",
    "iptables-nft -t nat -A PREROUTING -j KUBE-SERVICES",
    "iptables-nft -t filter -N KUBE-FIREWALL",
    "iptables-legacy -t filter -N KUBE-FORWARD",
    "ip link add kube-ipvs0 type veth peer name kpl-peer",
];

fn sh(ns: &NetNs, line: &str) {
    let words: Vec<&str> = line.split(' ').collect();
    ns.output(words[0], &words[1..]);
}

/// What `mode` declares it owns.
fn owned(mode: ProxyMode) -> &'static [State] {
    modes::of(mode).owns()
}

fn names(left: &[Leftover]) -> Vec<String> {
    left.iter().map(ToString::to_string).collect()
}

#[test]
fn what_upstream_left_is_found_and_what_ours_uses_is_not() {
    let ns = NetNs::new("left");
    let tools = Launcher::in_netns(&ns.name);
    assert!(leftovers::find(owned(ProxyMode::Nftables), &leftovers::read(&tools)).is_empty());
    for line in UPSTREAM_LEFT {
        sh(&ns, line);
    }
    sh(&ns, "nft add table ip kube-proxy-rs");

    let seen = leftovers::read(&tools);
    assert_eq!(
        names(&leftovers::find(owned(ProxyMode::Nftables), &seen)),
        [
            "nftables table ip kube-proxy",
            "nftables table ip6 kube-proxy",
            "iptables-nft chains nat/KUBE-SERVICES",
            "iptables-legacy chains filter/KUBE-FORWARD",
            "link kube-ipvs0 (IPVS mode)",
        ]
    );
    assert_eq!(
        names(&leftovers::find(owned(ProxyMode::Iptables), &seen)),
        [
            "nftables table ip kube-proxy",
            "nftables table ip6 kube-proxy",
            "nftables table ip kube-proxy-rs",
            "link kube-ipvs0 (IPVS mode)",
        ]
    );
    assert!(
        !names(&leftovers::find(owned(ProxyMode::Ipvs), &seen))
            .iter()
            .any(|n| n.contains("kube-ipvs0"))
    );
}

#[test]
fn the_proxy_removes_upstream_s_leftovers_after_its_first_sync() {
    let ns = NetNs::new("leftrun");
    // Without the IPVS link: this kernel has no dummy device, and the removal deletes only a
    // dummy `kube-ipvs0` (the IPVS suites in the User-mode Linux guest have one).
    for line in UPSTREAM_LEFT.iter().filter(|l| !l.contains("kube-ipvs0")) {
        sh(&ns, line);
    }
    let mut proxy = ChildGuard::spawn(
        &format!("leftovers-{}", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs")).args([
            "--proxy-mode=nftables",
            "--manifests=examples/cluster",
            "--hostname-override=node-a",
        ]),
    );
    let mut log = String::new();
    for _ in 0..300 {
        log = std::fs::read_to_string(&proxy.log).unwrap_or_default();
        if log.contains("removed what another proxy left") || proxy.exited().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("removed what another proxy left"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    for named in [
        "nftables table ip kube-proxy",
        "iptables-nft chains nat/KUBE-SERVICES",
        "iptables-legacy chains filter/KUBE-FORWARD",
    ] {
        assert!(lines[0].contains(named), "{named}: {}", lines[0]);
    }
    assert!(!lines[0].contains("--cleanup"), "{}", lines[0]);
    let tools = Launcher::in_netns(&ns.name);
    assert!(
        leftovers::find(owned(ProxyMode::Nftables), &leftovers::read(&tools)).is_empty(),
        "left after the removal: {:?}",
        names(&leftovers::find(
            owned(ProxyMode::Nftables),
            &leftovers::read(&tools)
        ))
    );
    // This proxy's table, and kubelet's chain, stay.
    let tables = ns.output("nft", &["list", "tables"]);
    assert!(tables.contains("table ip kube-proxy-rs"), "{tables}");
    let filter = ns.output("iptables-nft-save", &["-t", "filter"]);
    assert!(filter.contains(":KUBE-FIREWALL"), "{filter}");
}
