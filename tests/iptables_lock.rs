//! The kernel pushing back in iptables mode (root): another process holds the xtables lock
//! while a change waits to be programmed. The running proxy (the built binary, iptables-legacy,
//! in a fresh network namespace) fails its syncs, counts each in
//! `kubeproxy_sync_proxy_rules_iptables_restore_failures_total`, retries on the doubling
//! backoff without waiting for another change, keeps the previous rules in the kernel meanwhile,
//! and programs the change once the lock is free.
//!
//! The lock is real: the file iptables-legacy locks, held with `flock(2)` by this test. The
//! proxy is given its own lock file (`XTABLES_LOCKFILE`, which the iptables tools read), so the
//! host's `/run/xtables.lock` and everyone else's iptables stay free. iptables-nft takes no
//! lock (its `-w` is accepted and ignored; the kernel serialises nf_tables transactions), so
//! the nft flavour has no such fault to inject.

#![allow(
    clippy::disallowed_methods,
    reason = "runs the built binary, iptables and python in a namespace, writes manifests"
)]

use support::host;
use support::manifest_yaml;

use std::time::{Duration, Instant};

use host::{ChildGuard, NetNs, metric};
use manifest_yaml::{HTTP, documents, node, service, serving_on, slice};

/// The Node, and the Service `web` whose one endpoint is `endpoint`.
fn manifests(endpoint: &str) -> String {
    documents(&[
        node("node-a", "10.0.0.11", Some("10.244.1.0/24")),
        service("web", "10.96.1.10", HTTP, "  type: ClusterIP\n"),
        slice("web", HTTP, &serving_on(endpoint, "node-a")),
    ])
}

const FAILURES: &str =
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv4\"}";
const PARTIAL_FAILURES: &str =
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family=\"IPv4\"}";

/// The DNAT targets of our endpoint chains in the namespace's legacy nat table (read without
/// the lock: `iptables-save` takes none).
fn dnat_targets(ns: &NetNs) -> Vec<String> {
    ns.output("iptables-legacy-save", &["-t", "nat"])
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SEP-") && l.contains("DNAT"))
        .filter_map(|l| l.split("--to-destination ").nth(1).map(str::to_owned))
        .collect()
}

#[test]
fn a_held_xtables_lock_fails_syncs_that_are_counted_and_retried_and_the_old_rules_stay() {
    let ns = NetNs::new("kprs-xtlock");
    // The kubelet's marker chain in legacy: the proxy chooses iptables-legacy, as on a node
    // whose kubelet uses it.
    ns.output(
        "iptables-legacy",
        &["-t", "mangle", "-N", "KUBE-IPTABLES-HINT"],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let lock_path = dir.path().join("xtables.lock");
    let manifest_dir = dir.path().join("manifests");
    std::fs::create_dir(&manifest_dir).expect("manifest dir");
    let cluster = manifest_dir.join("cluster.yaml");
    std::fs::write(&cluster, manifests("10.244.1.10")).expect("write manifests");
    let mut proxy = ChildGuard::spawn(
        &format!("{}-proxy", ns.name),
        ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"))
            .env("XTABLES_LOCKFILE", &lock_path)
            .args(["--proxy-mode=iptables", "--manifests"])
            .arg(&manifest_dir)
            .args([
                "--hostname-override=node-a",
                "--cluster-cidr=10.244.0.0/16",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
                "--iptables-sync-period=30s",
                "-v=4",
            ]),
    );
    proxy.wait_until("programmed", Duration::from_secs(30), || {
        dnat_targets(&ns) == ["10.244.1.10:8080"] && metric(&ns, FAILURES).is_some()
    });
    assert!(
        proxy
            .log_tail(200)
            .contains("iptables back end chosen flavour=\"legacy\"")
            || std::fs::read_to_string(&proxy.log)
                .unwrap_or_default()
                .contains("flavour=\"legacy\""),
        "legacy chosen:\n{}",
        proxy.log_tail(30)
    );
    assert_eq!(metric(&ns, FAILURES), Some(0.0));

    // Another process takes the lock; then the endpoint moves.
    let lock = std::fs::File::create(&lock_path).expect("lock file");
    lock.lock().expect("hold the xtables lock");
    let held_at = Instant::now();
    std::fs::write(&cluster, manifests("10.244.1.11")).expect("write manifests");

    // Each attempt waits out `-w 5` before iptables-restore gives up; the retries follow at
    // 1 s, 2 s, 4 s, ... after a failure (syncPeriod, 30 s here, is the cap), so three failures
    // come within about 25 s. A retry that waited for syncPeriod, or for another change,
    // would not.
    proxy.wait_until("three failures", Duration::from_secs(40), || {
        metric(&ns, FAILURES).is_some_and(|n| n >= 3.0)
    });
    let failures_seen = metric(&ns, FAILURES).expect("scraped");
    let held_for = held_at.elapsed();
    // Only the first attempt was partial: the retries after a failure are full syncs.
    assert_eq!(metric(&ns, PARTIAL_FAILURES), Some(1.0));
    assert_eq!(
        dnat_targets(&ns),
        ["10.244.1.10:8080"],
        "the previous rules stay in place while the lock is held"
    );
    let log = std::fs::read_to_string(&proxy.log).expect("proxy log");
    assert!(
        log.contains("sync failed; the previous rules stay in place")
            && log.contains("holding the xtables lock")
            && log.contains("retry_in=\"1s\""),
        "the first failure is logged with the tool's words:\n{}",
        proxy.log_tail(30)
    );
    assert!(
        log.contains("sync failed again"),
        "retries are logged:\n{}",
        proxy.log_tail(30)
    );

    // The other process lets go: the next retry programs the change.
    drop(lock);
    let freed_at = Instant::now();
    proxy.wait_until("converged", Duration::from_secs(40), || {
        dnat_targets(&ns) == ["10.244.1.11:8080"]
    });
    let converged_in = freed_at.elapsed();
    // The runner logs the sync once it has returned, a moment after the kernel holds its rules.
    let log_path = proxy.log.clone();
    proxy.wait_until("the success logged", Duration::from_secs(10), || {
        std::fs::read_to_string(&log_path)
            .is_ok_and(|log| log.contains("sync succeeded again after failures"))
    });
    let failures = metric(&ns, FAILURES).expect("scraped");
    eprintln!(
        "xtables lock held {held_for:?}: {failures_seen} failed syncs counted then; \
         {failures} in all; converged {converged_in:?} after the lock was freed"
    );
}
