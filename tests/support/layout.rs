//! Where a test finds what it runs and writes: the repository's root, cargo's scratch directory
//! for this build's tests, and the kube-proxy-rs binary cargo built beside them.
//!
//! A library has none of the variables cargo gives an integration test (`CARGO_BIN_EXE_*`,
//! `CARGO_TARGET_TMPDIR`), so both are found from the running binary: cargo puts test and bench
//! binaries in `target/<profile>/deps/`, examples in `target/<profile>/examples/`, and the
//! package's binaries in `target/<profile>/`, which it builds before any test runs.

use std::path::{Path, PathBuf};

/// The repository's root (where `Cargo.lock`, `testenv/` and `examples/cluster` are).
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support lies two folders below the repository's root")
}

/// `target/<profile>/`: the folder of the running test, bench or example's binary, or its
/// parent when that is cargo's `deps` or `examples`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running binary's path");
    let dir = exe.parent().expect("a binary lies in a folder");
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().expect("deps lies in a folder").to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// `target/tmp`: the folder cargo gives integration tests for their files (what
/// `CARGO_TARGET_TMPDIR` names to a test), created.
pub fn target_tmp() -> PathBuf {
    let dir = profile_dir()
        .parent()
        .expect("the profile's folder lies in the target folder")
        .join("tmp");
    std::fs::create_dir_all(&dir).expect("create target/tmp");
    dir
}

/// The kube-proxy-rs binary of this build (what `CARGO_BIN_EXE_kube-proxy-rs` names to a test).
pub fn kube_proxy_rs_binary() -> PathBuf {
    let binary = profile_dir().join("kube-proxy-rs");
    assert!(
        binary.exists(),
        "{} is missing: cargo builds it before it runs a test or bench",
        binary.display()
    );
    binary
}
