//! The reconciler's schedule on tokio's paused clock, with a pass that records its calls.

use std::sync::{Arc, Mutex};

use super::*;
use crate::cluster::{Features, Tracker};
use crate::testing::*;

fn udp_frontends() -> Frontends {
    let mut tracker = Tracker::new("node-a", Features::default());
    tracker.apply(&applied_service(service(
        "kube-system",
        "dns",
        "10.96.0.10",
        &[("dns", 53, "UDP")],
    )));
    tracker.apply(&applied_slice(slice(
        "kube-system",
        "dns",
        "dns-1",
        &[("dns", 5353, "UDP")],
        &[ep("10.244.1.2", "node-a")],
    )));
    Frontends::from_snapshot(&tracker.snapshot().0)
}

#[tokio::test(start_paused = true)]
async fn passes_follow_changes_and_the_period_and_feed_the_metrics() {
    let calls: Arc<Mutex<Vec<IpFamily>>> = Arc::default();
    let recorded = calls.clone();
    let fake = move |_: &Frontends, family: IpFamily| {
        recorded.lock().unwrap().push(family);
        Ok(Pass {
            deleted: 2,
            ..Pass::default()
        })
    };
    let (tx, rx) = watch::channel(None);
    let metrics = Metrics::new();
    let period = Duration::from_secs(30);
    tokio::spawn(run_with(rx, period, metrics.clone(), fake));
    let count = || calls.lock().unwrap().len();

    tokio::time::sleep(Duration::from_secs(45)).await;
    assert_eq!(count(), 0, "nothing before the first successful sync");

    tx.send_replace(Some(Arc::new(udp_frontends())));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(*calls.lock().unwrap(), [IpFamily::V4, IpFamily::V6]);

    tokio::time::sleep(period).await;
    assert_eq!(count(), 4, "one more pass per family a period later");

    tx.send_replace(Some(Arc::new(Frontends::default())));
    tokio::time::sleep(period * 3).await;
    assert_eq!(count(), 4, "no UDP or SCTP frontend: nothing to dump");

    let text = metrics.encode();
    let deleted = text
        .lines()
        .find(|l| {
            l.starts_with("kubeproxy_conntrack_reconciler_deleted_entries_total")
                && l.contains("IPv4")
        })
        .unwrap();
    assert!(deleted.ends_with(" 4"), "{deleted}");
}
