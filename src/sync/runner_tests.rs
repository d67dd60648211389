//! The runner on tokio's paused clock, with a dataplane that counts syncs and fails on demand.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::cluster::source::lean::EndpointSlice;
use futures::channel::mpsc;
use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::*;
use crate::cluster::source::Object;
use crate::cluster::{Features, Snapshot};
use crate::testing::{self, ep};

/// What the dataplane saw of one sync.
#[derive(Clone, Debug)]
struct Seen {
    full: bool,
    changed: BTreeSet<String>,
    ports: usize,
    thread: std::thread::ThreadId,
}

#[derive(Default)]
struct Script {
    seen: Vec<Seen>,
    /// How many of the next syncs fail.
    fail: u32,
    panic: bool,
    /// When set, a sync waits for a message on it before returning (to hold it in flight).
    gate: Option<std::sync::mpsc::Receiver<()>>,
    /// What `runs_inline` answers.
    inline: bool,
    /// A wall clock to read during each sync, and what it read.
    wall: Option<fn() -> Timestamp>,
    walls: Vec<Timestamp>,
}

/// Counts syncs and fails on demand; correctness of programming is not its business.
struct Fake(Arc<Mutex<Script>>);

impl Dataplane for Fake {
    fn mode(&self) -> &'static str {
        "fake"
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        let gate = self.0.lock().unwrap().gate.take();
        if let Some(gate) = &gate {
            // Bounded, so a sync that can never be let through fails instead of hanging.
            gate.recv_timeout(Duration::from_secs(10))
                .expect("the gate opens");
        }
        let mut script = self.0.lock().unwrap();
        script.gate = gate;
        if let Some(wall) = script.wall {
            script.walls.push(wall());
        }
        script.seen.push(Seen {
            full,
            changed: changes.ports.iter().map(ToString::to_string).collect(),
            ports: snapshot.ports.len(),
            thread: std::thread::current().id(),
        });
        if script.panic {
            script.panic = false;
            drop(script);
            panic!("injected");
        }
        if script.fail > 0 {
            script.fail -= 1;
            return Err(SyncError::refused("fake", "injected"));
        }
        Ok(SyncReport {
            full,
            families: Vec::new(),
            netlink_messages: 0,
        })
    }

    fn runs_inline(&self, _: &Changes) -> bool {
        self.0.lock().unwrap().inline
    }
}

struct Harness {
    events: mpsc::UnboundedSender<Event>,
    peek: crate::sync::Peek,
    status: watch::Receiver<Status>,
    script: Arc<Mutex<Script>>,
    reports: Arc<Mutex<Vec<Report>>>,
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn fixed_wall() -> Timestamp {
    "2026-12-01T10:00:10Z".parse().unwrap()
}

fn start(min_sync: Duration, sync: Duration) -> Harness {
    start_with_wall(min_sync, sync, fixed_wall)
}

fn start_with_wall(min_sync: Duration, sync: Duration, wall: fn() -> Timestamp) -> Harness {
    let script = Arc::new(Mutex::new(Script::default()));
    let mut runner = Runner::new(
        Tracker::new("node-a", Features::default()),
        Box::new(Fake(script.clone())),
        Periods::new(min_sync, sync),
    )
    .with_wall_clock(wall);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let sink = reports.clone();
    runner.on_report(move |r, _| sink.lock().unwrap().push(r.clone()));
    let status = runner.status();
    let peek = runner.peek();
    let (events, rx) = mpsc::unbounded();
    tokio::spawn(runner.run(rx));
    Harness {
        events,
        peek,
        status,
        script,
        reports,
    }
}

fn web_slice(n: usize) -> EndpointSlice {
    // A different address each time, so every update is a real change.
    let ip = format!("10.1.{}.{}", n / 250, n % 250 + 1);
    testing::slice(
        "ns",
        "web",
        "web-1",
        &[("http", 8080, "TCP")],
        &[ep(&ip, "node-a")],
    )
}

impl Harness {
    fn send(&self, event: Event) {
        self.events.unbounded_send(event).unwrap();
    }

