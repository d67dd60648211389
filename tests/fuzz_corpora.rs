//! Replays the fuzz corpora with no fuzzer: every file under `fuzz/corpus/TARGET/` (seeds and
//! inputs the fuzzer kept for their coverage) and `fuzz/regressions/TARGET/` (every input that
//! crashed a target once) is fed to that target's entry point in
//! `kube_proxy_rs::fuzzing::TARGETS`, the same function the libFuzzer binary calls. A decoder
//! that panics on any of them fails the test, naming the target and the file. No root, no
//! network: it reads files.

use std::path::{Path, PathBuf};

use kube_proxy_rs::fuzzing::TARGETS;

fn files_of(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

/// Replays every input kept for `target` under `kind` (`corpus` or `regressions`); returns
/// how many it read and the failures, each named.
fn replay(kind: &str, target: &str, run: fn(&[u8])) -> (usize, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join(target);
    let files = files_of(&dir);
    let mut failed = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).expect("a corpus file");
        if let Err(panic) = std::panic::catch_unwind(|| run(&bytes)) {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("{target}: {}: {why}", file.display()));
        }
    }
    (files.len(), failed)
}

#[test]
fn every_kept_input_of_every_target_decodes_without_a_panic() {
    let mut failed = Vec::new();
    for (target, run) in TARGETS.iter() {
        let (seeds, mut f) = replay("corpus", target, *run);
        assert!(seeds > 0, "fuzz/corpus/{target}/ holds no seed");
        failed.append(&mut f);
        let (_, mut f) = replay("regressions", target, *run);
        failed.append(&mut f);
    }
    assert!(
        failed.is_empty(),
        "inputs that panic:\n{}",
        failed.join("\n")
    );
}

#[test]
fn every_corpus_directory_is_a_target() {
    for kind in ["corpus", "regressions"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz")
            .join(kind);
        for entry in std::fs::read_dir(&dir).expect("the fuzz directory") {
            let name = entry.expect("an entry").file_name();
            let name = name.to_string_lossy();
            assert!(
                TARGETS.iter().any(|(t, _)| *t == name),
                "fuzz/{kind}/{name} names no target of kube_proxy_rs::fuzzing::TARGETS"
            );
        }
    }
}

#[path = "fuzz_corpora/seeds.rs"]
mod seeds;
