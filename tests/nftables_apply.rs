//! The nftables applier against the real kernel, each test in a fresh network namespace (root):
//! programming the example cluster and reading it back, small transactions for small changes,
//! a refused transaction leaving the old rules, adoption on restart, and repair after another
//! program deletes our table; an idle sync sends no netlink message at all (counted); a full
//! sync reads the kernel before it plans again.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft and ip, and wait on the real clock for the monitor"
)]

#[path = "nftables_apply/backends.rs"]
mod backends;
use support::example_cluster;
use support::host;
use support::monitor_probe;
use support::synthetic;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use backends::{RecordingReads, Refusing};
use example_cluster::{changed, example, without_one_web_endpoint};
use host::NetNs;
use kube_proxy_rs::cluster::source::manifests;
use kube_proxy_rs::cluster::source::{Event, Object};
use kube_proxy_rs::cluster::topology::Features;
use kube_proxy_rs::cluster::{Changes, IpFamily, Snapshot, Tracker};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::monitor::{self, OurTable};
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane, plan_all};
use kube_proxy_rs::nft::adopt::parse;
use kube_proxy_rs::nft::backend;
use kube_proxy_rs::nft::{Family, NftCommand, Ruleset};
use synthetic::Synthetic;

/// The mode as `main` makes it, with the default (netlink) encoder.
fn dataplane(ns: &NetNs) -> NftablesDataplane {
    NftablesDataplane::new(
        ModeConfig::default(),
        backend::for_encoder(NftablesEncoder::default(), Some(&ns.name)),
        Drift::new(),
    )
}

/// What the kernel holds, as nft lists it (independent of the encoder under test), per family.
fn kernel(ns: &NetNs) -> Vec<Ruleset> {
    let mut nft = NftCommand::in_netns(&ns.name);
    [Family::Ip, Family::Ip6]
        .into_iter()
        .map(|f| {
            let dump = nft.list_json(f).expect("dump").expect("our table exists");
            let parsed = parse(&dump, f).expect("parses");
            assert!(
                parsed.unknown.is_empty() && parsed.foreign.is_empty(),
                "unknown {:?}, foreign {:?}",
                parsed.unknown,
                parsed.foreign
            );
            parsed.ruleset
        })
        .collect()
}

fn planned(snap: &Snapshot) -> Vec<Ruleset> {
    plan_all(snap, &ModeConfig::default()).into()
}

fn operations(report: &kube_proxy_rs::dataplane::SyncReport) -> usize {
    report.families.iter().map(|f| f.operations).sum()
}

fn no_changes() -> Changes {
    Changes::default()
}

#[test]
fn the_example_cluster_is_programmed_and_reads_back_as_planned() {
    let ns = NetNs::new("nfa-prog");
    let snap = example();
    let mut dp = dataplane(&ns);
    let report = dp.sync(&snap, &no_changes(), true).expect("first sync");
    assert!(report.full);
    assert_eq!(kernel(&ns), planned(&snap));
    let v4 = &report.families[0];
    assert_eq!(v4.family, Some(IpFamily::V4));
    assert_eq!(v4.objects, planned(&snap)[0].objects());
    // The no-local-endpoint counts come from the snapshot.
    assert_eq!(
        (
            v4.no_local_endpoints_internal,
            v4.no_local_endpoints_external
        ),
        {
            let counted = snap.no_local_endpoints(IpFamily::V4);
            (counted.internal, counted.external)
        }
    );
}

#[test]
fn one_endpoint_change_sends_a_small_transaction() {
    let ns = NetNs::new("nfa-small");
    let before = example();
    let (after, changes) = without_one_web_endpoint(&before);
    let mut dp = dataplane(&ns);
    dp.sync(&before, &no_changes(), true).expect("first sync");
    let report = dp.sync(&after, &changes, false).expect("second sync");
    assert!(!report.full);
    let ops = operations(&report);
    assert!(
        (1..=8).contains(&ops),
        "one endpoint should touch a handful of elements, not {ops}"
    );
    assert_eq!(kernel(&ns), planned(&after));
}