    /// The three initial lists: one Service with one slice, and this node.
    fn list_all(&self) {
        let svc = testing::service("ns", "web", "172.30.0.10", &[("http", 80, "TCP")]);
        self.send(testing::listed(
            Kind::Service,
            vec![Object::Service(Box::new(svc))],
        ));
        self.send(testing::listed(
            Kind::EndpointSlice,
            vec![Object::EndpointSlice(Box::new(web_slice(0)))],
        ));
        self.send(testing::listed(
            Kind::Node,
            vec![Object::Node(Box::new(testing::node(
                "node-a",
                "192.168.0.1",
                None,
            )))],
        ));
    }

    /// Waits (on the paused clock, so instantly unless timers are pending) until `f` holds.
    async fn until(&mut self, what: &str, f: impl FnMut(&Status) -> bool) -> Status {
        let got = match tokio::time::timeout(s(3600), self.status.wait_for(f)).await {
            Ok(Ok(status)) => Some(status.clone()),
            _ => None,
        };
        got.unwrap_or_else(|| panic!("timed out waiting for {what}: {:?}", *self.status.borrow()))
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }

    fn syncs(&self) -> u64 {
        let st = self.status.borrow();
        st.syncs_ok + st.syncs_failed
    }
}

#[tokio::test(start_paused = true)]
async fn nothing_is_synced_until_all_three_kinds_are_listed() {
    let mut h = start(s(1), s(30));
    let svc = testing::service("ns", "web", "172.30.0.10", &[("http", 80, "TCP")]);
    h.send(testing::listed(
        Kind::Service,
        vec![Object::Service(Box::new(svc))],
    ));
    h.send(testing::listed(Kind::EndpointSlice, vec![]));
    tokio::time::sleep(s(120)).await;
    assert_eq!(h.syncs(), 0);
    assert!(!h.status.borrow().ready);
    h.send(testing::listed(Kind::Node, vec![]));
    let st = h.until("the first sync", |s| s.syncs_ok == 1).await;
    assert_eq!(st.full_syncs, 1, "the first sync is full");
    assert_eq!(h.seen()[0].ports, 1);
}

#[tokio::test(start_paused = true)]
async fn a_peek_sees_the_model_and_leaves_the_next_sync_its_changes() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    let endpoints = |snap: &crate::cluster::Snapshot| -> Vec<String> {
        snap.ports
            .values()
            .flat_map(|p| &p.families)
            .flat_map(|v| v.endpoints.iter().map(|e| e.to_string()))
            .collect()
    };
    let snap = h.peek.snapshot().await.expect("the runner answers");
    assert_eq!(endpoints(&snap), ["10.1.0.1:8080"]);
    drop(snap);
    h.send(testing::applied_slice(web_slice(7)));
    // Asked before the change is synced: the model as last built, and the change stays queued.
    let snap = h.peek.snapshot().await.expect("the runner answers");
    assert_eq!(endpoints(&snap), ["10.1.0.1:8080"]);
    drop(snap);
    h.until("the change's sync", |s| s.syncs_ok == 2).await;
    let last = h.seen().pop().unwrap();
    assert_eq!(last.changed, BTreeSet::from(["ns/web:http".to_string()]));
    let snap = h.peek.snapshot().await.expect("the runner answers");
    assert_eq!(endpoints(&snap), ["10.1.0.8:8080"]);
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_a_thousand_updates_costs_one_sync() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    for n in 1..=1000 {
        h.send(testing::applied_slice(web_slice(n)));
    }
    let st = h.until("the burst's sync", |s| s.syncs_ok == 2).await;
    tokio::time::sleep(s(10)).await;
    assert_eq!(h.syncs(), 2, "one sync for the whole burst");
    assert_eq!(st.events.applied, 1000);
    let last = h.seen().pop().unwrap();
    assert!(!last.full);
    assert_eq!(last.changed, BTreeSet::from(["ns/web:http".to_string()]));
}

