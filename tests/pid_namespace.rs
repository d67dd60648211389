//! The proxy in a pid namespace of its own, as in a pod without `hostPID` (the DaemonSet's
//! nftables, iptables, IPVS and userspace overlays), against the real kernel (root): the
//! nf_tables monitor tells its own transactions from another program's. The kernel names a
//! transaction's thread by its id in the initial pid namespace, which the proxy never sees
//! there; the sending socket's port id is the same in every namespace.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run the binary, unshare and nft"
)]

use support::host;

use std::time::Duration;

use host::{ChildGuard, NetNs};

const OUTSIDE_CHANGE: &str = "another program changed our rules";

/// The proxy's log once it contains `wanted` (or after `tries` tenths of a second).
fn log_until(proxy: &mut ChildGuard, wanted: &str, tries: u32) -> String {
    let mut log = String::new();
    for _ in 0..tries {
        log = std::fs::read_to_string(&proxy.log).unwrap_or_default();
        if log.contains(wanted) || proxy.exited().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    log
}

#[test]
fn own_commits_are_not_outside_changes_in_a_pid_namespace_of_its_own() {
    let ns = NetNs::new("pidns");
    let manifests = host::scratch_dir().join(format!("pidns-{}", ns.name));
    std::fs::create_dir_all(&manifests).unwrap();
    for file in ["nodes.yaml", "edge-cases.yaml"] {
        std::fs::copy(
            format!("{}/examples/cluster/{file}", env!("CARGO_MANIFEST_DIR")),
            manifests.join(file),
        )
        .unwrap();
    }
    let mut proxy = ChildGuard::spawn(
        &format!("pidns-{}", ns.name),
        ns.command("unshare")
            .args(["--pid", "--fork", "--kill-child", "--mount-proc"])
            .arg(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .args(["--proxy-mode=nftables", "--hostname-override=node-a"])
            .arg(format!("--manifests={}", manifests.display())),
    );
    log_until(&mut proxy, "\"full sync\"", 300);
    // A change of ours: a Service more, synced.
    std::fs::write(
        manifests.join("more.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: more, namespace: default}\n\
         spec: {clusterIP: 10.96.7.7, clusterIPs: [10.96.7.7], ipFamilies: [IPv4], \
         ports: [{port: 81}]}\n",
    )
    .unwrap();
    let mut synced = false;
    for _ in 0..100 {
        if ns
            .output("nft", &["list", "table", "ip", "kube-proxy-rs"])
            .contains("10.96.7.7")
        {
            synced = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(synced, "the new Service was not programmed");
    std::thread::sleep(Duration::from_secs(1));
    let log = std::fs::read_to_string(&proxy.log).unwrap_or_default();
    assert!(
        !log.contains(OUTSIDE_CHANGE),
        "its own commits were taken for another program's:\n{log}"
    );
    // Another program's change is still one.
    ns.output(
        "nft",
        &["flush", "chain", "ip", "kube-proxy-rs", "nat-output"],
    );
    let log = log_until(&mut proxy, OUTSIDE_CHANGE, 50);
    assert!(
        log.contains(OUTSIDE_CHANGE),
        "an outside change went unseen:\n{log}"
    );
    drop(proxy);
    let _ = std::fs::remove_dir_all(&manifests);
}