#[test]
fn an_idle_sync_sends_no_netlink_message() {
    let ns = NetNs::new("nfa-idle");
    let before = example();
    let mut dp = dataplane(&ns);
    let first = dp.sync(&before, &no_changes(), true).expect("first sync");
    assert!(
        first.netlink_messages > 0,
        "the first sync reads and programs the kernel: {first:?}"
    );
    let idle = dp.sync(&before, &no_changes(), false).expect("idle sync");
    assert!(!idle.full);
    assert_eq!(idle.netlink_messages, 0, "nothing changed: nothing sent");
    let (after, changes) = without_one_web_endpoint(&before);
    let changed = dp.sync(&after, &changes, false).expect("one change");
    assert!(
        changed.netlink_messages > 0,
        "a change is sent as a batch: {changed:?}"
    );
}

/// Our objects in `yaml`, which must hold no mistake.
fn objects(yaml: &str) -> Vec<Object> {
    let parsed = manifests::parse(yaml, "test");
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    parsed.objects
}

/// A NodePort Service `extra` (TCP 81, node port 30081) and its slice with `ips`.
fn extra(ips: &[&str]) -> Vec<Object> {
    let endpoints: String = ips
        .iter()
        .map(|ip| {
            format!(
                "  - addresses: [{ip}]\n    conditions: {{ready: true, serving: true, terminating: false}}\n    nodeName: node-b\n"
            )
        })
        .collect();
    objects(&format!(
        "apiVersion: v1
kind: Service
metadata: {{name: extra, namespace: default}}
spec:
  type: NodePort
  clusterIP: 10.96.9.9
  clusterIPs: [10.96.9.9]
  ipFamilies: [IPv4]
  ipFamilyPolicy: SingleStack
  selector: {{app: extra}}
  ports:
    - {{name: http, protocol: TCP, port: 81, targetPort: 8081, nodePort: 30081}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: extra-1
  namespace: default
  labels: {{kubernetes.io/service-name: extra}}
addressType: IPv4
ports:
  - {{name: http, protocol: TCP, port: 8081}}
endpoints:
{endpoints}"
    ))
}

#[test]
fn partial_syncs_with_the_trackers_changes_keep_the_kernel_as_planned() {
    let ns = NetNs::new("nfa-steps");
    let mut tracker = Tracker::new("node-a", Features::default());
    let loaded = manifests::load_dir(Path::new("examples/cluster")).expect("example loads");
    let web_slice = loaded
        .objects
        .iter()
        .find(|o| matches!(o, Object::EndpointSlice(s) if s.metadata.name.as_deref() == Some("web-x7k2p")))
        .cloned()
        .expect("the example has web's slice");
    let web = loaded
        .objects
        .iter()
        .find(|o| matches!(o, Object::Service(s) if s.metadata.name.as_deref() == Some("web")))
        .cloned()
        .expect("the example has web");
    for event in loaded.into_events() {
        tracker.apply(&event);
    }
    let mut dp = dataplane(&ns);
    let (snap, _) = tracker.snapshot();
    dp.sync(&snap, &no_changes(), true).expect("first sync");
    assert_eq!(kernel(&ns), planned(&snap));

    let Object::EndpointSlice(mut fewer) = web_slice.clone() else {
        unreachable!()
    };
    fewer.endpoints.pop();
    let steps: Vec<(&str, Vec<Event>)> = vec![
        (
            "web loses an endpoint (another pick chain)",
            vec![Event::Applied(Object::EndpointSlice(fewer))],
        ),
        (
            "a new NodePort Service with one endpoint",
            extra(&["10.244.2.50"])
                .into_iter()
                .map(Event::Applied)
                .collect(),
        ),
        (
            "web gets its endpoint back; extra gets a second one",
            std::iter::once(web_slice)
                .chain(extra(&["10.244.2.50", "10.244.2.51"]))
                .map(Event::Applied)
                .collect(),
        ),
        ("web is deleted", vec![Event::Deleted(web)]),
        (
            "extra is deleted",
            extra(&[]).into_iter().map(Event::Deleted).collect(),
        ),
    ];
    for (step, events) in steps {
        for event in &events {
            tracker.apply(event);
        }
        let (snap, changes) = tracker.snapshot();
        assert!(
            !changes.ports.is_empty(),
            "{step}: the tracker saw a change"
        );
        let report = dp.sync(&snap, &changes, false).expect(step);
        assert!(!report.full, "{step}: a steady-state sync");
        assert!(operations(&report) > 0, "{step}: something was sent");
        assert_eq!(kernel(&ns), planned(&snap), "{step}");
    }
}

/// The real backend, made to send a script the kernel refuses when asked: a rule into a chain
/// that does not exist, appended to the real transaction.
/// nft 1.0.6 refused rules that use an endpoints map from an earlier transaction when the map's
/// data was declared with `th dport` ("conflicting protocols specified: ip vs. th"): every pick
/// chain added after start-up failed. Start with no service at all, then add the whole example.
#[test]
fn pick_chains_added_in_a_later_transaction_are_accepted() {
    let ns = NetNs::new("nfa-later");
    let full = example();
    let empty = Snapshot::new(full.node.clone(), Arc::default());
    let mut dp = dataplane(&ns);
    dp.sync(&empty, &no_changes(), true).expect("first sync");
    let added = changed(full.ports.keys().cloned());
    dp.sync(&full, &added, false)
        .expect("pick chains added later are accepted");
    assert_eq!(kernel(&ns), planned(&full));
}

#[test]
fn a_refused_transaction_leaves_the_previous_rules_and_the_next_sync_is_full() {
    // How each encoder points at the failure: nft's script line, or the refused operation.
    let encoders = [
        (NftablesEncoder::Netlink, "refused operation"),
        (NftablesEncoder::Nft, "script line"),
    ];
    for (encoder, pointer) in encoders {
        let ns = NetNs::new("nfa-fail");
        let before = example();
        let (after, changes) = without_one_web_endpoint(&before);
        let backend = Refusing {
            inner: backend::for_encoder(encoder, Some(&ns.name)),
            refuse_next: false,
        };
        let mut dp = NftablesDataplane::with_backend(ModeConfig::default(), backend, Drift::new());
        dp.sync(&before, &no_changes(), true).expect("first sync");

        dp.applier_mut().backend_mut().refuse_next = true;
        let error = dp
            .sync(&after, &changes, false)
            .expect_err("the kernel refuses");
        let text = kube_proxy_rs::causes::one_line(&error);
        assert!(
            text.contains("no-such-chain") && text.contains(pointer),
            "{encoder:?}: the error names the failing operation: {text}"
        );
        assert_eq!(
            kernel(&ns),
            planned(&before),
            "{encoder:?}: the old rules stay"
        );

        let report = dp.sync(&after, &no_changes(), false).expect("retry");
        assert!(report.full, "the sync after a failure reads the kernel");
        assert_eq!(kernel(&ns), planned(&after), "{encoder:?}");
    }
}

#[test]
fn a_restart_adopts_the_table_and_changes_only_what_differs() {
    let ns = NetNs::new("nfa-adopt");
    let before = example();
    let (after, _) = without_one_web_endpoint(&before);
    dataplane(&ns)
        .sync(&before, &no_changes(), true)
        .expect("first run");

    let report = dataplane(&ns)
        .sync(&before, &no_changes(), true)
        .expect("restart");
    assert!(report.full);
    assert_eq!(operations(&report), 0, "nothing changed, nothing is sent");

    let report = dataplane(&ns)
        .sync(&after, &no_changes(), true)
        .expect("restart with a change");
    let ops = operations(&report);
    assert!((1..=8).contains(&ops), "only the difference: {ops}");
    assert_eq!(kernel(&ns), planned(&after));
}

/// A full sync over rules the kernel holds reads the kernel while the previous plan is still
/// the planner's and only then plans again, so the previous plan, the new one and the table
/// read back are never held at once (the full resync's memory peak). At start-up the new plan
/// comes first and names what to read.
#[test]
fn a_full_sync_reads_the_kernel_before_it_plans_again() {
    let ns = NetNs::new("nfa-order");
    let before = example();
    let (after, _) = without_one_web_endpoint(&before);
    let backend = RecordingReads {
        inner: backend::for_encoder(NftablesEncoder::default(), Some(&ns.name)),
        expected: Vec::new(),
    };
    let mut dp = NftablesDataplane::with_backend(ModeConfig::default(), backend, Drift::new());
    dp.sync(&before, &no_changes(), true).expect("first sync");
    let reads = std::mem::take(&mut dp.applier_mut().backend_mut().expected);
    assert_eq!(reads, planned(&before), "at start-up, read by the new plan");

    let report = dp.sync(&after, &no_changes(), true).expect("full sync");
    assert!(report.full);
    let reads = std::mem::take(&mut dp.applier_mut().backend_mut().expected);
    assert_eq!(reads, planned(&before), "read by the plan the kernel holds");
    assert_ne!(planned(&before), planned(&after));
    assert_eq!(kernel(&ns), planned(&after));
    let ops = operations(&report);
    assert!((1..=8).contains(&ops), "only the difference: {ops}");
}

/// Waits until the monitor reports outside changes (to a scratch chain in our table, which
/// must exist), then forgets every report so far.
async fn wait_until_listening(ns: &NetNs, drift: &Drift) {
    monitor_probe::wait_until_listening(drift, |i| {
        let probe = format!(
            "add chain ip kube-proxy-rs probe-{i} ; delete chain ip kube-proxy-rs probe-{i}"
        );
        ns.output("nft", &[&probe]);
    })
    .await;
}

/// `nft ARGS` in the named namespace, from any thread.
fn nft_in(netns: &str, args: &str) {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", netns, "nft", args])
        .output()
        .expect("run nft");
    assert!(out.status.success(), "nft {args}: {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_monitor_hears_nothing_until_it_resumes() {
    let ns = NetNs::new("nfa-pause");
    let drift = Drift::new();
    let watcher = tokio::spawn(monitor::run(
        Some(ns.name.clone()),
        drift.clone(),
        &OurTable,
    ));
    ns.output("nft", &["add", "table", "ip", "kube-proxy-rs"]);
    wait_until_listening(&ns, &drift).await;
    let before = drift.noticed();

    let (d, name) = (drift.clone(), ns.name.clone());
    let heard_while_paused = tokio::task::spawn_blocking(move || {
        let paused = d.pause_monitor().expect("the running monitor pauses");
        nft_in(&name, "add chain ip kube-proxy-rs while-paused");
        std::thread::sleep(Duration::from_millis(300));
        let heard = d.noticed();
        drop(paused);
        heard
    })
    .await
    .expect("pause thread");
    assert_eq!(
        heard_while_paused, before,
        "a paused monitor heard a change"
    );
    assert_eq!(drift.pauses(), 1);

    ns.output(
        "nft",
        &["add", "chain", "ip", "kube-proxy-rs", "after-resume"],
    );
    tokio::time::timeout(Duration::from_secs(2), drift.changed())
        .await
        .expect("the resumed monitor hears the next change");
    assert!(drift.noticed() > before);

    watcher.abort();
    let _ = watcher.await;
}

/// Another program's transaction of `elements` set elements in a table of its own
/// (`other-program`, which the monitor does not watch), through `nft -f`.
fn large_outside_transaction(ns: &NetNs, elements: u32) {
    let list: Vec<String> = (0..elements)
        .map(|i| format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255))
        .collect();
    let script = format!(
        "add table ip other-program\n\
         add set ip other-program big {{ type ipv4_addr; }}\n\
         add element ip other-program big {{ {} }}\n",
        list.join(", ")
    );
    ns.output_fed("nft", &["-f", "-"], &script);
}

/// The kernel drops notifications (`ENOBUFS`) when the monitor's socket has no room: made so
/// on demand with a small receive buffer and a large transaction. What was dropped may have
/// touched our table, so it counts as an outside change (the next sync is full). The same
/// transaction, heard whole by a monitor with the proxy's buffer, is not ours to care about.
/// One thread: the monitor reads nothing while the transaction runs (the test blocks it), as
/// a monitor behind a busy sync would.
#[tokio::test]
async fn dropped_notifications_count_as_an_outside_change() {
    for (buffer, dropped) in [(1, true), (32 << 20, false)] {
        let ns = NetNs::new("nfa-nobufs");
        let drift = Drift::new();
        let watcher = tokio::spawn(monitor::run_with_buffer(
            Some(ns.name.clone()),
            drift.clone(),
            &OurTable,
            buffer,
        ));
        ns.output("nft", &["add", "table", "ip", "kube-proxy-rs"]);
        wait_until_listening(&ns, &drift).await;
        let before = drift.noticed();
        large_outside_transaction(&ns, 20_000);
        // Counted, not awaited: the monitor may count it before anyone waits.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        while drift.noticed() == before && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            drift.noticed() > before,
            dropped,
            "a {buffer}-byte buffer: notifications {} be dropped and counted",
            if dropped { "must" } else { "must not" }
        );
        watcher.abort();
        let _ = watcher.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_sync_of_ours_is_not_taken_for_an_outside_change() {
    let ns = NetNs::new("nfa-large");
    let mut dp = dataplane(&ns);
    let drift = dp.drift().clone();
    let watcher = tokio::spawn(monitor::run(
        Some(ns.name.clone()),
        drift.clone(),
        &OurTable,
    ));
    ns.output("nft", &["add", "table", "ip", "kube-proxy-rs"]);
    wait_until_listening(&ns, &drift).await;
    let noticed = drift.noticed();

    // 100,000 endpoints: above the size sent with the monitor paused.
    let snap = Synthetic {
        services: 5_000,
        endpoints: 20,
    }
    .snapshot();
    let report =
        tokio::task::block_in_place(|| dp.sync(&snap, &no_changes(), true)).expect("large sync");
    assert!(operations(&report) >= backend::UNWATCHED_MIN, "{report:?}");
    assert_eq!(
        drift.pauses(),
        1,
        "the large batch went out with the monitor paused"
    );
    let quiet = tokio::time::timeout(Duration::from_millis(500), drift.changed()).await;
    assert!(
        quiet.is_err(),
        "our own large sync was taken for an outside change"
    );
    assert_eq!(drift.noticed(), noticed);

    // Listening again afterwards.
    ns.output("nft", &["delete", "table", "ip", "kube-proxy-rs"]);
    tokio::time::timeout(Duration::from_secs(2), drift.changed())
        .await
        .expect("the deletion after the large sync is noticed");

    watcher.abort();
    let _ = watcher.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outside_deletion_is_noticed_and_repaired_by_the_next_sync() {
    let ns = NetNs::new("nfa-repair");
    let snap = example();
    let mut dp = dataplane(&ns);
    let drift = dp.drift().clone();
    let watcher = tokio::spawn(monitor::run(
        Some(ns.name.clone()),
        drift.clone(),
        &OurTable,
    ));
    dp.sync(&snap, &no_changes(), true).expect("first sync");

    wait_until_listening(&ns, &drift).await;
    let noticed = drift.noticed();

    // Our own transactions are not outside changes.
    let (changed, changes) = without_one_web_endpoint(&snap);
    dp.sync(&changed, &changes, false).expect("own sync");
    let quiet = tokio::time::timeout(Duration::from_millis(500), drift.changed()).await;
    assert!(
        quiet.is_err(),
        "our own transaction was taken for an outside change"
    );

    ns.output("nft", &["delete", "table", "ip", "kube-proxy-rs"]);
    tokio::time::timeout(Duration::from_secs(2), drift.changed())
        .await
        .expect("the deletion is noticed within about a second");
    assert!(drift.noticed() > noticed);
    let report = dp.sync(&changed, &no_changes(), false).expect("repair");
    assert!(report.full, "a pending outside change makes the sync full");
    assert_eq!(drift.repairs(), 1);
    assert_eq!(kernel(&ns), planned(&changed));

    watcher.abort();
    let _ = watcher.await;
}
