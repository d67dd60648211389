//! Stopping on SIGTERM (what the kubelet sends a terminating pod) as on SIGINT: one "stopping"
//! line naming the signal, `/healthz` answering 503 with `"stopping":true` so load balancers
//! drain the node, and the userspace relay's connections given up to [`GRACE`] to finish
//! before the process exits. The kernel's rules stay as they are, as when upstream stops.
//!
//! [`drained`] is the waiting rule, over any count of open connections and tokio's clock.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

use crate::dataplane::counters::RelaySource;
use crate::health::SharedHealth;

/// How long open relay connections may take to finish: within the kubelet's default
/// `terminationGracePeriodSeconds` (30 s), so the process ends before it is killed.
pub const GRACE: Duration = Duration::from_secs(25);

/// How often the open connections are counted while draining.
const POLL: Duration = Duration::from_millis(100);

/// Waits for SIGINT or SIGTERM; the signal's name. A signal that cannot be watched leaves the
/// other (and the default action for itself).
pub fn signalled() -> impl Future<Output = &'static str> {
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let next = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = next(term.ok()) => "SIGTERM",
            _ = next(int.ok()) => "SIGINT",
        }
    }
}

/// Runs the proxy (`run`) until its source ends or a signal asks it to stop; then it keeps
/// running (relaying, syncing) while [`stop`] drains.
pub async fn run_until_stopped(
    run: impl Future<Output = ()>,
    health: &SharedHealth,
    relay: Option<&dyn RelaySource>,
) {
    tokio::pin!(run);
    tokio::select! {
        () = &mut run => tracing::info!("the source ended; stopping"),
        signal = signalled() => {
            tokio::select! {
                () = stop(signal, health, relay) => {}
                () = &mut run => {}
            }
        }
    }
}

/// What the proxy does once [`signalled`]: the line, the health answer, the drain.
pub async fn stop(signal: &str, health: &SharedHealth, relay: Option<&dyn RelaySource>) {
    tracing::info!(signal, "stopping");
    health.stop();
    let Some(relay) = relay else { return };
    let open = || {
        relay
            .listeners()
            .iter()
            .map(|l| l.counts.active)
            .sum::<u64>()
    };
    let left = open();
    if left == 0 {
        return;
    }
    tracing::info!(connections = left, grace = %crate::go_duration::GoDuration(GRACE),
        "waiting for relayed connections to finish");
    let left = drained(open, GRACE, POLL).await;
    if left > 0 {
        tracing::warn!(
            connections = left,
            "relayed connections still open after the grace period; closing them"
        );
    }
}

/// Waits until `open()` is 0 or `grace` has passed, counting every `poll`; the count left.
pub async fn drained(open: impl Fn() -> u64, grace: Duration, poll: Duration) -> u64 {
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let left = open();
        if left == 0 || tokio::time::Instant::now() >= deadline {
            return left;
        }
        tokio::time::sleep(poll.min(deadline - tokio::time::Instant::now())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[tokio::test(start_paused = true)]
    async fn connections_that_finish_end_the_wait_early() {
        let open = Arc::new(AtomicU64::new(3));
        let closing = open.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            closing.store(0, Ordering::SeqCst);
        });
        let start = tokio::time::Instant::now();
        let left = drained(|| open.load(Ordering::SeqCst), GRACE, POLL).await;
        assert_eq!(left, 0);
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_grace_period_bounds_the_wait() {
        let start = tokio::time::Instant::now();
        assert_eq!(drained(|| 5, GRACE, POLL).await, 5);
        assert_eq!(start.elapsed(), GRACE);
    }

    fn send_sigterm() {
        #[allow(clippy::disallowed_methods, reason = "sends the signal with kill(1)")]
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    #[tokio::test]
    async fn sigterm_is_caught_and_named() {
        let caught = signalled();
        // The handler is installed when `signalled` is called, before the signal is sent.
        send_sigterm();
        let name = tokio::time::timeout(Duration::from_secs(5), caught)
            .await
            .unwrap();
        assert_eq!(name, "SIGTERM");
    }

    #[tokio::test]
    async fn sigterm_stops_a_running_proxy_and_health_says_it_is_stopping() {
        let health = SharedHealth::new(Duration::from_secs(60));
        let (running_tx, running) = tokio::sync::oneshot::channel::<()>();
        let proxy = async move {
            let _ = running_tx.send(());
            std::future::pending::<()>().await;
        };
        let stopped = tokio::spawn({
            let health = health.clone();
            async move { run_until_stopped(proxy, &health, None).await }
        });
        running.await.unwrap();
        send_sigterm();
        tokio::time::timeout(Duration::from_secs(5), stopped)
            .await
            .unwrap()
            .unwrap();
        let status = health.status(std::time::SystemTime::UNIX_EPOCH);
        assert!(status.stopping && !status.healthy);
    }
}
