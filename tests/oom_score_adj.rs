//! `--oom-score-adj` (root): the proxy writes its own `/proc/PID/oom_score_adj` at start, as
//! upstream's does, and where the kernel refuses (no `CAP_SYS_RESOURCE` to lower it) it logs one
//! warning naming the value and the error and keeps running. The binary follows a manifest
//! directory in nftables mode inside a fresh network namespace, so nothing outside it changes.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary in a namespace, reads /proc, writes a manifest file"
)]

#[path = "support/host.rs"]
mod host;

use std::process::Command;
use std::time::{Duration, Instant};

use host::{ChildGuard, NetNs};

const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
"#;

/// The proxy's arguments for a namespace of its own, plus `extra`.
fn proxy_args(manifests: &str, extra: &str) -> Vec<String> {
    [
        "--proxy-mode=nftables",
        "--manifests",
        manifests,
        "--hostname-override=node-a",
        "--metrics-bind-address=127.0.0.1:10249",
        "--healthz-bind-address=127.0.0.1:10256",
        extra,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Waits until the proxy's log has a line containing `needle`; returns that line.
fn wait_for_line(proxy: &mut ChildGuard, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = std::fs::read_to_string(&proxy.log).unwrap_or_default();
        if let Some(line) = log.lines().find(|l| l.contains(needle)) {
            return line.to_owned();
        }
        assert!(
            proxy.exited().is_none(),
            "the proxy exited:\n{}",
            proxy.log_tail(20)
        );
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in:\n{}",
            proxy.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn oom_score_adj(pid: u32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .expect("read oom_score_adj")
        .trim()
        .parse()
        .expect("a number")
}

#[test]
fn the_proxy_sets_its_oom_score_adj_or_warns_and_keeps_running() {
    let ns = NetNs::new("oom");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("node.yaml"), NODE).expect("write manifests");
    let manifests = dir.path().display().to_string();

    // Raising the score needs no privilege, so this holds in any root container.
    let inherited = oom_score_adj(std::process::id());
    let raised = (inherited + 500).min(1000);
    let mut proxy = ChildGuard::spawn(
        &format!("{}-set", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(proxy_args(&manifests, &format!("--oom-score-adj={raised}"))),
    );
    wait_for_line(&mut proxy, "set oom_score_adj");
    assert_eq!(oom_score_adj(proxy.pid()), raised);
    drop(proxy);

    // Without CAP_SYS_RESOURCE a process may not lower its score below where it started.
    let mut refused = Command::new("setpriv");
    refused
        .args(["--bounding-set=-sys_resource", "--"])
        .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .args(proxy_args(&manifests, "--oom-score-adj=-1000"));
    let mut cmd = ns.command(refused.get_program());
    cmd.args(refused.get_args());
    let mut proxy = ChildGuard::spawn(&format!("{}-refused", ns.name), &mut cmd);
    let line = wait_for_line(&mut proxy, "cannot set oom_score_adj");
    assert!(
        line.starts_with('W') && line.contains("value=-1000") && line.contains("error="),
        "one warning naming the value and the error: {line}"
    );
    // It goes on: still running once its servers answer.
    wait_for_line(&mut proxy, "serving /metrics");
    assert!(proxy.exited().is_none(), "{}", proxy.log_tail(20));
    assert_eq!(oom_score_adj(proxy.pid()), inherited);
}
