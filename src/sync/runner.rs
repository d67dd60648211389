//! The sync runner: folds source events into the tracker and decides when the dataplane syncs.
//!
//! The only code in the proxy with timers. It reads tokio's clock (so tests run on a paused
//! clock) and, at one seam, the wall clock for timestamps and programming latency; every
//! decision about *when* is made by the pure [`Schedule`], every measurement by pure functions.
//! One sync runs at a time, always from the latest snapshot, on a blocking thread (appliers
//! shell out) while events keep being applied, or, when the dataplane says a small partial
//! sync is quick, on the runner's own thread without the two thread hand-offs. It never
//! retries inside a sync and never flushes the dataplane: a relist only changes what differs.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, Stream, StreamExt as _};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use super::carry;
use super::latency::programming_latencies;
use super::report::Report;
use super::schedule::{Periods, Reason, Schedule};
use super::status::Status;
use crate::cluster::source::{Event, Kind};
use crate::cluster::{ChangeCounts, Changes, Snapshot, Tracker};
use crate::dataplane::{Dataplane, SyncError, SyncReport};
use crate::go_duration::GoDuration;

/// How long the initial lists may take before the runner says it is still waiting, and how often
/// it repeats that. Upstream waits for its informers without a bound and logs; so do we: without
/// the lists there is nothing correct to program.
const INITIAL_WAIT_WARN: Duration = Duration::from_secs(10);
const INITIAL_WAIT_REPEAT: Duration = Duration::from_secs(30);

/// Events applied in one go before the status is published and timers are looked at again.
const EVENT_BATCH: usize = 256;

/// The wall clock, read only at this seam: timestamps for metrics and the end of a sync for
/// network programming latency (trigger times are wall-clock values from the API server).
#[allow(clippy::disallowed_methods)] // the runner's one wall-clock read; everything else is passed it
pub fn system_wall_clock() -> Timestamp {
    Timestamp::try_from(std::time::SystemTime::now()).unwrap_or(Timestamp::UNIX_EPOCH)
}

type Observer = Box<dyn FnMut(&Report, &Snapshot) + Send>;
type WarningObserver = Box<dyn FnMut(&crate::cluster::warning::Warning) + Send>;

/// What a sync thread hands back: the dataplane, the changes it was given, the result, and when
/// the thread began and ended the dataplane's part.
type Done = (
    Box<dyn Dataplane>,
    Snapshot,
    Changes,
    Result<SyncReport, SyncError>,
    [Instant; 2],
);

/// Where a sync runs: on the runner's thread (a small partial sync the dataplane says is quick,
/// [`Dataplane::runs_inline`]: done when `start` returns), or on a blocking thread while events
/// keep being applied.
enum Work {
    Done(Box<Done>),
    Running(JoinHandle<Done>),
}

/// Runs `f` on the runner's thread. On the multi-threaded runtime the proxy runs on, the
/// runtime is told first, so its other tasks move to another thread meanwhile: a sync may wait
/// on one of them (the nftables monitor answers a pause before a large batch) even on a node
/// with one CPU and so one worker. A current-thread runtime (tests) just runs it.
fn on_this_thread<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Where a sync's time went outside the dataplane, for the debug log: a one-endpoint sync is
/// meant to take well under a millisecond, and on a busy single-CPU node the snapshot, the
/// hand-off to the blocking thread and the way back can cost as much as the dataplane.
struct Phases {
    /// Rebuilding the changed ports and taking the snapshot.
    snapshot: Duration,
    /// From the snapshot to the blocking thread running the dataplane.
    handoff: Duration,
    /// The dataplane's sync.
    dataplane: Duration,
    /// From the dataplane's end to the runner's task seeing it.
    back: Duration,
}

/// A list in progress, for the start-up log.
#[derive(Default)]
struct ListProgress {
    /// When its first event arrived (unknown for an item without a start).
    began: Option<Instant>,
    items: usize,
    /// Time the tracker spent on its items.
    tracker: Duration,
}

