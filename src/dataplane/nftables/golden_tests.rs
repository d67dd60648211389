//! Goldens: the full scripts for the example cluster under a few settings must match
//! `testdata/` byte for byte (`UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff), and
//! `nft --check` must accept every one of them; and captured `nft -j list table` output (nft
//! 1.0.6) of the same plans must read back exactly as planned, handles ignored.

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

/// Runs `nft -c -f -` on a script. Under `CI=true` a missing `nft` fails the test (CI installs
/// it); elsewhere it is reported and skipped. Returns nft's error text on refusal.
pub(super) fn nft_check(script: &str) -> Result<(), String> {
    #[allow(clippy::disallowed_methods)] // test-only: nft --check is the judge of our syntax
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    #[allow(clippy::disallowed_methods)] // test-only: runs nft in check mode, touches nothing
    let child = std::process::Command::new("nft")
        .args(["-c", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) if !ci => {
            eprintln!("nft not available ({e}); skipping the nft --check part");
            return Ok(());
        }
        Err(e) => panic!("CI=true but nft cannot run: {e}"),
    };
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

fn golden(node: &str, cfg: &ModeConfig, name: &str) {
    let got = script(node, cfg);
    check(&got, name);
    if let Err(e) = nft_check(&got) {
        panic!("nft --check refused {name}:\n{e}");
    }
}

#[test]
fn example_cluster_on_node_a_with_upstream_defaults() {
    golden("node-a", &ModeConfig::default(), "example.node-a.nft");
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
    golden(
        "node-a",
        &settings("masquerade-all"),
        "example.node-a.masquerade-all.nft",
    );
}

#[test]
fn example_cluster_with_bridge_detection_and_node_ports_everywhere() {
    golden(
        "node-b",
        &settings("bridge-all"),
        "example.node-b.bridge-all.nft",
    );
}

#[test]
fn example_cluster_with_prefix_detection_and_node_cidr_ports() {
    golden(
        "node-a",
        &settings("prefix-cidr"),
        "example.node-a.prefix-cidr.nft",
    );
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
