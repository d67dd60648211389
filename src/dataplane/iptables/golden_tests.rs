//! Goldens: the restore inputs for the example cluster under a few settings must match
//! `testdata/` byte for byte (`UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff), and
//! `iptables-restore --test` / `ip6tables-restore --test` must accept them in a fresh network
//! namespace. That second check is a kernel test: `kernel_`-named and ignored by a plain
//! `cargo test --lib`, which needs no root; `cargo test --lib -- --ignored kernel_` runs it.

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
pub(super) fn restore_test(
    ns: &NetNs,
    family: IpFamily,
    input: &str,
) -> Result<(), crate::testing::netns::RunError> {
    let tool = match family {
        IpFamily::V4 => "iptables-nft-restore",
        IpFamily::V6 => "ip6tables-nft-restore",
    };
    ns.try_output_fed(tool, &["--test", "--noflush"], input)
        .map(drop)
}

/// The goldens: node, settings file (upstream's defaults when `None`), golden name.
const GOLDENS: [(&str, Option<&str>, &str); 4] = [
    ("node-a", None, "example.node-a.iptables"),
    (
        "node-a",
        Some("masquerade-all"),
        "example.node-a.masquerade-all.iptables",
    ),
    ("node-b", Some("bridge"), "example.node-b.bridge.iptables"),
    (
        "node-a",
        Some("prefix-cidr"),
        "example.node-a.prefix-cidr.iptables",
    ),
];

fn golden_rulesets((node, settings_file, _): (&str, Option<&str>, &str)) -> [Ruleset; 2] {
    let cfg = settings_file.map(settings).unwrap_or_default();
    rulesets(node, &cfg)
}

fn golden(index: usize) {
    let rules = golden_rulesets(GOLDENS[index]);
    let got = super::render_from_scratch(&rules);
    crate::testing::check_golden(&testdata(GOLDENS[index].2), &got);
}

#[test]
#[ignore = "kernel: runs iptables-restore in a network namespace (root); \
            cargo test --lib -- --ignored kernel_"]
fn kernel_every_golden_is_accepted_by_restore_test() {
    let ns = NetNs::new("kprs-ipt");
    for g in GOLDENS {
        for r in &golden_rulesets(g) {
            if let Err(e) = restore_test(&ns, r.family, &render::from_scratch(r)) {
                panic!("restore --test refused {} ({:?}):\n{e}", g.2, r.family);
            }
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
    golden(0);
}

#[test]
fn example_cluster_with_cluster_cidr_and_masquerade_all() {
    golden(1);
}

#[test]
fn example_cluster_with_bridge_detection_and_no_localhost_node_ports() {
    golden(2);
}

#[test]
fn example_cluster_with_prefix_detection_and_node_port_cidrs() {
    golden(3);
}