impl ListProgress {
    fn new(began: Instant) -> ListProgress {
        ListProgress {
            began: Some(began),
            ..ListProgress::default()
        }
    }
}

/// A sync started: what the runner needs to report it when it is done.
struct InFlight {
    reason: Reason,
    full: bool,
    started: Instant,
    snapshotted: Instant,
    started_at: Timestamp,
    counts: ChangeCounts,
}

/// See the module doc.
#[doc(alias = "BoundedFrequencyRunner")]
pub struct Runner {
    tracker: Tracker,
    /// `None` only while a sync holds it.
    dataplane: Option<Box<dyn Dataplane>>,
    schedule: Schedule,
    /// Changes of a failed sync, merged into the next.
    carried: Option<Changes>,
    status: Status,
    status_tx: watch::Sender<Status>,
    observers: Vec<Observer>,
    /// Told each warning that asks for an Event on its object (see `Warning::event`).
    event_warnings: Vec<WarningObserver>,
    wall: fn() -> Timestamp,
    syncs: u64,
    /// Notified when the dataplane's kernel state was changed by someone else.
    full_sync_trigger: Option<Arc<Notify>>,
    /// Readers asking for the model ([`Runner::peek`]).
    peeks: Option<super::peek::Requests>,
    /// The lists in progress, per kind.
    lists: std::collections::BTreeMap<Kind, ListProgress>,
}

impl Runner {
    /// A runner that folds events into `tracker` and syncs `dataplane` on `periods`.
    pub fn new(tracker: Tracker, dataplane: Box<dyn Dataplane>, periods: Periods) -> Runner {
        let status = Status::new(Instant::now());
        let (status_tx, _) = watch::channel(status.clone());
        Runner {
            tracker,
            dataplane: Some(dataplane),
            schedule: Schedule::new(periods),
            carried: None,
            status,
            status_tx,
            observers: Vec::new(),
            event_warnings: Vec::new(),
            wall: system_wall_clock,
            syncs: 0,
            full_sync_trigger: None,
            peeks: None,
            lists: Default::default(),
        }
    }

    /// A handle readers use to ask for the current model; the runner answers between events
    /// and syncs, on its own task.
    pub fn peek(&mut self) -> super::Peek {
        let (peek, requests) = super::Peek::channel();
        self.peeks = Some(requests);
        peek
    }

    /// Starts a full sync (as soon as `minSyncPeriod` allows) whenever `trigger` is notified: a
    /// dataplane's monitor saw another program change its kernel state.
    pub fn full_sync_on(&mut self, trigger: Arc<Notify>) {
        self.full_sync_trigger = Some(trigger);
    }

    /// Replaces the wall clock (tests pin it to get exact latencies).
    pub fn with_wall_clock(mut self, wall: fn() -> Timestamp) -> Runner {
        self.wall = wall;
        self
    }

