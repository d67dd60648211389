//! The dataplane while the proxy's API server misbehaves: killed for a while, answering 410 Gone
//! after an etcd compaction, slow, and killed in the middle of a large relist. In the cluster lab
//! (`tests/lab/`), our proxy runs on node 1 and reads a private kube-apiserver on the shared etcd
//! (`live::PrivateApiServer`), which the test kills and restarts, while every change to the
//! cluster is written through the shared API server. Throughout, pod `n1-a` opens a steady
//! stream of new connections to a stable Service whose endpoint is pod `n2-a`: every one must
//! be answered (the rules are never flushed). Afterwards the kernel must equal the plan of the
//! final objects: `kube-proxy-rs explain` in node 1's namespace lists the objects afresh from
//! the shared API server, plans them with the proxy's flags, reads the kernel and reports any
//! drift, which must be none; so a change made while the proxy's server was away and never
//! learnt leaves the check failing.
//!
//! Every fault runs in nftables mode; the outage and the 410 also in iptables mode (the
//! slowness and the mid-list kill are faults of the source alone, and the suite's time counts).
//!
//! `FAULTS_API_OUTAGE_SECS` sets the outage of the first test (default 20 s; the issue's
//! figure is 60). Needs root and `testenv/build`, as the lab does.

#![allow(
    clippy::disallowed_methods,
    reason = "a fault test reads the wall clock (outages, convergence times) and its own knob"
)]

use support::testenv;

use support::live;

use support::api_relay;

use support::lab;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use api_relay::{ApiRelay, Flow};
use lab::client::{From, addr, request};
use lab::scenarios::{cluster_ip, service};
use lab::{Lab, Mode, Proto, Proxy};
use live::{PrivateApiServer, compact_etcd};
use serde_json::json;
use testenv::{ChildGuard, TestEnv, bridge_apiserver, wait_for};

/// The source's backoff between tries at most: 30 s, plus a jitter of up to as much again.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// From the API server's return to the kernel holding the plan: one backoff before the watch
/// is tried again and, when it answers 410 Gone, one more before the relist (as client-go's
/// reflector, which backs off between list-and-watch runs), then the lists and a sync.
const RECONNECT: Duration = Duration::from_secs(2 * BACKOFF_MAX.as_secs() + 30);
/// Connections per probe process of the client's stream, and the pause between them.
const STREAM_CHUNK: u32 = 20;
const STREAM_INTERVAL_MS: u64 = 50;

/// One lab at a time in this binary: side by side, on two CPUs, they starve each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lab with our proxy on node 1 reading `server` (through `relay` when there is one), a
/// stable Service `stable` → pod `n2-a`, and a bridge to the shared API server for `explain`.
struct World {
    lab: Lab,
    stable: SocketAddr,
    _explain_bridge: ChildGuard,
}

impl World {
    async fn start(mode: Mode, api_port: u16) -> World {
        let env = TestEnv::shared();
        let lab = Lab::start_idle(env, Proxy::Ours { mode }).await;
        let svc = lab
            .cluster
            .apply_service(service("stable", 80, 8080, json!({})))
            .await;
        lab.cluster
            .apply_slice(
                "stable-a",
                "stable",
                &[("p", 8080, Proto::Tcp)],
                &lab.endpoints(&["n2-a"]),
            )
            .await;
        let explain_bridge = bridge_apiserver(env, &lab.topo.nodes[0].ns);
        lab.start_proxy_via(0, Some(api_port), &[]);
        let world = World {
            stable: addr(cluster_ip(&svc), 80),
            lab,
            _explain_bridge: explain_bridge,
        };
        world.converges("the first sync", RECONNECT).await;
        world
    }

