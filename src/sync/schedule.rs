//! When the next sync runs: the sync runner's decisions as a pure state machine over time values.
//!
//! Pure: no clock, no I/O; every method takes "now" from the caller, so the rules are unit-tested
//! with plain instants. The runner ([`super::Runner`]) is the only caller and the only owner of a
//! clock. Nothing here knows what a sync does, only that it started, and ended well or not.
//!
//! The rules, following upstream's `BoundedFrequencyRunner` (`minInterval = minSyncPeriod`,
//! `retryInterval = syncPeriod`, `maxInterval`) in our own words:
//! - nothing runs before the initial lists are in ([`Schedule::ready`]); the first sync is full;
//! - one sync at a time;
//! - a change is synced at once when the previous sync ended at least `minSyncPeriod` ago, else
//!   at that point, so a burst of changes within `minSyncPeriod` costs one sync. The interval is
//!   measured from the end of one sync to the start of the next (upstream's documented intent),
//!   so a slow dataplane still gets `minSyncPeriod` of rest between syncs;
//! - without changes a sync still runs `syncPeriod` after the last one ended (housekeeping for
//!   the dataplane), and it is full when the last full sync is [`FULL_SYNC_PERIOD`] old, as
//!   upstream's hourly full resync (`proxyutil.FullSyncPeriod`);
//! - a failed sync is retried after an exponential backoff starting at [`RETRY_INITIAL`] and capped
//!   at `syncPeriod` (upstream retries flat after `syncPeriod`), without waiting for a change;
//!   changes arriving meanwhile wait for that retry. The sync after a failure is full, because
//!   the failed one may have left the kernel anywhere between the old and the new state.

use std::time::Duration;

use tokio::time::Instant;

/// How often a full sync runs even when nothing failed: upstream's `FullSyncPeriod`.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

/// The first retry delay after a failed sync; it doubles per consecutive failure.
pub const RETRY_INITIAL: Duration = Duration::from_secs(1);

/// The periods the schedule follows, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Periods {
    /// Shortest time from the end of one sync to the start of the next (`minSyncPeriod`).
    pub min_sync: Duration,
    /// Longest time between syncs, and the cap of the retry backoff (`syncPeriod`).
    pub sync: Duration,
    /// Longest time between full syncs.
    pub full_sync: Duration,
    /// First retry delay after a failure.
    pub retry_initial: Duration,
}

impl Periods {
    /// The configured `minSyncPeriod` and `syncPeriod` with the fixed full-sync and retry periods.
    pub fn new(min_sync: Duration, sync: Duration) -> Periods {
        Periods {
            min_sync,
            sync,
            full_sync: FULL_SYNC_PERIOD,
            retry_initial: RETRY_INITIAL,
        }
    }

    /// Delay before retry number `failures` (1 for the first retry): doubling from
    /// `retry_initial`, never more than `syncPeriod` nor less than `minSyncPeriod`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(31);
        let delay = self
            .retry_initial
            .saturating_mul(1u32 << doublings)
            .min(self.sync);
        delay.max(self.min_sync)
    }
}

/// Why a sync runs; for logs and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The first sync after the initial lists arrived.
    Initial,
    /// Objects changed.
    Changes,
    /// The previous sync failed.
    Retry,
    /// `syncPeriod` passed without a change.
    Periodic,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Initial => "initial",
            Reason::Changes => "changes",
            Reason::Retry => "retry",
            Reason::Periodic => "periodic",
        }
    }
}

/// What the runner must do for a sync it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Start {
    pub reason: Reason,
    /// Compare against the kernel rather than against what was last programmed.
    pub full: bool,
}

/// A sync in flight.
#[derive(Clone, Copy, Debug)]
struct Attempt {
    started: Instant,
    /// The oldest change this sync carries, restored as pending if it fails.
    pending_since: Option<Instant>,
}

/// The schedule. See the module doc.
#[derive(Clone, Debug)]
pub struct Schedule {
    periods: Periods,
    ready_at: Option<Instant>,
    pending_since: Option<Instant>,
    in_flight: Option<Attempt>,
    last_end: Option<Instant>,
    last_full: Option<Instant>,
    failures: u32,
    need_full: bool,
}

impl Schedule {
    pub fn new(periods: Periods) -> Schedule {
        Schedule {
            periods,
            ready_at: None,
            pending_since: None,
            in_flight: None,
            last_end: None,
            last_full: None,
            failures: 0,
            need_full: true,
        }
    }

    pub fn periods(&self) -> Periods {
        self.periods
    }

    /// The initial lists are in: syncs may start. Later calls change nothing.
    pub fn ready(&mut self, now: Instant) {
        self.ready_at.get_or_insert(now);
    }

    pub fn is_ready(&self) -> bool {
        self.ready_at.is_some()
    }

    /// Something changed that a sync has to program.
    pub fn queued(&mut self, now: Instant) {
        self.pending_since.get_or_insert(now);
    }

    /// The next sync asks for a full one (for instance the node's topology changed).
    pub fn force_full(&mut self) {
        self.need_full = true;
    }

    /// The oldest change not yet programmed: queued and not synced, or carried by a sync that
    /// is still running or failed. Health reports the proxy stale when this gets old.
    pub fn oldest_pending(&self) -> Option<Instant> {
        let in_flight = self.in_flight.and_then(|a| a.pending_since);
        match (self.pending_since, in_flight) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Consecutive failed syncs.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn running(&self) -> bool {
        self.in_flight.is_some()
    }

    /// When the next sync should start, and why; `None` while not ready or while one is running.
    /// A time in the past means "now".
    pub fn next(&self) -> Option<(Instant, Reason)> {
        let ready_at = self.ready_at?;
        if self.in_flight.is_some() {
            return None;
        }
        let Some(last_end) = self.last_end else {
            return Some((ready_at, Reason::Initial));
        };
        if self.failures > 0 {
            // Changes that arrive while failing wait for the retry, which takes them along:
            // a dataplane that keeps refusing is not hammered once per change.
            return Some((
                last_end + self.periods.backoff(self.failures),
                Reason::Retry,
            ));
        }
        let periodic = (last_end + self.periods.sync, Reason::Periodic);
        match self.pending_since {
            Some(since) => {
                let at = since.max(last_end + self.periods.min_sync);
                Some(if at < periodic.0 {
                    (at, Reason::Changes)
                } else {
                    periodic
                })
            }
            None => Some(periodic),
        }
    }

    /// A sync starts now; everything queued so far goes with it.
    pub fn start(&mut self, now: Instant, reason: Reason) -> Start {
        let full_due = self
            .last_full
            .is_none_or(|t| now.saturating_duration_since(t) >= self.periods.full_sync);
        let full = self.need_full || full_due;
        self.need_full = false;
        self.in_flight = Some(Attempt {
            started: now,
            pending_since: self.pending_since.take(),
        });
        Start { reason, full }
    }

    /// The running sync ended. A failure keeps its changes pending, counts towards the backoff
    /// and makes the next sync full.
    pub fn finish(&mut self, now: Instant, full: bool, ok: bool) {
        let attempt = self.in_flight.take();
        self.last_end = Some(now);
        if ok {
            self.failures = 0;
            if full {
                self.last_full = Some(now);
            }
            return;
        }
        self.failures = self.failures.saturating_add(1);
        self.need_full = true;
        // The failed sync's work is still to do: pending since its oldest change, or since it
        // started when it carried none (a periodic sync).
        let carried = attempt.map(|a| a.pending_since.unwrap_or(a.started));
        self.pending_since = match (self.pending_since, carried) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