    /// The status, updated after every batch of events and every sync.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status_tx.subscribe()
    }

    /// Calls `observer` with every sync's report, in order, on the runner's task.
    /// Observers also see the snapshot the sync planned from (health checks need its node and
    /// service ports). They must not keep it: a snapshot held while the tracker changes forces a
    /// copy of the whole model.
    pub fn on_report(&mut self, observer: impl FnMut(&Report, &Snapshot) + Send + 'static) {
        self.observers.push(Box::new(observer));
    }

    /// Adds an observer of the tracker's warnings that ask for an Event on their object.
    pub fn on_event_warning(
        &mut self,
        observer: impl FnMut(&crate::cluster::warning::Warning) + Send + 'static,
    ) {
        self.event_warnings.push(Box::new(observer));
    }

    /// Runs until `events` ends (then lets a running sync finish). Never returns an error: a
    /// failed sync is retried on the schedule.
    pub async fn run<S>(mut self, mut events: S)
    where
        S: Stream<Item = Event> + Unpin,
    {
        let mut in_flight: Option<(InFlight, JoinHandle<Done>)> = None;
        let mut open = true;
        let mut wait_warn = Instant::now() + INITIAL_WAIT_WARN;
        let trigger = self.full_sync_trigger.clone();
        while open || in_flight.is_some() {
            let due = match in_flight {
                None => self.schedule.next(),
                Some(_) => None,
            };
            let joined = async {
                match in_flight.as_mut() {
                    Some((_, handle)) => handle.await,
                    None => std::future::pending().await,
                }
            };
            let timer = async {
                match due {
                    Some((at, reason)) => {
                        sleep_until(at).await;
                        reason
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                joined = joined => {
                    let (flight, _) = in_flight.take().expect("a sync was running");
                    match joined {
                        Ok(done) => self.finish(flight, done),
                        // Panics are caught on the sync thread, so only a runtime shutting
                        // down gets here, and the dataplane went with it.
                        Err(error) => {
                            tracing::error!(%error, "the sync thread was lost; stopping");
                            return;
                        }
                    }
                }
                reason = timer, if open => match self.start(reason) {
                    (flight, Work::Done(done)) => self.finish(flight, *done),
                    (flight, Work::Running(handle)) => in_flight = Some((flight, handle)),
                },
                () = async {
                    match &trigger {
                        Some(t) => t.notified().await,
                        None => std::future::pending().await,
                    }
                }, if open && self.schedule.is_ready() => {
                    self.schedule.force_full();
                    self.schedule.queued(Instant::now());
                    self.publish();
                }
                Some(reply) = async {
                    match self.peeks.as_mut() {
                        Some(requests) => requests.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    // Built and handed over at once; the reader drops it when it has answered.
                    let _ = reply.send(self.tracker.peek());
                }
                event = events.next(), if open => match event {
                    Some(event) => open = self.apply_batch(event, &mut events),
                    None => open = false,
                },
                () = sleep_until(wait_warn), if open && !self.schedule.is_ready() => {
                    let missing: Vec<String> = Kind::ALL
                        .iter()
                        .filter(|k| k.awaited() && !self.status.listed_kinds.contains(k))
                        .map(|k| k.as_str().to_owned())
                        .collect();
                    tracing::warn!(
                        waited = %GoDuration(Instant::now().duration_since(self.status.started)),
                        missing = %missing.join(","),
                        "still waiting for the initial lists; nothing is programmed until they are in"
                    );
                    wait_warn += INITIAL_WAIT_REPEAT;
                }
            }
        }
    }

    /// Applies `first` and whatever else is ready without waiting; returns whether the stream
    /// is still open.
    fn apply_batch<S>(&mut self, first: Event, events: &mut S) -> bool
    where
        S: Stream<Item = Event> + Unpin,
    {
        self.apply(first);
        let mut open = true;
        for _ in 1..EVENT_BATCH {
            match events.next().now_or_never() {
                Some(Some(event)) => self.apply(event),
                Some(None) => {
                    open = false;
                    break;
                }
                None => break,
            }
        }
        // A streamed initial list arrives object by object, often one per batch: publishing
        // each would wake the status's readers tens of thousands of times for nothing (before
        // the lists are in nothing is queued or ready). The list's end publishes.
        if self.schedule.is_ready() || self.lists.is_empty() {
            self.publish();
        }
        open
    }

    fn apply(&mut self, event: Event) {
        let arrived = Instant::now();
        let mut ended = None;
        match &event {
            Event::Applied(_) => self.status.events.applied += 1,
            Event::Deleted(_) => self.status.events.deleted += 1,
            Event::Listed(kind, objects) => {
                let list = ListProgress {
                    items: objects.len(),
                    ..ListProgress::new(arrived)
                };
                self.lists.insert(*kind, list);
                ended = Some(*kind);
            }
            Event::ListStarted(kind) => {
                self.lists.insert(*kind, ListProgress::new(arrived));
            }
            Event::ListItem(object) => {
                self.lists.entry(object.kind()).or_default().items += 1;
            }
            Event::ListEnded(kind) => ended = Some(*kind),
            Event::HostAddresses(_) => {}
        }
        let item = match &event {
            Event::ListItem(object) => Some(object.kind()),
            _ => None,
        };
        let generation = self.tracker.generation();
        for w in self.tracker.apply(&event) {
            tracing::warn!(object = %w.object, "{}", w.message);
            if w.event.is_some() {
                for observer in &mut self.event_warnings {
                    observer(&w);
                }
            }
        }
        drop(event);
        let now = Instant::now();
        if let Some(kind) = item
            && let Some(list) = self.lists.get_mut(&kind)
        {
            list.tracker += now.duration_since(arrived);
        }
        if let Some(kind) = ended {
            self.status.events.listed += 1;
            self.status.listed_kinds.insert(kind);
            let list = self.lists.remove(&kind).unwrap_or_default();
            let tracker = list.tracker + now.duration_since(arrived);
            // Where start-up goes, per kind (relists too): from the list's first event to its
            // end (request, transfer, decoding and the tracker), and the tracker's share.
            let memory = crate::metrics::process::resident_mib();
            let since = |from: Option<Instant>, to: Instant| {
                GoDuration(from.map_or(Duration::ZERO, |f| to.duration_since(f)))
            };
            tracing::info!(
                kind = kind.as_str(),
                objects = list.items,
                began = %since(Some(self.status.started), list.began.unwrap_or(self.status.started)),
                list = %since(list.began, now),
                tracker = %GoDuration(tracker),
                rss_mib = memory.now,
                peak_rss_mib = memory.peak,
                "list applied"
            );
        }
        if self.schedule.is_ready() {
            // An event that changed nothing (an object re-sent as it was, a relist) asks for
            // no sync.
            if self.tracker.generation() != generation {
                self.schedule.queued(now);
                self.status.last_queued_at = Some((self.wall)());
            }
        } else if self.tracker.synced() {
            tracing::info!(
                waited = %GoDuration(now.duration_since(self.status.started)),
                "initial lists in; syncing"
            );
            self.schedule.ready(now);
        }
    }

    fn start(&mut self, reason: Reason) -> (InFlight, Work) {
        let started = Instant::now();
        let start = self.schedule.start(started, reason);
        let before = tracing::enabled!(tracing::Level::DEBUG).then(|| self.tracker.peek());
        let (snapshot, changes) = self.tracker.snapshot();
        if let Some(before) = before {
            super::port_changes::log(&before, &snapshot, &changes.ports);
        }
        let snapshotted = Instant::now();
        let changes = match self.carried.take() {
            Some(older) => carry::merge(older, changes),
            None => changes,
        };
        // Upstream syncs fully when the node's zone changes: every selection moved.
        let full = start.full || changes.node_topology_changed;
        let counts = self.tracker.change_counts();
        self.syncs += 1;
        let span = tracing::info_span!("sync", number = self.syncs, reason = reason.as_str(), full);
        let mut dataplane = self.dataplane.take().expect("one sync at a time");
        let started_at = (self.wall)();
        let inline = !full
            && changes.ports.len() <= crate::dataplane::INLINE_SYNC_MAX_PORTS
            && dataplane.runs_inline(&changes);
        let run = move || {
            let _entered = span.enter();
            let began = Instant::now();
            let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                dataplane.sync(&snapshot, &changes, full)
            }));
            let result = result.unwrap_or_else(|panic| {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(SyncError::Panicked {
                    mode: dataplane.mode(),
                    message,
                })
            });
            (
                dataplane,
                snapshot,
                changes,
                result,
                [began, Instant::now()],
            )
        };
        let work = if inline {
            Work::Done(Box::new(on_this_thread(run)))
        } else {
            Work::Running(tokio::task::spawn_blocking(run))
        };
        let flight = InFlight {
            reason,
            full,
            started,
            snapshotted,
            started_at,
            counts,
        };
        (flight, work)
    }

    fn finish(
        &mut self,
        flight: InFlight,
        (dataplane, snapshot, changes, result, [began, done]): Done,
    ) {
        let ended = Instant::now();
        let phases = Phases {
            snapshot: flight.snapshotted.duration_since(flight.started),
            handoff: began.saturating_duration_since(flight.snapshotted),
            dataplane: done.saturating_duration_since(began),
            back: ended.saturating_duration_since(done),
        };
        let ended_at = (self.wall)();
        self.dataplane = Some(dataplane);
        let ok = result.is_ok();
        self.schedule.finish(ended, flight.full, ok);
        let latencies = if ok {
            programming_latencies(&changes.trigger_times, ended_at)
        } else {
            Vec::new()
        };
        let report = Report {
            number: self.syncs,
            reason: flight.reason,
            full: flight.full,
            started_at: flight.started_at,
            ended_at,
            duration: ended.duration_since(flight.started),
            outcome: result.map_err(Arc::new),
            changed_ports: changes.ports.len(),
            service_changes: changes.service_changes,
            endpoint_changes: changes.endpoint_changes,
            counts: flight.counts,
            latencies,
        };
        self.log(&report, &phases);
        if ok {
            self.status.syncs_ok += 1;
            self.status.last_success = Some(ended);
            self.status.last_success_at = Some(ended_at);
            self.status.failing_since = None;
        } else {
            self.status.syncs_failed += 1;
            self.status.failing_since.get_or_insert(flight.started);
            self.carried = Some(changes);
        }
        if flight.full {
            self.status.full_syncs += 1;
        }
        for observer in &mut self.observers {
            observer(&report, &snapshot);
        }
        drop(snapshot);
        self.status.last_report = Some(Arc::new(report));
        self.publish();
    }

    /// Logs one sync. A failure is an error once, when syncs start failing; the retries that
    /// follow log at debug, and the first success after them at info, so a broken dataplane
    /// does not flood the log (the metrics count every failure).
    fn log(&self, report: &Report, phases: &Phases) {
        let elapsed = GoDuration(report.duration);
        // `status` still describes the syncs before this one.
        let was_failing = self.status.failing_since.is_some();
        match &report.outcome {
            Err(error) if !was_failing => tracing::error!(
                number = report.number,
                reason = report.reason.as_str(),
                full = report.full,
                %elapsed,
                failures = self.schedule.failures(),
                retry_in = %GoDuration(self.schedule.periods().backoff(self.schedule.failures())),
                error = %crate::causes::one_line(&**error),
                "sync failed; the previous rules stay in place"
            ),
            Err(error) => tracing::debug!(
                number = report.number,
                reason = report.reason.as_str(),
                failures = self.schedule.failures(),
                error = %crate::causes::one_line(&**error),
                "sync failed again"
            ),
            Ok(_) if was_failing => tracing::info!(
                number = report.number,
                failed_syncs = self.status.syncs_failed,
                "sync succeeded again after failures"
            ),
            Ok(done) if report.full => tracing::info!(
                number = report.number,
                rss_mib = crate::metrics::process::resident_mib().now,
                reason = report.reason.as_str(),
                %elapsed,
                snapshot = %GoDuration(phases.snapshot),
                dataplane = %GoDuration(phases.dataplane),
                changed_ports = report.changed_ports,
                operations = done.families.iter().map(|f| f.operations).sum::<usize>(),
                netlink_messages = done.netlink_messages,
                "full sync"
            ),
            Ok(done) => tracing::debug!(
                number = report.number,
                reason = report.reason.as_str(),
                %elapsed,
                snapshot = %GoDuration(phases.snapshot),
                handoff = %GoDuration(phases.handoff),
                dataplane = %GoDuration(phases.dataplane),
                back = %GoDuration(phases.back),
                changed_ports = report.changed_ports,
                operations = done.families.iter().map(|f| f.operations).sum::<usize>(),
                netlink_messages = done.netlink_messages,
                "sync"
            ),
        }
    }

    fn publish(&mut self) {
        self.status.ready = self.schedule.is_ready();
        self.status.oldest_pending_since = self.schedule.oldest_pending();
        self.status.changes = self.tracker.change_counts();
        self.status_tx.send_replace(self.status.clone());
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