#[tokio::test(start_paused = true)]
async fn a_quick_partial_sync_runs_on_the_runners_thread_and_a_full_one_never_does() {
    let mut h = start(s(1), s(30));
    h.script.lock().unwrap().inline = true;
    let here = std::thread::current().id();
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    h.send(testing::applied_slice(web_slice(1)));
    h.until("the change's sync", |s| s.syncs_ok == 2).await;
    h.script.lock().unwrap().panic = true;
    h.send(testing::applied_slice(web_slice(2)));
    h.until("the panicking sync", |s| s.syncs_failed == 1).await;
    let seen = h.seen();
    assert!(seen[0].full);
    assert_ne!(
        seen[0].thread, here,
        "a full sync runs on a blocking thread"
    );
    assert!(!seen[1].full);
    assert_eq!(
        seen[1].thread, here,
        "a quick partial sync runs where the runner does"
    );
    assert_eq!(seen[2].thread, here);
    // The failure makes the retry full, on a blocking thread again.
    let st = h.until("the retry", |s| s.syncs_ok == 3).await;
    assert_eq!(st.syncs_failed, 1);
    let retry = h.seen().pop().unwrap();
    assert!(retry.full);
    assert_ne!(retry.thread, here);
    // A partial sync of more ports than the bound goes to a blocking thread, whatever the
    // dataplane says.
    let ports: Vec<(String, i32)> = (0..=crate::dataplane::INLINE_SYNC_MAX_PORTS)
        .map(|n| (format!("p{n}"), 1000 + n as i32))
        .collect();
    let ports: Vec<(&str, i32, &str)> =
        ports.iter().map(|(n, p)| (n.as_str(), *p, "TCP")).collect();
    h.send(Event::Applied(Object::Service(Box::new(testing::service(
        "ns",
        "many",
        "172.30.0.11",
        &ports,
    )))));
    h.until("the many ports' sync", |s| s.syncs_ok == 4).await;
    let many = h.seen().pop().unwrap();
    assert!(!many.full);
    assert_eq!(many.changed.len(), ports.len());
    assert_ne!(
        many.thread, here,
        "a partial sync over the bound is not inline"
    );
}

/// A wall clock one second later at each reading.
fn ticking_wall() -> Timestamp {
    static SECONDS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let n = SECONDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Timestamp::from_second(1_800_000_000 + n).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_sync_on_the_runners_thread_is_reported_from_before_it_ran_to_after() {
    let mut h = start_with_wall(s(1), s(30), ticking_wall);
    {
        let mut script = h.script.lock().unwrap();
        script.inline = true;
        script.wall = Some(ticking_wall);
    }
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    h.send(testing::applied_slice(web_slice(1)));
    h.until("the change's sync", |s| s.syncs_ok == 2).await;
    let during = h.script.lock().unwrap().walls.clone();
    let reports = h.reports.lock().unwrap().clone();
    assert_eq!((during.len(), reports.len()), (2, 2));
    for (report, ran) in reports.iter().zip(&during) {
        assert!(
            report.started_at < *ran && *ran < report.ended_at,
            "sync {}: {} .. {} around {ran}",
            report.number,
            report.started_at,
            report.ended_at
        );
    }
}

/// On the proxy's runtime with a single worker (a one-CPU node), a sync on the runner's thread
/// may still wait for another task: the runtime moves them off the blocked thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_sync_on_the_runners_thread_can_wait_for_another_task_with_one_worker() {
    let mut h = start(Duration::from_millis(10), s(30));
    h.script.lock().unwrap().inline = true;
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    let (open, gate) = std::sync::mpsc::channel();
    h.script.lock().unwrap().gate = Some(gate);
    // Opens the gate only once the sync waits on it, from a task of the same runtime.
    let script = h.script.clone();
    tokio::spawn(async move {
        while script.lock().unwrap().gate.is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        open.send(()).unwrap();
    });
    h.send(testing::applied_slice(web_slice(1)));
    let done = tokio::time::timeout(s(30), h.status.wait_for(|s| s.syncs_ok == 2))
        .await
        .is_ok();
    assert!(done, "no second sync");
    assert_eq!(
        h.status.borrow().syncs_failed,
        0,
        "the sync never got its answer"
    );
    assert!(!h.seen().pop().unwrap().full);
}

