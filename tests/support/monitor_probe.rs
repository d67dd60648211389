//! Waiting until a running nf_tables monitor hears outside changes, for the kernel tests of the
//! modes it watches (nftables, iptables-nft).

use std::time::Duration;

use kube_proxy_rs::dataplane::monitor::Drift;

/// Makes an outside change with `probe(i)` until the monitor reports one (a freshly started
/// monitor may not be listening yet), then lets late reports of earlier probes arrive and
/// forgets them all.
pub async fn wait_until_listening(drift: &Drift, mut probe: impl FnMut(usize)) {
    let mut listening = false;
    for i in 0..50 {
        probe(i);
        if tokio::time::timeout(Duration::from_millis(200), drift.changed())
            .await
            .is_ok()
        {
            listening = true;
            break;
        }
    }
    assert!(listening, "the monitor never reported an outside change");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = tokio::time::timeout(Duration::from_millis(10), drift.changed()).await;
    drift.take_pending();
}
