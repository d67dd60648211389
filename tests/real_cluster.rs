//! A real cluster (`testenv/cluster`): kubelets, containerd and pods on two nodes, our proxy
//! deployed by its DaemonSet from `deploy/overlays/nftables` (the kubelets run it from a local
//! image of the binary under test), and upstream's own e2e specs for Services in the
//! Conformance set run against it. Then the cluster is removed, and the test checks that
//! nothing of it is left on the host.
//!
//! Needs root and `testenv/cluster/build` (and `testenv/build`). Without the build it says so
//! and passes, unless `KPRS_REQUIRE_REAL_CLUSTER=1` (as `.ci/run` sets), where it fails.
//! The full spec matrix (every mode of ours beside upstream) is `testenv/cluster/matrix`.

#![allow(
    clippy::disallowed_methods,
    reason = "drives testenv/cluster, a shell tool, and reads the host's state"
)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn cluster_home() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testenv/cluster")
}

fn state_dir() -> PathBuf {
    PathBuf::from("/var/tmp/kube-proxy-rs-test-cluster")
}

/// `testenv/cluster/cluster ARGS`, with the proxy binary this test was built with.
fn cluster(args: &[&str]) -> std::process::ExitStatus {
    Command::new(cluster_home().join("cluster"))
        .args(args)
        .env("KPRS_BIN", env!("CARGO_BIN_EXE_kube-proxy-rs"))
        .env("KPRS_CLUSTER_STATE", state_dir())
        .status()
        .expect("run testenv/cluster/cluster")
}

/// Removes the cluster when the test ends, however it ends.
struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let status = cluster(&["down"]);
        if !status.success() && !std::thread::panicking() {
            panic!("cluster down failed: {status}");
        }
    }
}

/// Whether the build the cluster needs is there; when it is not and the run does not
/// require it, says so.
fn built() -> bool {
    let stamp = cluster_home().join("bin/.stamp");
    let testenv = Path::new(env!("CARGO_MANIFEST_DIR")).join("testenv/bin/kube-apiserver");
    if stamp.exists() && testenv.exists() {
        return true;
    }
    assert!(
        std::env::var("KPRS_REQUIRE_REAL_CLUSTER").as_deref() != Ok("1"),
        "KPRS_REQUIRE_REAL_CLUSTER=1 but the real cluster is not built: run testenv/build and \
         testenv/cluster/build"
    );
    eprintln!("skipped: testenv/cluster/build has not run (KPRS_REQUIRE_REAL_CLUSTER=1 makes this fail)");
    false
}

/// What the host has that a cluster could leave behind: the cluster's network namespaces,
/// blackhole routes, processes naming the state directory, and the sysctls a kubelet sets.
fn host_traces() -> (Vec<String>, Vec<String>, Vec<u32>, Vec<String>) {
    let netns = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("kpc-"))
                .collect()
        })
        .unwrap_or_default();
    let routes = String::from_utf8(
        Command::new("ip")
            .args(["route", "show", "type", "blackhole"])
            .output()
            .expect("ip route")
            .stdout,
    )
    .unwrap()
    .lines()
    .map(str::to_owned)
    .collect();
    let state = state_dir().to_string_lossy().into_owned();
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&state))
                .unwrap_or(false)
        })
        .collect();
    let sysctls = [
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
    ]
    .iter()
    .map(|k| {
        let v = std::fs::read_to_string(format!("/proc/sys/{k}")).unwrap_or_default();
        format!("{k}={}", v.trim())
    })
    .collect();
    (netns, routes, processes, sysctls)
}

#[test]
fn conformance_services_pass_with_ours_in_nftables_mode() {
    if !built() {
        return;
    }
    let before = host_traces();
    {
        let _down = Down;
        let up = cluster(&["up", "--proxy", "ours", "--mode", "nftables"]);
        assert!(up.success(), "cluster up failed: {up}");
        let e2e = cluster(&[
            "e2e",
            "conformance-services-ours-nftables",
            r"\[sig-network\] Services .*\[Conformance\]",
        ]);
        let log = state_dir().join("e2e-conformance-services-ours-nftables/e2e.log");
        let summary = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("Ran ") || l.contains("[FAIL]") || l.contains("Passed |"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(e2e.success(), "e2e specs failed: {e2e}\n{summary}");
        assert!(summary.contains("Ran "), "no spec ran:\n{summary}");
    }
    assert_eq!(
        host_traces(),
        before,
        "the cluster left traces on the host: (network namespaces, blackhole routes, \
         processes, sysctls)"
    );
}
