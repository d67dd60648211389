//! The README's demo, run as the README says (in a network namespace of its own, root): the
//! proxy follows `examples/cluster` as node-a, logs no warning or error, starts with its
//! version line, and stops on SIGTERM, as the kubelet stops it, with one "stopping" line and
//! exit code 0.

#![allow(
    clippy::disallowed_methods,
    reason = "reads the README, runs `ip` and the built binary"
)]

use support::host;

use std::process::Command;
use std::time::{Duration, Instant};

use host::NetNs;

/// The README's demo block: its commands, with continuation lines joined and `sudo` dropped.
fn demo_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let block = readme
        .split("```sh\n")
        .find(|b| b.contains("ip netns add kprs-demo"))
        .and_then(|b| b.split("```").next())
        .expect("the README has the netns demo");
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
        current.push_str(line.trim_end_matches('\\'));
        if !line.ends_with('\\') {
            commands.push(current.trim().trim_start_matches("sudo ").to_string());
            current.clear();
        }
    }
    commands
}

/// Whether this process may lower its oom_score_adj (`CAP_SYS_RESOURCE`, bit 24 of `CapEff`).
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps >> 24 & 1 == 1)
}

#[test]
fn the_readme_demo_runs_clean_and_stops_on_sigterm() {
    let ns = NetNs::new("kprs-readme");
    let commands = demo_commands();
    // The namespace guard adds and deletes the namespace; the README's other `ip` commands run
    // as written, on it.
    for command in commands
        .iter()
        .filter(|c| c.starts_with("ip -n kprs-demo "))
    {
        let words: Vec<String> = command
            .replace("kprs-demo", &ns.name)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let out = Command::new(&words[0]).args(&words[1..]).output().unwrap();
        assert!(
            out.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let run = commands
        .iter()
        .find(|c| c.contains("kube-proxy-rs --manifests"))
        .expect("the demo runs the proxy");
    let args: Vec<&str> = run
        .split_once("kube-proxy-rs ")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let mut proxy = host::ChildGuard::spawn(
        &ns.name,
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(&args)
            .current_dir(env!("CARGO_MANIFEST_DIR")),
    );
    let log_path = proxy.log.clone();
    let text = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !text().contains("\"full sync\"") {
        assert!(Instant::now() < deadline, "no first sync:\n{}", text());
        assert!(proxy.exited().is_none(), "the proxy ended:\n{}", text());
        std::thread::sleep(Duration::from_millis(100));
    }
    // A moment for the health check listeners, which open after the first sync.
    std::thread::sleep(Duration::from_secs(1));
    let sent = Command::new("kill")
        .args(["-TERM", &proxy.pid().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = proxy.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 10 s after SIGTERM:\n{}",
            text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = text();
    assert!(status.success(), "{status}:\n{log}");
    // Lowering oom_score_adj takes CAP_SYS_RESOURCE, which root in some sandboxes lacks; the
    // warning then says so, and is this host's, not the demo's.
    let alarms: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with('W') || l.starts_with('E'))
        .filter(|l| has_cap_sys_resource() || !l.contains("oom_score_adj"))
        .collect();
    assert!(
        alarms.is_empty(),
        "warnings or errors:\n{}",
        alarms.join("\n")
    );
    let first = log.lines().next().unwrap_or_default();
    assert!(
        first.contains("\"Version info\""),
        "the first line says which build runs: {first}"
    );
    for field in [
        "version=\"v",
        "gitCommit=",
        "buildDate=",
        "mode=\"nftables\"",
        "config=\"flags\"",
    ] {
        assert!(first.contains(field), "{field} in {first}");
    }
    assert!(log.contains("encoder=\"netlink\""), "{log}");
    assert!(
        log.lines()
            .any(|l| l.contains("\"stopping\" signal=\"SIGTERM\"")),
        "{log}"
    );
}