    fn client(&self) -> From<'_> {
        From::Pod(self.lab.pod("n1-a"))
    }

    /// Node 1's drift: how its kernel differs from the plan of the objects as they are now.
    async fn drift(&self) -> Result<Vec<String>, String> {
        let from = self.lab.pod("n1-a").ip.to_string();
        let answer = self
            .lab
            .explain(
                0,
                &[
                    // Not the proxy's metrics address: `explain` would ask the running proxy,
                    // whose plan is of what it learnt; here it lists the objects and plans them
                    // itself.
                    "--metrics-bind-address=127.0.0.1:1",
                    "--to",
                    &self.stable.to_string(),
                    "--from",
                    &from,
                ],
            )
            .await?;
        let drift = answer["drift"]
            .as_array()
            .ok_or_else(|| format!("no drift in explain's answer: {answer}"))?;
        Ok(drift
            .iter()
            .map(|d| d.as_str().unwrap_or_default().to_owned())
            .collect())
    }

    /// Waits until node 1's kernel holds the plan of the objects as they are now.
    async fn converges(&self, what: &str, limit: Duration) {
        let started = Instant::now();
        wait_for(
            &format!("node 1's kernel to equal the plan ({what})"),
            limit,
            || async {
                match self.drift().await? {
                    d if d.is_empty() => Ok(()),
                    d => Err(format!(
                        "{d:#?}\nproxy log:\n{}",
                        self.lab.proxy_log_tails(15).join("\n")
                    )),
                }
            },
        )
        .await;
        eprintln!(
            "{what}: converged in {:.1}s",
            started.elapsed().as_secs_f64()
        );
    }

    /// Runs `fault` while the client streams new connections to the stable Service, and
    /// returns what the client saw.
    async fn with_traffic<F: Future<Output = ()>>(&self, fault: F) -> Tally {
        let stop = AtomicBool::new(false);
        let stream = async {
            let mut tally = Tally::default();
            while !stop.load(Ordering::Relaxed) {
                let mut req = request(Proto::Tcp, self.stable, STREAM_CHUNK);
                req.interval_ms = STREAM_INTERVAL_MS;
                for a in self.lab.attempts(self.client(), req).await {
                    match (&a.reply, &a.error) {
                        (Some(text), _) if text.contains("n2-a") => tally.ok += 1,
                        _ => tally.failed.push(format!("{:?} {:?}", a.reply, a.error)),
                    }
                }
            }
            tally
        };
        let fault = async {
            fault.await;
            stop.store(true, Ordering::Relaxed);
        };
        let (tally, ()) = tokio::join!(stream, fault);
        tally
    }
}

/// The client's connections to the stable Service: answered, and what each failure got.
#[derive(Debug, Default)]
struct Tally {
    ok: u32,
    failed: Vec<String>,
}

impl Tally {
    fn none_lost(&self, what: &str) {
        eprintln!(
            "{what}: {} connections answered, {} failed",
            self.ok,
            self.failed.len()
        );
        assert!(self.ok > 0, "{what}: the client made no connection");
        assert!(
            self.failed.is_empty(),
            "{what}: {} of {} connections to the stable Service failed: {:?}",
            self.failed.len(),
            self.ok as usize + self.failed.len(),
            &self.failed[..self.failed.len().min(5)]
        );
    }
}

