//! Endpoint changes against a synced proxy.
//!
//! - One change: the probe Service's endpoint moves to the pod's other address. Timed from the
//!   moment before the API write to the first connection through the ClusterIP that the new
//!   address answers (a watcher connecting every 5 ms); next to it, what the proxy reports for
//!   the syncs in between (mean `sync_proxy_rules_duration_seconds`) and for the change
//!   (`network_programming_duration_seconds`). Done [`CHANGES`] times, back and forth, each
//!   figure the median: in a one-CPU guest a single change's short sync is as often
//!   preempted by the harness's own probes and the API server as not.
//! - Churn: one endpoint of a different Service replaced [`Churn::rate`] times a second for
//!   [`Churn::duration`], each write stamped with the trigger-time annotation; then the harness
//!   waits until the proxy has counted every change in its programming-latency histogram (or the
//!   drain limit passes) and reports that histogram's mean and the buckets of p50/p90/p99.
//!
//! [`Churn::rate`]: super::options::Churn
//! [`Churn::duration`]: super::options::Churn

use std::time::{Duration, SystemTime};

use super::measure::Session;
use super::metrics::{Histogram, PROGRAMMING, SYNC_DURATION};
use super::objects::{Cluster, apply_slice};
use super::report::Figure;
use super::soak;
use super::watch::{Outcome, seconds_between};

/// How many single changes [`one_change`] times.
const CHANGES: usize = 5;

