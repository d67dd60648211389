//! The proxy's start-up, as an operator's settings shape it (root): `--oom-score-adj` is written
//! to its own `/proc/PID/oom_score_adj`, as upstream's is, and where the kernel refuses (no
//! `CAP_SYS_RESOURCE` to lower it) one warning names the value and the error and the proxy keeps
//! running; `--bind-address-hard-fail` ends it when its health port is taken, where it otherwise
//! retries. The binary follows a manifest directory in nftables mode inside a fresh network
//! namespace, so nothing outside it changes.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary in a namespace, reads /proc, writes a manifest file"
)]

use support::host;

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
    let log = proxy.log.clone();
    let mut found = None;
    let what = format!("a log line has {needle:?}");
    proxy.wait_until(&what, Duration::from_secs(30), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        found = text.lines().find(|l| l.contains(needle)).map(str::to_owned);
        found.is_some()
    });
    found.unwrap_or_default()
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
        line.starts_with('W') && line.contains("value=-1000") && line.contains(" err="),
        "one warning naming the value and the error: {line}"
    );
    // It goes on: still running once its servers answer.
    wait_for_line(&mut proxy, "serving /metrics");
    assert!(proxy.exited().is_none(), "{}", proxy.log_tail(20));
    assert_eq!(oom_score_adj(proxy.pid()), inherited);
}

#[test]
fn a_taken_health_port_ends_the_proxy_only_with_bind_address_hard_fail() {
    let ns = NetNs::new("hardfail");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("node.yaml"), NODE).expect("write manifests");
    let manifests = dir.path().display().to_string();
    let mut holder = ChildGuard::spawn(
        &format!("{}-holder", ns.name),
        ns.command("python3").args([
            "-c",
            "import socket, time\n\
             s = socket.socket()\n\
             s.bind(('127.0.0.1', 10256))\n\
             s.listen()\n\
             print('bound', flush=True)\n\
             time.sleep(600)\n",
        ]),
    );
    wait_for_line(&mut holder, "bound");

    let mut proxy = ChildGuard::spawn(
        &format!("{}-retries", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(proxy_args(&manifests, "--bind-address-hard-fail=false")),
    );
    let line = wait_for_line(&mut proxy, "cannot serve /healthz on 127.0.0.1:10256");
    assert!(
        line.starts_with('E') && line.contains("trying again"),
        "{line}"
    );
    wait_for_line(&mut proxy, "serving /metrics");
    assert!(proxy.exited().is_none(), "{}", proxy.log_tail(20));
    drop(proxy);

    let mut proxy = ChildGuard::spawn(
        &format!("{}-exits", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(proxy_args(&manifests, "--bind-address-hard-fail")),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = proxy.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running:\n{}",
            proxy.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(1), "{}", proxy.log_tail(20));
    // Other threads may still log while the process ends, so the error is
    // looked for among the last lines rather than required to be the last.
    let log = proxy.log_tail(20);
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error:")).collect();
    assert!(
        errors.len() == 1
            && errors[0].starts_with("error: cannot serve /healthz on 127.0.0.1:10256: ")
            && errors[0].ends_with("(--bind-address-hard-fail)"),
        "one error line naming the address and the flag:\n{log}"
    );
}