#[tokio::test(start_paused = true)]
async fn a_steady_trickle_syncs_at_most_once_per_min_sync_period() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    // 1,000 updates, one every 10 ms: 10 s of changes.
    for n in 1..=1000 {
        h.send(testing::applied_slice(web_slice(n)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.until("quiet", |s| s.oldest_pending_since.is_none()).await;
    let syncs = h.syncs();
    assert!(
        (10..=12).contains(&syncs),
        "{syncs} syncs for 10 s of changes"
    );
}

#[tokio::test(start_paused = true)]
async fn without_changes_a_sync_still_runs_every_sync_period() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    tokio::time::sleep(s(95)).await;
    assert_eq!(h.syncs(), 4);
    let reports = h.reports.lock().unwrap().clone();
    let reasons: Vec<Reason> = reports.iter().map(|r| r.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::Initial,
            Reason::Periodic,
            Reason::Periodic,
            Reason::Periodic
        ]
    );
    assert!(
        reports[1..].iter().all(|r| !r.full),
        "periodic syncs are partial"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_sync_is_retried_with_backoff_then_fully_with_its_changes() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    h.script.lock().unwrap().fail = 3;
    let t0 = tokio::time::Instant::now();
    h.send(testing::applied_slice(web_slice(1)));
    let st = h.until("the retry that works", |s| s.syncs_ok == 2).await;
    assert_eq!(st.syncs_failed, 3);
    // Failures at ~1 s, then retries after 1, 2 and 4 s.
    let waited = tokio::time::Instant::now().duration_since(t0);
    assert!(
        waited >= s(8) && waited < s(9),
        "recovered after {waited:?}"
    );
    let seen = h.seen();
    let last = seen.last().unwrap();
    assert!(last.full, "the sync after a failure is full");
    assert_eq!(
        last.changed,
        BTreeSet::from(["ns/web:http".to_string()]),
        "failed changes carried"
    );
    assert!(st.failing_since.is_none());
    let reasons: Vec<Reason> = h.reports.lock().unwrap().iter().map(|r| r.reason).collect();
    assert_eq!(
        &reasons[1..],
        [Reason::Changes, Reason::Retry, Reason::Retry, Reason::Retry]
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_dataplane_is_a_failed_sync() {
    let mut h = start(s(1), s(30));
    h.script.lock().unwrap().panic = true;
    h.list_all();
    let st = h.until("the retry", |s| s.syncs_ok == 1).await;
    assert_eq!(st.syncs_failed, 1);
    let reports = h.reports.lock().unwrap().clone();
    assert!(
        reports[0]
            .outcome
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("panicked: injected")
    );
}

#[tokio::test(start_paused = true)]
async fn one_sync_at_a_time_and_the_next_takes_the_latest_state() {
    let mut h = start(s(1), s(30));
    let (release, gate) = std::sync::mpsc::channel();
    h.script.lock().unwrap().gate = Some(gate);
    h.list_all();
    h.until("the initial lists", |s| s.ready).await;
    // The first sync is held; events keep being applied meanwhile.
    for n in 1..=50 {
        h.send(testing::applied_slice(web_slice(n)));
    }
    h.until("the events", |s| s.events.applied == 50).await;
    // (No sleeping here: a blocking task in flight stops the paused clock from advancing.)
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert_eq!(h.syncs(), 0, "the held sync has not finished");
    release.send(()).unwrap();
    release.send(()).unwrap();
    h.until("both syncs", |s| s.syncs_ok == 2).await;
    tokio::time::sleep(s(5)).await;
    assert_eq!(
        h.syncs(),
        2,
        "the 50 updates cost one sync after the held one"
    );
}

#[tokio::test(start_paused = true)]
async fn programming_latency_runs_from_the_trigger_time_to_the_end_of_the_sync() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    let mut slice = web_slice(1);
    slice.metadata.annotations = Some(
        [(
            "endpoints.kubernetes.io/last-change-trigger-time".to_string(),
            "2026-12-01T10:00:07.500Z".to_string(),
        )]
        .into(),
    );
    h.script.lock().unwrap().fail = 1;
    h.send(testing::applied_slice(slice));
    h.until("the successful retry", |s| s.syncs_ok == 2).await;
    let reports = h.reports.lock().unwrap().clone();
    assert!(
        reports[1].latencies.is_empty(),
        "a failed sync programs nothing"
    );
    // The wall clock is pinned at 10:00:10.
    assert_eq!(reports[2].latencies, vec![Duration::from_millis(2500)]);
}

#[tokio::test(start_paused = true)]
async fn health_turns_bad_when_a_change_waits_more_than_twice_sync_period() {
    let mut h = start(s(1), s(10));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    h.script.lock().unwrap().fail = u32::MAX;
    h.send(testing::applied_slice(web_slice(1)));
    h.until("a failure", |s| s.syncs_failed == 1).await;
    let since = h.status.borrow().oldest_pending_since.expect("pending");
    tokio::time::sleep(s(25)).await;
    let st = h.status.borrow().clone();
    assert!(st.failing_since.is_some());
    assert!(st.healthy(since + s(20), s(10)));
    assert!(!st.healthy(since + s(21), s(10)));
    h.script.lock().unwrap().fail = 0;
    let st = h.until("recovery", |s| s.syncs_ok == 2).await;
    assert!(st.healthy(tokio::time::Instant::now(), s(10)));
}

#[tokio::test(start_paused = true)]
async fn the_runner_stops_when_its_source_ends() {
    let h = start(s(1), s(30));
    h.list_all();
    drop(h.events);
    let mut status = h.status;
    // The sender side of the status channel goes away with the runner.
    while status.changed().await.is_ok() {}
}

#[tokio::test(start_paused = true)]
async fn a_full_sync_trigger_starts_a_full_sync_within_min_sync_period() {
    let script = Arc::new(Mutex::new(Script::default()));
    let mut runner = Runner::new(
        Tracker::new("node-a", Features::default()),
        Box::new(Fake(script.clone())),
        Periods::new(s(1), s(30)),
    )
    .with_wall_clock(fixed_wall);
    let trigger = Arc::new(tokio::sync::Notify::new());
    runner.full_sync_on(trigger.clone());
    let status = runner.status();
    let peek = runner.peek();
    let (events, rx) = mpsc::unbounded();
    tokio::spawn(runner.run(rx));
    let mut h = Harness {
        events,
        peek,
        status,
        script,
        reports: Arc::new(Mutex::new(Vec::new())),
    };
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    tokio::time::sleep(s(5)).await;
    let before = tokio::time::Instant::now();
    trigger.notify_one();
    h.until("the triggered sync", |s| s.syncs_ok == 2).await;
    assert!(tokio::time::Instant::now() - before <= s(1));
    assert!(
        h.seen()[1].full,
        "an outside change is repaired by a full sync"
    );
}

#[tokio::test(start_paused = true)]
async fn objects_sent_again_as_they_were_ask_for_no_sync() {
    let mut h = start(s(1), s(30));
    h.list_all();
    h.until("the first sync", |s| s.syncs_ok == 1).await;
    // A relist of everything as it is (after a watch ended, or a manifest directory re-read),
    // and the same slice applied again: nothing to program.
    h.list_all();
    h.send(testing::applied_slice(web_slice(0)));
    tokio::time::sleep(s(5)).await;
    assert_eq!(h.syncs(), 1, "{:?}", h.seen());
    let st = h.status.borrow().clone();
    assert_eq!(st.oldest_pending_since, None);
    assert_eq!(st.last_queued_at, None);
    // A real change still syncs.
    h.send(testing::applied_slice(web_slice(1)));
    h.until("the change's sync", |s| s.syncs_ok == 2).await;
}
