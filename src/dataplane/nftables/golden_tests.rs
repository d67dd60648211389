//! Goldens: the full scripts for the example cluster under a few settings must match
//! `testdata/` byte for byte (`UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff), and
//! `nft --check` must accept every one of them; and captured `nft -j list table` output (nft
//! 1.0.6) of the same plans must read back exactly as planned, handles ignored. The
//! `nft --check` part is a kernel test (root): `kernel_`-named and ignored by a plain
//! `cargo test --lib`; `cargo test --lib -- --ignored kernel_` runs it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::mode_config::ModeConfig;
use super::plan::plan;
use super::plan_all;
use crate::cli::load_manifests;
use crate::cluster::{Features, IpFamily};
use crate::config;
use crate::nft::render_from_scratch;
use crate::nft::{Ruleset, adopt, diff};

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/dataplane/nftables/testdata")
        .join(name)
}

fn script(node: &str, cfg: &ModeConfig) -> String {
    let loaded = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads");
    render_from_scratch(&plan_all(&loaded.snapshot, cfg))
}

fn check(got: &str, golden: &str) {
    crate::testing::check_golden(&testdata(golden), got);
}

/// Runs `nft -c -f -` on a script (root); nft's error text on refusal.
pub(super) fn nft_check(script: &str) -> Result<(), String> {
    #[allow(clippy::disallowed_methods)] // test-only: runs nft in check mode, touches nothing
    let mut child = std::process::Command::new("nft")
        .args(["-c", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft cannot run: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("write script");
    let out = child.wait_with_output().expect("nft runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The goldens: node, settings file (upstream's defaults when `None`), golden name.
const GOLDENS: [(&str, Option<&str>, &str); 4] = [
    ("node-a", None, "example.node-a.nft"),
    (
        "node-a",
        Some("masquerade-all"),
        "example.node-a.masquerade-all.nft",
    ),
    (
        "node-b",
        Some("bridge-all"),
        "example.node-b.bridge-all.nft",
    ),
    (
        "node-a",
        Some("prefix-cidr"),
        "example.node-a.prefix-cidr.nft",
    ),
];

fn golden_script((node, settings_file, _): (&str, Option<&str>, &str)) -> String {
    script(node, &settings_file.map(settings).unwrap_or_default())
}

fn golden(index: usize) {
    check(&golden_script(GOLDENS[index]), GOLDENS[index].2);
}

#[test]
#[ignore = "kernel: runs nft --check (root); cargo test --lib -- --ignored kernel_"]
fn kernel_every_golden_is_accepted_by_nft_check() {
    for g in GOLDENS {
        if let Err(e) = nft_check(&golden_script(g)) {
            panic!("nft --check refused {}:\n{e}", g.2);
        }
    }
}

#[test]
fn example_cluster_on_node_a_with_upstream_defaults() {
    golden(0);
}

/// The settings of a golden, from its KubeProxyConfiguration file `testdata/NAME.config.yaml`
/// (also read by the parser's round trip and the kernel round trip over these goldens).
pub(super) fn settings(name: &str) -> ModeConfig {
    let path = testdata(&format!("{name}.config.yaml"));
    let text = std::fs::read_to_string(&path).expect("settings file");
    ModeConfig::new(&config::from_file(&path, &text).expect("settings")).expect("mode settings")
}

#[test]
fn example_cluster_with_cluster_cidr_and_masquerade_all() {
    golden(1);
}

#[test]
fn example_cluster_with_bridge_detection_and_node_ports_everywhere() {
    golden(2);
}

#[test]
fn example_cluster_with_prefix_detection_and_node_cidr_ports() {
    golden(3);
}

fn captured(name: &str) -> String {
    let path = testdata(&format!("nft-j-list-table.{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn planned(node: &str, cfg: &ModeConfig, family: IpFamily) -> Ruleset {
    let loaded = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads");
    plan(&loaded.snapshot, cfg, family)
}

fn round_trip(name: &str, node: &str, cfg: &ModeConfig, family: IpFamily) {
    let want = planned(node, cfg, family);
    let got = adopt::parse(&captured(name), want.family).expect("parses");
    assert!(got.unknown.is_empty(), "{name}: unknown {:?}", got.unknown);
    assert!(got.foreign.is_empty(), "{name}: foreign {:?}", got.foreign);
    let t = diff(&got.ruleset, &want);
    assert!(t.is_empty(), "{name}: differs by {:#?}", t.ops);
    assert_eq!(got.ruleset, want, "{name}");
}

#[test]
fn example_dumps_read_back_as_planned() {
    let defaults = ModeConfig::default();
    round_trip("example.node-a.ip", "node-a", &defaults, IpFamily::V4);
    round_trip("example.node-a.ip6", "node-a", &defaults, IpFamily::V6);
    round_trip(
        "example.node-a.masquerade-all.ip",
        "node-a",
        &settings("masquerade-all"),
        IpFamily::V4,
    );
    round_trip(
        "example.node-b.bridge-all.ip",
        "node-b",
        &settings("bridge-all"),
        IpFamily::V4,
    );
    round_trip(
        "example.node-a.prefix-cidr.ip6",
        "node-a",
        &settings("prefix-cidr"),
        IpFamily::V6,
    );
}
