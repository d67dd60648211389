//! The schedule's rules, one behaviour per test, over plain instants (no runtime, no clock).

use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// minSyncPeriod 1 s, syncPeriod 30 s: upstream's defaults.
fn schedule() -> (Schedule, Instant) {
    (Schedule::new(Periods::new(s(1), s(30))), Instant::now())
}

/// Runs one sync at `at` that ends after `took` with `ok`; returns how it started.
fn sync(sch: &mut Schedule, at: Instant, took: Duration, ok: bool) -> Start {
    let (_, reason) = sch.next().expect("a sync is due");
    let start = sch.start(at, reason);
    sch.finish(at + took, start.full, ok);
    start
}

#[test]
fn nothing_runs_before_the_initial_lists_are_in() {
    let (mut sch, t0) = schedule();
    sch.queued(t0);
    assert_eq!(sch.next(), None);
    sch.ready(t0 + s(5));
    assert_eq!(sch.next(), Some((t0 + s(5), Reason::Initial)));
}

#[test]
fn the_first_sync_is_full_and_later_change_syncs_are_not() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    assert!(sync(&mut sch, t0, ms(10), true).full);
    sch.queued(t0 + s(2));
    let start = sync(&mut sch, t0 + s(2), ms(10), true);
    assert_eq!(
        start,
        Start {
            reason: Reason::Changes,
            full: false
        }
    );
}

#[test]
fn a_change_after_a_quiet_spell_syncs_at_once() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, ms(10), true);
    sch.queued(t0 + s(10));
    assert_eq!(sch.next(), Some((t0 + s(10), Reason::Changes)));
}

#[test]
fn changes_within_min_sync_period_of_the_last_sync_wait_for_it_to_pass() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, ms(100), true);
    // The sync ended at 100 ms; changes at 200, 300 and 900 ms all go at 1.1 s.
    for at in [200, 300, 900] {
        sch.queued(t0 + ms(at));
    }
    assert_eq!(sch.next(), Some((t0 + ms(1100), Reason::Changes)));
}

#[test]
fn min_sync_period_counts_from_the_end_of_a_slow_sync() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, s(5), true);
    sch.queued(t0 + s(1));
    assert_eq!(sch.next(), Some((t0 + s(6), Reason::Changes)));
}

#[test]
fn zero_min_sync_period_syncs_every_change_as_soon_as_the_last_sync_ended() {
    let mut sch = Schedule::new(Periods::new(Duration::ZERO, s(30)));
    let t0 = Instant::now();
    sch.ready(t0);
    sync(&mut sch, t0, ms(10), true);
    sch.queued(t0 + ms(11));
    assert_eq!(sch.next(), Some((t0 + ms(11), Reason::Changes)));
}

#[test]
fn only_one_sync_runs_at_a_time() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    let start = sch.start(t0, Reason::Initial);
    sch.queued(t0 + s(3));
    assert_eq!(sch.next(), None);
    assert!(sch.running());
    sch.finish(t0 + s(4), start.full, true);
    assert_eq!(sch.next(), Some((t0 + s(5), Reason::Changes)));
}

#[test]
fn without_changes_a_sync_runs_every_sync_period() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, ms(10), true);
    assert_eq!(sch.next(), Some((t0 + ms(10) + s(30), Reason::Periodic)));
    let start = sync(&mut sch, t0 + s(30), ms(10), true);
    assert!(
        !start.full,
        "periodic syncs are partial until the hourly full one"
    );
}

#[test]
fn a_periodic_sync_is_full_once_the_last_full_one_is_an_hour_old() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, Duration::ZERO, true);
    let mut now = t0;
    let mut fulls = Vec::new();
    for _ in 0..(2 * 3600 / 30) {
        let (at, _) = sch.next().unwrap();
        now = now.max(at);
        if sync(&mut sch, now, Duration::ZERO, true).full {
            fulls.push(now.duration_since(t0));
        }
    }
    assert_eq!(fulls, vec![s(3600), s(7200)]);
}

#[test]
fn a_failed_sync_is_retried_with_doubling_backoff_capped_at_sync_period() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    let mut now = t0;
    let mut delays = Vec::new();
    for i in 0..8 {
        let (at, reason) = sch.next().unwrap();
        if i > 0 {
            assert_eq!(reason, Reason::Retry);
            delays.push(at.duration_since(now).as_secs());
        }
        now = at;
        sync(&mut sch, now, Duration::ZERO, false);
    }
    assert_eq!(delays, vec![1, 2, 4, 8, 16, 30, 30]);
    assert_eq!(sch.failures(), 8);
}

#[test]
fn the_sync_after_a_failure_is_full() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, ms(10), true);
    sch.queued(t0 + s(5));
    assert!(!sync(&mut sch, t0 + s(5), ms(10), false).full);
    let retry = sync(&mut sch, t0 + s(6), ms(10), true);
    assert_eq!(
        retry,
        Start {
            reason: Reason::Retry,
            full: true
        }
    );
    assert_eq!(sch.failures(), 0);
}

#[test]
fn changes_during_a_failure_wait_for_the_retry() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, Duration::ZERO, false);
    sync(&mut sch, t0 + s(1), Duration::ZERO, false);
    // Second failure at 1 s: retry at 3 s even though changes keep coming.
    sch.queued(t0 + ms(1500));
    sch.queued(t0 + ms(2500));
    assert_eq!(sch.next(), Some((t0 + s(3), Reason::Retry)));
}

#[test]
fn a_failed_sync_keeps_its_changes_pending_for_health() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, ms(10), true);
    sch.queued(t0 + s(2));
    let start = sch.start(t0 + s(2), Reason::Changes);
    assert_eq!(
        sch.oldest_pending(),
        Some(t0 + s(2)),
        "in flight is still pending"
    );
    sch.queued(t0 + s(3));
    sch.finish(t0 + s(4), start.full, false);
    assert_eq!(sch.oldest_pending(), Some(t0 + s(2)));
    sync(&mut sch, t0 + s(5), ms(10), true);
    assert_eq!(sch.oldest_pending(), None);
}

#[test]
fn a_failed_periodic_sync_counts_as_pending_from_its_start() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, Duration::ZERO, true);
    sync(&mut sch, t0 + s(30), Duration::ZERO, false);
    assert_eq!(sch.oldest_pending(), Some(t0 + s(30)));
}

#[test]
fn a_forced_full_sync_applies_to_the_next_sync_only() {
    let (mut sch, t0) = schedule();
    sch.ready(t0);
    sync(&mut sch, t0, Duration::ZERO, true);
    sch.force_full();
    sch.queued(t0 + s(2));
    assert!(sync(&mut sch, t0 + s(2), Duration::ZERO, true).full);
    sch.queued(t0 + s(4));
    assert!(!sync(&mut sch, t0 + s(4), Duration::ZERO, true).full);
}

#[test]
fn backoff_never_undercuts_min_sync_period() {
    let p = Periods::new(s(5), s(30));
    assert_eq!(p.backoff(1), s(5));
    assert_eq!(p.backoff(4), s(8));
    assert_eq!(p.backoff(u32::MAX), s(30));
}
