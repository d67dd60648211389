//! Goldens: the restore inputs for the example cluster under a few settings must match
//! `testdata/` byte for byte (`UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff), and
//! `iptables-restore --test` / `ip6tables-restore --test` must accept them in a fresh network
//! namespace.

use std::path::{Path, PathBuf};

use super::mode_config::ModeConfig;
use super::ruleset::Ruleset;
use super::{plan_all, render};
use crate::cli::load_manifests;
use crate::cluster::{Features, IpFamily};
use crate::config;
use crate::testing::netns::NetNs;

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
pub(super) fn restore_test(ns: &NetNs, family: IpFamily, input: &str) -> Result<(), String> {
    let tool = match family {
        IpFamily::V4 => "iptables-nft-restore",
        IpFamily::V6 => "ip6tables-nft-restore",
    };
    ns.try_output_fed(tool, &["--test", "--noflush"], input)
        .map(drop)
}

fn golden(node: &str, cfg: &ModeConfig, name: &str) {
    let rules = rulesets(node, cfg);
    let got = super::render_from_scratch(&rules);
    crate::testing::check_golden(&testdata(name), &got);
    let ns = NetNs::new("kprs-ipt");
    for r in &rules {
        if let Err(e) = restore_test(&ns, r.family, &render::from_scratch(r)) {
            panic!("restore --test refused {name} ({:?}):\n{e}", r.family);
        }
    }
}

/// The settings of a golden, from its KubeProxyConfiguration file `testdata/NAME.config.yaml`.
pub(super) fn settings(name: &str) -> ModeConfig {
    let path = testdata(&format!("{name}.config.yaml"));
    let text = std::fs::read_to_string(&path).expect("settings file");
    ModeConfig::new(&config::from_file(&path, &text).expect("settings")).expect("mode settings")
}

#[test]
fn example_cluster_on_node_a_with_upstream_defaults() {
    golden("node-a", &ModeConfig::default(), "example.node-a.iptables");
}

#[test]
fn example_cluster_with_cluster_cidr_and_masquerade_all() {
    golden(
        "node-a",
        &settings("masquerade-all"),
        "example.node-a.masquerade-all.iptables",
    );
}

#[test]
fn example_cluster_with_bridge_detection_and_no_localhost_node_ports() {
    golden(
        "node-b",
        &settings("bridge"),
        "example.node-b.bridge.iptables",
    );
}

#[test]
fn example_cluster_with_prefix_detection_and_node_port_cidrs() {
    golden(
        "node-a",
        &settings("prefix-cidr"),
        "example.node-a.prefix-cidr.iptables",
    );
}
