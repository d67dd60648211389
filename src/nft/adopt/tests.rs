//! The parser on captured `nft -j list table` output (nft 1.0.6) of the example cluster under the
//! golden settings: it must read back exactly what the planner wanted, handles ignored.

use std::path::{Path, PathBuf};

use super::*;
use crate::cli::load_manifests;
use crate::cluster::{Features, IpFamily};
use crate::dataplane::nftables::diff::diff;
use crate::dataplane::nftables::golden_tests as golden;
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::plan::plan;

fn captured(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/dataplane/nftables/testdata")
        .join(format!("nft-j-list-table.{name}.json"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn planned(node: &str, cfg: &ModeConfig, family: IpFamily) -> Ruleset {
    let loaded = load_manifests(Path::new("examples/cluster"), node, Features::default())
        .expect("example loads");
    plan(&loaded.snapshot, cfg, family)
}

fn round_trip(name: &str, node: &str, cfg: &ModeConfig, family: IpFamily) {
    let want = planned(node, cfg, family);
    let got = parse(&captured(name), want.family).expect("parses");
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
        &golden::settings("masquerade-all"),
        IpFamily::V4,
    );
    round_trip(
        "example.node-b.bridge-all.ip",
        "node-b",
        &golden::settings("bridge-all"),
        IpFamily::V4,
    );
    round_trip(
        "example.node-a.prefix-cidr.ip6",
        "node-a",
        &golden::settings("prefix-cidr"),
        IpFamily::V6,
    );
}

#[test]
fn dynamic_set_elements_are_the_kernels_and_not_read() {
    let dump = r#"{"nftables": [{"set": {"family": "ip", "name": "affinity-1-2", "table": "kube-proxy-rs",
        "type": "ipv4_addr", "handle": 3, "size": 65535, "flags": ["timeout"], "timeout": 10800,
        "elem": [{"elem": {"val": "10.0.0.9", "timeout": 10800, "expires": 10700}}]}}]}"#;
    let got = parse(dump, Family::Ip).unwrap();
    let set = &got.ruleset.sets[&Name::parse("affinity-1-2").unwrap()];
    assert_eq!(set.decl.dynamic_timeout, Some(10800));
    assert!(set.elements.is_empty());
}

#[test]
fn what_cannot_be_read_is_made_to_differ_and_unnameable_objects_are_foreign() {
    let dump = r#"{"nftables": [
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "services", "handle": 1}},
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "Odd Chain", "handle": 2}},
        {"chain": {"family": "ip", "table": "kube-proxy-rs", "name": "filter-input", "handle": 3,
            "type": "filter", "hook": "input", "prio": 0, "policy": "drop"}},
        {"set": {"family": "ip", "name": "marks", "table": "kube-proxy-rs", "type": "mark", "handle": 4}},
        {"rule": {"family": "ip", "table": "kube-proxy-rs", "chain": "services", "handle": 5,
            "expr": [{"counter": {"packets": 0, "bytes": 0}}]}}]}"#;
    let got = parse(dump, Family::Ip).unwrap();
    assert_eq!(
        got.foreign,
        vec!["chain Odd Chain", "base chain filter-input"]
    );
    assert_eq!(got.unknown.len(), 2, "{:?}", got.unknown);
    let services = &got.ruleset.chains[&Name::parse("services").unwrap()];
    assert_eq!(services.rules, vec![rule::unreadable()]);
    assert!(
        got.ruleset.sets[&Name::parse("marks").unwrap()]
            .decl
            .key
            .is_empty()
    );
}

#[test]
fn a_dump_that_is_not_nft_json_is_an_error() {
    assert!(parse("Error: nope", Family::Ip).is_err());
    assert!(parse("{}", Family::Ip).is_err());
}
