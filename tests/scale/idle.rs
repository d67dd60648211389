//! Netlink messages per idle sync: with nothing changed in the cluster, the proxy still syncs
//! every `syncPeriod` (a periodic sync, not full: full ones come hourly, see
//! `src/sync/schedule.rs`), and such a sync should send the kernel nothing at all. The figure is
//! the proxy's own count (`kubeproxy_rs_sync_netlink_messages_total`, ours only: upstream has
//! no such metric) over at least [`IDLE_SYNCS`] partial syncs, read before and after them.
//!
//! Taken right after the first-packet probe, while the proxy is idle and before the endpoint
//! change and the churn, which leave draining IPVS destinations that later syncs read and
//! delete: those are real work, not idle syncs.

use std::time::Duration;

use super::measure::Session;
use super::metrics::Metrics;
use super::report::Figure;

/// Our count of the netlink messages successful syncs sent.
pub const NETLINK_MESSAGES: &str = "kubeproxy_rs_sync_netlink_messages_total";
/// Syncs compared against what was last programmed, and against a fresh read of the kernel.
const PARTIAL_SYNCS: &str = "kubeproxy_sync_partial_proxy_rules_duration_seconds";
const FULL_SYNCS: &str = "kubeproxy_sync_full_proxy_rules_duration_seconds";
/// Periodic syncs to count over.
pub const IDLE_SYNCS: f64 = 2.0;
/// How often the phase reads the metrics.
const POLL: Duration = Duration::from_millis(250);
/// Read again this long after the last sync was counted: the runner records the sync's
/// duration and then its report, so a scrape in between would miss its messages.
const SETTLE: Duration = Duration::from_millis(500);
/// How long the phase rests after the last idle sync before it hands over to the endpoint
/// change: past the default `minSyncPeriod` (1 s) since that sync, so the change is synced at
/// once, as it would be at any moment of a quiet node. Without it the change would land about
/// half a second after a periodic sync and wait out `minSyncPeriod`, timing the harness's own
/// phase boundary instead of the proxy; upstream has no count and skips this phase, so its
/// change is not affected.
pub const REST: Duration = Duration::from_millis(1500);

/// What one reading holds for this phase.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Counts {
    partial: f64,
    full: f64,
    messages: f64,
}

impl Counts {
    fn of(m: &Metrics) -> Option<Counts> {
        Some(Counts {
            partial: m.histogram(PARTIAL_SYNCS).count,
            full: m.histogram(FULL_SYNCS).count,
            messages: m.value(NETLINK_MESSAGES)?,
        })
    }
}

/// The column "netlink messages per idle sync": waits for [`IDLE_SYNCS`] periodic syncs (at
/// most that many sync periods and one more, plus 10 s) and divides the messages they sent by
/// their number. "—" with the reason in the notes for a proxy without the count.
pub async fn messages_per_idle_sync(s: &mut Session<'_>) -> Figure {
    let first = match s.metrics().await {
        Ok(m) => m,
        Err(e) => {
            s.notes.push(format!("idle syncs: {e}"));
            return Figure::Missing;
        }
    };
    let Some(before) = Counts::of(&first) else {
        s.notes.push(format!(
            "netlink messages per idle sync: no `{NETLINK_MESSAGES}` (upstream kube-proxy has no such metric)"
        ));
        return Figure::Missing;
    };
    let period = s.opts.sync_period();
    let limit = period.mul_f64(IDLE_SYNCS + 1.0) + Duration::from_secs(10);
    let deadline = tokio::time::Instant::now() + limit;
    let mut after = before;
    while after.partial - before.partial < IDLE_SYNCS {
        if tokio::time::Instant::now() >= deadline {
            s.notes.push(format!(
                "netlink messages per idle sync: {} partial syncs in {limit:?} (syncPeriod {period:?}), {IDLE_SYNCS} wanted",
                after.partial - before.partial
            ));
            return Figure::Over(limit.as_secs_f64());
        }
        tokio::time::sleep(POLL).await;
        match s.metrics().await.map(|m| Counts::of(&m)) {
            Ok(Some(c)) => after = c,
            Ok(None) => {}
            Err(e) => {
                s.notes.push(format!("idle syncs: {e}"));
                return Figure::Missing;
            }
        }
    }
    tokio::time::sleep(SETTLE).await;
    if let Ok(Some(c)) = s.metrics().await.map(|m| Counts::of(&m)) {
        after = c;
    }
    tokio::time::sleep(REST.saturating_sub(SETTLE)).await;
    summarize(before, after, period, &mut s.notes)
}

/// The figure and its note from the readings around the idle syncs.
fn summarize(before: Counts, after: Counts, period: Duration, notes: &mut Vec<String>) -> Figure {
    let partial = after.partial - before.partial;
    let full = after.full - before.full;
    let messages = after.messages - before.messages;
    let syncs = partial + full;
    let mut note = format!(
        "netlink messages per idle sync: {messages:.0} messages over {syncs:.0} periodic syncs (syncPeriod {}s)",
        period.as_secs()
    );
    if full > 0.0 {
        note.push_str(&format!(
            "; {full:.0} of them full (they read the kernel back), so this is not an idle figure"
        ));
    }
    notes.push(note);
    Figure::Count(messages / syncs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_divided_by_the_syncs_that_sent_them() {
        let before = Counts {
            partial: 3.0,
            full: 1.0,
            messages: 120.0,
        };
        let after = Counts {
            partial: 5.0,
            ..before
        };
        let mut notes = Vec::new();
        let fig = summarize(before, after, Duration::from_secs(5), &mut notes);
        assert_eq!(fig, Figure::Count(0.0));
        assert!(
            notes[0].contains("0 messages over 2 periodic syncs"),
            "{notes:?}"
        );
        let text = "kubeproxy_rs_sync_netlink_messages_total 7\n\
                    kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 4\n";
        let c = Counts::of(&Metrics::parse(text)).expect("ours has the count");
        assert_eq!((c.partial, c.full, c.messages), (4.0, 0.0, 7.0));
        assert_eq!(Counts::of(&Metrics::parse("other 1\n")), None);
    }
}
