//! Goldens: the restore inputs for the example cluster under a few settings must match
//! `testdata/` byte for byte (`UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff), and
//! `iptables-restore --test` / `ip6tables-restore --test` must accept them in a fresh network
//! namespace.

use std::path::{Path, PathBuf};

use super::mode_config::{DetectLocal, ModeConfig};
use super::netns::Netns;
use super::ruleset::{IfName, Ruleset};
use super::{plan_all, render};
use crate::cli::load_manifests;
use crate::cluster::{Features, IpFamily};
use crate::config::NodePortAddresses;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/dataplane/iptables/testdata")
        .join(name)
}

fn rulesets(node: &str, cfg: &ModeConfig) -> [Ruleset; 2] {
    let loaded = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads");
    plan_all(&loaded.snapshot, cfg)
}

/// Runs `<family>-nft-restore --test --noflush` on `input` in `ns`; the tool's error on refusal.
pub(super) fn restore_test(ns: &Netns, family: IpFamily, input: &str) -> Result<(), String> {
    let tool = match family {
        IpFamily::V4 => "iptables-nft-restore",
        IpFamily::V6 => "ip6tables-nft-restore",
    };
    let (ok, _, err) = ns.run(tool, &["--test", "--noflush"], Some(input));
    if ok { Ok(()) } else { Err(err) }
}

fn golden(node: &str, cfg: &ModeConfig, name: &str) {
    let rules = rulesets(node, cfg);
    let got = super::render_from_scratch(&rules);
    crate::testing::check_golden(&testdata(name), &got);
    let ns = Netns::new();
    for r in &rules {
        if let Err(e) = restore_test(&ns, r.family, &render::from_scratch(r)) {
            panic!("restore --test refused {name} ({:?}):\n{e}", r.family);
        }
    }
}

pub(super) fn cluster_cidr() -> ModeConfig {
    ModeConfig {
        detect_local: DetectLocal::ClusterCidrs(vec![
            "10.244.0.0/16".parse().unwrap(),
            "fd00:10:244::/48".parse().unwrap(),
        ]),
        ..ModeConfig::default()
    }
}

#[test]
fn example_cluster_on_node_a_with_upstream_defaults() {
    golden("node-a", &ModeConfig::default(), "example.node-a.iptables");
}

#[test]
fn example_cluster_with_cluster_cidr_and_masquerade_all() {
    let cfg = ModeConfig {
        masquerade_all: true,
        ..cluster_cidr()
    };
    golden("node-a", &cfg, "example.node-a.masquerade-all.iptables");
}

#[test]
fn example_cluster_with_bridge_detection_and_no_localhost_node_ports() {
    let cfg = ModeConfig {
        detect_local: DetectLocal::Interface(IfName::new("cbr0", false).unwrap()),
        localhost_node_ports: false,
        drop_invalid: false,
        ..ModeConfig::default()
    };
    golden("node-b", &cfg, "example.node-b.bridge.iptables");
}

#[test]
fn example_cluster_with_prefix_detection_and_node_port_cidrs() {
    let cfg = ModeConfig {
        detect_local: DetectLocal::Interface(IfName::new("veth", true).unwrap()),
        node_ports: NodePortAddresses {
            cidrs: vec!["10.0.0.0/24".parse().unwrap()],
            ..NodePortAddresses::default()
        },
        ..ModeConfig::default()
    };
    golden("node-a", &cfg, "example.node-a.prefix-cidr.iptables");
}
