//! Golden tests of `plan` over fixture directories: the rendered report must match the file in
//! `testdata/` byte for byte. `UPDATE_GOLDENS=1 cargo test` rewrites them; review the diff.

use std::path::{Path, PathBuf};

use super::*;

fn check(fixture: &Path, node: &str, format: OutputFormat, golden: &str) {
    let report = plan_manifests(fixture, node, Features::default()).expect("fixture loads");
    let got = render(&report, format);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/cli/testdata")
        .join(golden);
    crate::testing::check_golden(&path, &got);
}

fn example() -> PathBuf {
    // Relative, so origins in warnings do not depend on where the repository is checked out.
    PathBuf::from("examples/cluster")
}

#[test]
fn example_cluster_on_node_a_as_json() {
    check(
        &example(),
        "node-a",
        OutputFormat::Json,
        "example.node-a.json",
    );
}

#[test]
fn example_cluster_on_node_b_as_json() {
    check(
        &example(),
        "node-b",
        OutputFormat::Json,
        "example.node-b.json",
    );
}

#[test]
fn example_cluster_on_node_a_as_table() {
    check(
        &example(),
        "node-a",
        OutputFormat::Table,
        "example.node-a.txt",
    );
}

#[test]
fn hostile_objects_are_skipped_with_warnings_and_the_rest_planned() {
    check(
        Path::new("src/cli/testdata/hostile"),
        "node-a",
        OutputFormat::Json,
        "hostile.json",
    );
}