/// The outage of [`the_api_server_away_then_back`]: `FAULTS_API_OUTAGE_SECS`, 20 s by default.
fn outage() -> Duration {
    let secs = std::env::var("FAULTS_API_OUTAGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(secs)
}

/// Services `changed` (→ `n1-b`) and `removed` (→ `n3-b`), and the cluster's writes while
/// the proxy's server is away: `added` (→ `n3-a`) created, `changed` moved to `n2-b`,
/// `removed` deleted.
async fn before_the_fault(world: &World) {
    let c = &world.lab.cluster;
    let p = [("p", 8080, Proto::Tcp)];
    for (name, pod) in [("changed", "n1-b"), ("removed", "n3-b")] {
        c.apply_service(service(name, 80, 8080, json!({}))).await;
        c.apply_slice(&format!("{name}-a"), name, &p, &world.lab.endpoints(&[pod]))
            .await;
    }
    world.converges("before the fault", RECONNECT).await;
}

async fn while_away(world: &World, away: bool) {
    let c = &world.lab.cluster;
    let before = world.drift().await.expect("explain");
    assert!(before.is_empty(), "drift before the changes: {before:#?}");
    let p = [("p", 8080, Proto::Tcp)];
    c.apply_service(service("added", 80, 8080, json!({}))).await;
    c.apply_slice("added-a", "added", &p, &world.lab.endpoints(&["n3-a"]))
        .await;
    c.apply_slice("changed-a", "changed", &p, &world.lab.endpoints(&["n2-b"]))
        .await;
    c.delete_slice("removed-a").await;
    c.delete_service("removed").await;
    if !away {
        return;
    }
    // The check that follows can fail: the kernel holds the last rules the proxy learnt, not
    // the plan of the objects as they are now.
    let after = world.drift().await.expect("explain");
    assert!(
        !after.is_empty(),
        "no drift seen while the proxy's API server is away"
    );
    eprintln!("while away, explain tells {} lines of drift", after.len());
}

/// What the client sees of the changes made while away, once converged.
async fn changes_are_served(world: &World) {
    let lab = &world.lab;
    let at = |name: &str| addr(cluster_ip(&lab.cluster.service(name).expect(name)), 80);
    let from = world.client();
    lab::scenarios::reaches_exactly(lab, from, at("added"), 5, &["n3-a"])
        .await
        .expect("the Service added while away");
    lab::scenarios::reaches_exactly(lab, from, at("changed"), 5, &["n2-b"])
        .await
        .expect("the Service changed while away");
    lab.all_fail(from, Proto::Tcp, at("removed"), 3, &[])
        .await
        .expect("the Service deleted while away");
}

/// 1. The proxy's API server killed for [`outage`] while Services are created, changed and
///    deleted through the shared one, then restarted.
async fn the_api_server_away_then_back(mode: Mode) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::shared();
    let mut server = PrivateApiServer::start(env, &[]).await;
    let world = World::start(mode, server.port()).await;
    before_the_fault(&world).await;
    let tally = world
        .with_traffic(async {
            server.kill();
            let back = Instant::now() + outage();
            while_away(&world, true).await;
            tokio::time::sleep_until(back.into()).await;
            server.restart().await;
            world.converges("after the outage", RECONNECT).await;
        })
        .await;
    tally.none_lost(&format!("{mode:?}: API server away {:?}", outage()));
    changes_are_served(&world).await;
}

/// 2. While the proxy's server is away, changes are made and etcd is compacted: its watches
///    resume with 410 Gone, and only a relist tells it of the deletions.
async fn watches_gone_after_a_compaction(mode: Mode) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::shared();
    // Without a watch cache every watch is served from etcd, so a resourceVersion older than
    // its compacted history is refused with 410 Gone.
    let mut server = PrivateApiServer::start(env, &["--watch-cache=false"]).await;
    let world = World::start(mode, server.port()).await;
    before_the_fault(&world).await;
    let tally = world
        .with_traffic(async {
            server.kill();
            while_away(&world, true).await;
            compact_etcd(env).await;
            server.restart().await;
            world.converges("after 410 Gone", RECONNECT).await;
        })
        .await;
    tally.none_lost(&format!("{mode:?}: 410 Gone after a compaction"));
    changes_are_served(&world).await;
}

/// 3. A slow API server: every chunk it sends reaches the proxy seconds late, while Services
///    change; the proxy keeps its rules and converges.
async fn a_slow_api_server(mode: Mode) {
    const DELAY: Duration = Duration::from_secs(2);
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::shared();
    let mut server = PrivateApiServer::start(env, &[]).await;
    let relay = ApiRelay::start(server.port()).await;
    let world = World::start(mode, relay.port).await;
    before_the_fault(&world).await;
    let tally = world
        .with_traffic(async {
            relay.set(Flow::Delay(DELAY));
            while_away(&world, false).await;
            // Each change is one watch event, one chunk: a few delays each, and a sync.
            world.converges("while slow", DELAY * 30).await;
            // A restart while slow: the proxy reconnects, lists and watches through the delay.
            server.kill();
            world.lab.cluster.delete_slice("added-a").await;
            server.restart().await;
            world
                .converges("after a restart while slow", RECONNECT)
                .await;
            relay.set(Flow::Pass);
        })
        .await;
    tally.none_lost(&format!("{mode:?}: API server slow ({DELAY:?} per chunk)"));
}