/// Columns 4-6: probe latency, the proxy's sync duration, the proxy's programming latency; each
/// the median of [`CHANGES`] changes, with every value in a note.
pub async fn one_change(s: &mut Session<'_>, cluster: &mut Cluster) -> Vec<Figure> {
    let mut runs: Vec<Vec<Figure>> = Vec::with_capacity(CHANGES);
    for n in 0..CHANGES {
        if n > 0 {
            // Past minSyncPeriod since the previous change's sync, as the first one is.
            tokio::time::sleep(super::idle::REST).await;
        }
        let run = change_once(s, cluster).await;
        let measured = run.iter().all(|f| matches!(f, Figure::Secs(_)));
        runs.push(run);
        if !measured {
            // A limit or an error: report that change as it was.
            return runs.pop().unwrap_or_default();
        }
    }
    let column = |i: usize| -> Vec<f64> {
        let mut v: Vec<f64> = runs
            .iter()
            .filter_map(|r| match r.get(i) {
                Some(Figure::Secs(x)) => Some(*x),
                _ => None,
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let shown = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{:.2}", x * 1000.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (probe, sync, programming) = (column(0), column(1), column(2));
    s.notes.push(format!(
        "endpoint change, {CHANGES} changes (ms, sorted): probe {}; its sync {}; programming {}",
        shown(&probe),
        shown(&sync),
        shown(&programming)
    ));
    [probe, sync, programming]
        .iter()
        .map(|v| {
            v.get(v.len() / 2)
                .map_or(Figure::Missing, |m| Figure::Secs(*m))
        })
        .collect()
}

/// One change, timed: probe latency, the proxy's sync duration, its programming latency.
async fn change_once(s: &mut Session<'_>, cluster: &mut Cluster) -> Vec<Figure> {
    let limit = s.opts.limits.change;
    let missing = vec![Figure::Missing; 3];
    let before = match s.metrics().await {
        Ok(m) => m,
        Err(e) => {
            s.notes.push(format!("endpoint change: {e}"));
            return missing;
        }
    };
    let want = if cluster.probe_ip() == super::objects::POD_A {
        super::objects::POD_B
    } else {
        super::objects::POD_A
    };
    let mut watcher = match s.watch_probe(want, Duration::from_millis(5), limit) {
        Ok(w) => w,
        Err(e) => {
            s.notes.push(e);
            return missing;
        }
    };
    if let Err(e) = watcher.armed().await {
        s.notes.push(format!("endpoint change: {e}"));
        return missing;
    }
    let written = SystemTime::now();
    if let Err(e) = cluster.move_probe_endpoint().await {
        s.notes.push(format!("endpoint change: {e}"));
        return missing;
    }
    let probe = match watcher.outcome().await {
        Outcome::Seen(at) => Figure::Secs(seconds_between(written, at)),
        Outcome::Timeout(last) => {
            s.notes.push(format!(
                "endpoint change not seen within {limit:?} (last attempt: {last})"
            ));
            Figure::Over(limit.as_secs_f64())
        }
        Outcome::Failed(e) => {
            s.notes.push(e);
            Figure::Missing
        }
    };
    // The proxy counts its sync after the rules are in; give it a moment to publish.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (mut sync, mut programming) = (Histogram::default(), Histogram::default());
    while tokio::time::Instant::now() < deadline {
        if let Ok(now) = s.metrics().await {
            sync = now
                .histogram(SYNC_DURATION)
                .since(&before.histogram(SYNC_DURATION));
            programming = now
                .histogram(PROGRAMMING)
                .since(&before.histogram(PROGRAMMING));
            if sync.count >= 1.0 && programming.count >= 1.0 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if sync.count > 1.0 {
        s.notes.push(format!(
            "endpoint change: {} syncs ran meanwhile; their mean duration is shown",
            sync.count
        ));
    }
    vec![
        probe,
        sync.mean().map_or(Figure::Missing, Figure::Secs),
        programming.mean().map_or(Figure::Missing, Figure::Secs),
    ]
}

/// Columns 7-11: changes written / programmed, programming latency mean, p50, p90, p99.
pub async fn churn(s: &mut Session<'_>, cluster: &mut Cluster) -> Vec<Figure> {
    let churn = s.opts.churn;
    let missing = vec![Figure::Missing; 5];
    let before = match s.metrics().await {
        Ok(m) => m.histogram(PROGRAMMING),
        Err(e) => {
            s.notes.push(format!("churn: {e}"));
            return missing;
        }
    };
    let period = Duration::from_secs_f64(1.0 / churn.rate.max(0.001));
    let total = (churn.rate * churn.duration.as_secs_f64()).round() as usize;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut writes = Vec::with_capacity(total);
    let per_sample = ((soak::EVERY.as_secs_f64() * churn.rate).round() as usize).max(1);
    let mut samples = Vec::new();
    let began = tokio::time::Instant::now();
    for i in 0..total {
        ticker.tick().await;
        if i.is_multiple_of(per_sample)
            && let Some(sample) = sample(s, began.elapsed()).await
        {
            samples.push(sample);
        }
        let v = cluster.next_change();
        let client = cluster.client();
        writes.push(tokio::spawn(async move { apply_slice(&client, v).await }));
    }
    let mut written = 0;
    for w in writes {
        match w.await {
            Ok(Ok(())) => written += 1,
            Ok(Err(e)) => s.notes.push(format!("churn write failed: {e}")),
            Err(e) => s.notes.push(format!("churn write task: {e}")),
        }
    }
    let turnover = soak::turnover(cluster.scale().services, churn.rate);
    s.notes
        .push(soak::summary(&samples, churn.duration, turnover));
    s.soak = samples;
    let ended = SystemTime::now();
    let limit = s.opts.limits.drain;
    let mut seen = Histogram::default();
    let mut stalled_since = tokio::time::Instant::now();
    loop {
        match s.metrics().await {
            Ok(m) => {
                let now = m.histogram(PROGRAMMING).since(&before);
                if now.count != seen.count {
                    stalled_since = tokio::time::Instant::now();
                }
                seen = now;
            }
            Err(e) => {
                s.notes.push(format!("churn: {e}"));
                break;
            }
        }
        if seen.count >= written as f64 {
            break;
        }
        let waited = seconds_between(ended, SystemTime::now());
        if waited >= limit.as_secs_f64() {
            s.notes.push(format!(
                "churn: {} of {written} changes counted as programmed within the drain limit ({limit:?})",
                seen.count
            ));
            break;
        }
        if seen.count > 0.0 && stalled_since.elapsed() >= Duration::from_secs(10) {
            s.notes.push(format!(
                "churn: the proxy counted {} of {written} changes and then nothing for 10 s",
                seen.count
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let bound = |q| {
        seen.quantile_bound(q)
            .map_or(Figure::Missing, Figure::AtMost)
    };
    vec![
        Figure::Changes(written, seen.count),
        seen.mean().map_or(Figure::Missing, Figure::Secs),
        bound(0.5),
        bound(0.9),
        bound(0.99),
    ]
}

/// The proxy's resident memory and open descriptors from its own metrics, and its tasks, `at`
/// into the churn.
async fn sample(s: &mut Session<'_>, at: Duration) -> Option<soak::Sample> {
    let m = s.metrics().await.ok()?;
    Some(soak::Sample {
        at_secs: at.as_secs_f64(),
        rss_bytes: m.value("process_resident_memory_bytes")?,
        open_fds: m.value("process_open_fds")?,
        tasks: soak::tasks(s.pid)?,
    })
}
