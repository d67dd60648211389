//! What the binary says about itself and how it logs, as an operator's tools read it:
//! `--version=raw` with upstream's `version.Info` fields, and `--logging-format json` lines in
//! upstream's shape.

#![allow(clippy::disallowed_methods)] // runs the built binary and writes scratch files

use support::run_binary;

use run_binary::{log_of_ignored_flag, run, stderr};

#[test]
fn json_logs_have_upstreams_shape() {
    let dir = tempfile::tempdir().unwrap();
    // A flag beside --config is a warning line; --write-config-to touches nothing else.
    let log = log_of_ignored_flag(dir.path(), "mode: nftables\nlogging:\n  format: json\n");
    let line = log.lines().find(|l| l.contains("is ignored")).expect(&log);
    let v: serde_json::Value = serde_json::from_str(line).expect(line);
    assert!(line.starts_with("{\"ts\":"), "{line}");
    let at = |key: &str| line.find(&format!("\"{key}\":")).expect(key);
    assert!(
        at("ts") < at("caller") && at("caller") < at("msg") && at("msg") < at("v"),
        "{line}"
    );
    assert!(
        v["ts"].as_f64().unwrap() > 1.7e12,
        "milliseconds since the epoch: {line}"
    );
    assert!(v["caller"].as_str().unwrap().contains(".rs:"), "{line}");
    assert_eq!(v["v"], 0);
}

#[test]
fn version_raw_prints_upstreams_fields() {
    let out = run(&["--version=raw"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("version.Info{Major:\"0\", Minor:\"1\", "),
        "{text}"
    );
    for field in [
        "GitVersion:\"v0.1.0\"",
        "GitCommit:\"",
        "GitTreeState:\"",
        "BuildDate:\"20",
        "GoVersion:\"\"",
        "Compiler:\"rustc ",
        "Platform:\"linux/",
    ] {
        assert!(text.contains(field), "{field} in {text}");
    }
    assert_eq!(text.lines().count(), 1, "{text}");
}