/// 5. The proxy's server killed while the proxy relists a large change (a relist forced by a
///    compaction, slowed by the relay so the kill lands inside the list's body), then
///    restarted: the list that broke off must not read as the complete state (the stable
///    Service, listed after the bulk, would be deleted), and the relist after it programs all.
async fn killed_during_a_large_relist(mode: Mode) {
    const BULK: usize = 500;
    let _turn = ONE_AT_A_TIME.lock().await;
    let env = TestEnv::shared();
    let mut server = PrivateApiServer::start(env, &["--watch-cache=false"]).await;
    let relay = ApiRelay::start(server.port()).await;
    let world = World::start(mode, relay.port).await;
    let tally = world
        .with_traffic(async {
            server.kill();
            // `bulk-…` sorts before `stable`: a list cut short lacks the stable Service.
            for i in 0..BULK {
                let name = format!("bulk-{i:03}");
                world
                    .lab
                    .cluster
                    .apply_service(service(&name, 80, 8080, json!({})))
                    .await;
            }
            let drift = world.drift().await.expect("explain");
            assert!(!drift.is_empty(), "the bulk is in the plan, not the kernel");
            compact_etcd(env).await;
            // 16 KiB every 100 ms: the list of a few hundred Services takes seconds.
            relay.set(Flow::Delay(Duration::from_millis(100)));
            let before = relay.bytes_down();
            server.restart().await;
            wait_for("the relist to be under way", RECONNECT, || async {
                match relay.bytes_down() - before {
                    n if n > 48 * 1024 => Ok(()),
                    n => Err(format!("{n} bytes")),
                }
            })
            .await;
            // The server dies mid-body: what it sent and the proxy was not yet given is lost
            // with the connection (the kernel would otherwise deliver its buffers in full).
            relay.set(Flow::Held);
            server.kill();
            relay.cut();
            let cut_at = relay.bytes_down() - before;
            relay.set(Flow::Pass);
            tokio::time::sleep(Duration::from_secs(3)).await;
            let restarted = relay.bytes_down();
            server.restart().await;
            world
                .converges("after the kill during a relist", RECONNECT)
                .await;
            let relisted = relay.bytes_down() - restarted;
            eprintln!("cut after {cut_at} bytes; the relist that followed took {relisted}");
            assert!(
                relisted > cut_at,
                "the cut came after the list's end ({cut_at} bytes passed, {relisted} to relist)"
            );
        })
        .await;
    tally.none_lost(&format!(
        "{mode:?}: killed during a relist of {BULK} Services"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_keeps_its_rules_while_the_api_server_is_away() {
    the_api_server_away_then_back(Mode::Nftables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_keeps_its_rules_while_the_api_server_is_away() {
    the_api_server_away_then_back(Mode::Iptables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_relists_after_410_gone() {
    watches_gone_after_a_compaction(Mode::Nftables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_relists_after_410_gone() {
    watches_gone_after_a_compaction(Mode::Iptables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_rides_out_a_slow_api_server() {
    a_slow_api_server(Mode::Nftables).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_survives_a_kill_during_a_large_relist() {
    killed_during_a_large_relist(Mode::Nftables).await;
}

/// Not a test: the entry point of the lab's pod echo servers and traffic probes, which re-run
/// this binary inside a namespace (see `lab/helper.rs`). Without their environment variable it
/// returns at once.
#[test]
fn lab_helper_process() {
    lab::helper::run_if_requested();
}
