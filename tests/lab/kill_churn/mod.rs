//! The proxy killed (SIGKILL) at random points while other Services churn, in the namespace
//! lab, in one mode of ours (`tests/lab_kill_churn.rs` on this host, `tests/lab_uml.rs` in
//! the User-mode Linux guest for ipvs mode): no connection to a stable Service
//! fails, and once the churn stops the kernel holds the plan of the final objects.
//!
//! Per mode: a stable NodePort Service (TCP and UDP) with an endpoint on every node; three
//! streams of new connections to it, each a fresh socket (a pod on node 1 to its ClusterIP
//! over TCP and over UDP, the external client to node 1's NodePort); meanwhile about ten
//! writes a second to other Services and their EndpointSlices through the API server
//! (created, changed, deleted, endpoints replaced), and node 1's proxy is killed by SIGKILL
//! [`KILLS`] times (or `KILLS=N`) at seeded random points and started again each time, as its
//! DaemonSet would. Then the churn stops and the check waits for node 1 to converge: the
//! running proxy's model (`/debug/services`) equals `kube-proxy-rs plan` of the final objects
//! listed from the API server, and `/debug/status` reads the kernel back with no drift from
//! that plan (a lost change or a leftover of a deleted Service is drift). No node's proxy may
//! log an accept failure (a listener a sync closed is not one).
//!
//! Userspace mode relays every connection in the proxy process itself, so while it is dead
//! nothing accepts on its listeners: its failures are counted and reported, and must fall
//! while node 1 has no synced proxy (see [`may_fail`]): a UDP conntrack entry left redirected
//! to the dead process's listener port is deleted by the conntrack reconciler's pass after the
//! new process's first sync, so its refusals end with the window too.
//!
//! `KILLS=20` gives the figure; `KILL_SEED=N` replays the random draws (the kill
//! points and the churn's writes). Needs root and `testenv/build`, as the lab does.

mod final_state;

use std::cell::{Cell, RefCell};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::lab::client::{From, Outcome, addr, request};
use crate::lab::cluster::Endpoint;
use crate::lab::scenarios::{cluster_ip, node_port, settle_and_limit, slowdown};
use crate::lab::{Lab, Mode, Proto, Proxy};
use crate::testenv::TestEnv;

/// Kills per mode in the default run; the variable names another count.
const KILLS: u32 = 6;
const KILLS_VAR: &str = "KILLS";
/// Replays a kill and churn schedule.
const SEED_VAR: &str = "KILL_SEED";
/// Writes to the API server per second while the proxy is killed.
const CHURN_PER_SEC: u64 = 10;
/// Services the churn writes to (and their slices).
const CHURN_SERVICES: usize = 6;
/// A kill lands this long after the previous start, at random: half of them in the first
/// range (the new process is reading its lists or making its first sync), half in the second.
/// On this host; a slower machine (the User-mode Linux guest) stretches both by its
/// [`slowdown`], so kills still fall on either side of a process's first sync.
const KILL_AFTER_MS: (u64, u64, u64) = (20, 400, 1500);
/// The restart follows the kill after up to this long.
const RESTART_AFTER_MS: u64 = 300;
/// Attempts per probe process of a stream, and the pause between them.
const CHUNK: u32 = 20;
const INTERVAL_MS: u64 = 20;

/// One lab at a time: three proxies, the churn and the probes are enough for two cores.
static ONE_LAB_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Why a mode may fail connections to the stable Service while node 1 has no synced proxy
/// (from a kill to the first sync of the process started after it); never at other times.
fn may_fail(mode: Mode) -> Option<&'static str> {
    match mode {
        Mode::Userspace => Some(
            "userspace mode: the relay is the proxy process; while it is dead nothing accepts \
             on the listeners its rules lead to (a new connection is refused), and a datagram \
             it took but had not answered is lost",
        ),
        _ => None,
    }
}

/// One kill of node 1's proxy: when, how long after its start, and when its successor started.
struct Kill {
    at: SystemTime,
    after_start: u64,
    restarted: SystemTime,
}

/// How far an attempt's start may be from the time [`stream`] gives it: the times are counted
/// back from when the test saw the probe end, later than it did on a busy machine.
const SLACK: Duration = Duration::from_millis(500);

/// When each process whose log is `log` finished its first sync (klog: `I1206
/// 22:44:46.729560 ... "full sync" number=1`, wall time in UTC, the year left out).
fn first_syncs(log: &str) -> Vec<SystemTime> {
    use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
    let year = Timestamp::try_from(now()).map_or(2026, |t| t.to_zoned(TimeZone::UTC).year());
    log.lines()
        .filter(|l| l.starts_with('I') && l.contains("\"full sync\" number=1 "))
        .filter_map(|l| {
            let (month_day, rest) = l.get(1..5).zip(l.get(6..21))?;
            let text = format!("{year}-{}-{}T{rest}Z", &month_day[..2], &month_day[2..]);
            let t: Timestamp = text.parse().ok()?;
            Some(SystemTime::from(t))
        })
        .collect()
}

/// When node 1 had no synced proxy: from each kill to the first sync of the process started
/// after it, or to the next kill when that came first (or to now, after the last).
fn down_windows(kills: &[Kill], syncs: &[SystemTime]) -> Vec<(SystemTime, SystemTime)> {
    kills
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let next = kills.get(i + 1).map(|n| n.at);
            let synced = syncs
                .iter()
                .copied()
                .filter(|s| *s >= k.restarted && next.is_none_or(|n| *s < n))
                .min();
            (k.at, synced.or(next).unwrap_or_else(now))
        })
        .collect()
}

/// A small seeded generator (splitmix64): the schedule is printed and replayable.
struct Rng(Cell<u64>);

impl Rng {
    fn next(&self) -> u64 {
        let s = self.0.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        self.0.set(s);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn between(&self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[allow(clippy::disallowed_methods, reason = "the test's own settings")]
fn setting(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|s| s.trim().parse().ok())
}

/// One stream of new connections to the stable Service: every attempt's outcome and when it
/// started (approximately: its probe process's start plus the attempts before it).
struct Stream {
    what: String,
    attempts: Vec<(SystemTime, Outcome)>,
}

#[allow(
    clippy::disallowed_methods,
    reason = "attempts, kills and the proxy's log are matched in wall time"
)]
fn now() -> SystemTime {
    SystemTime::now()
}

/// The test for `mode` (see the module doc): panics on a lost connection or a final state
/// other than the plan.
pub async fn kills_under_churn(mode: Mode) {
    let _turn = ONE_LAB_AT_A_TIME.lock().await;
    let kills = setting(KILLS_VAR).map_or(KILLS, |k| u32::try_from(k).unwrap_or(KILLS));
    #[allow(clippy::disallowed_methods, reason = "a fresh seed per run, printed")]
    let seed = setting(SEED_VAR).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let label = format!("ours/{}", mode.as_str());
    eprintln!("{label}: {kills} kills, {SEED_VAR}={seed}");
    let env = TestEnv::shared();
    let lab = Lab::start(env, Proxy::Ours { mode }).await;
    lab.set_settle(settle_and_limit().0);
    let stretch = |ms: u64| (ms as f64 * slowdown()) as u64;
    let kill_after = (
        stretch(KILL_AFTER_MS.0),
        stretch(KILL_AFTER_MS.1),
        stretch(KILL_AFTER_MS.2),
    );

    let svc = lab
        .cluster
        .apply_service(json!({ "metadata": { "name": "stable" }, "spec": {
            "type": "NodePort",
            "ports": [
                { "name": "t", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                { "name": "u", "port": 53, "targetPort": 8080, "protocol": "UDP" },
            ],
        }}))
        .await;
    let eps = ["n1-a", "n2-a", "n3-a"];
    lab.cluster
        .apply_slice(
            "stable-x",
            "stable",
            &[("t", 8080, Proto::Tcp), ("u", 8080, Proto::Udp)],
            &lab.endpoints(&eps),
        )
        .await;
    let vip = cluster_ip(&svc);
    let client_pod = From::Pod(lab.pod("n1-b"));
    let streams = [
        (
            client_pod,
            Proto::Tcp,
            addr(vip, 80),
            "pod n1-b → ClusterIP TCP",
        ),
        (
            client_pod,
            Proto::Udp,
            addr(vip, 53),
            "pod n1-b → ClusterIP UDP",
        ),
        (
            From::Client,
            Proto::Tcp,
            addr(lab.topo.nodes[0].ip, node_port(&svc, 0)),
            "external client → node 1 NodePort TCP",
        ),
    ];
    for (from, proto, target, what) in &streams {
        lab.eventually(what, || async {
            lab.all_reach(*from, *proto, *target, 6).await.map(|_| ())
        })
        .await
        .unwrap_or_else(|e| panic!("{label}: before any kill: {e}"));
    }

    let rng = Rng(Cell::new(seed));
    let done = Cell::new(false);
    let kill_log = RefCell::new(Vec::<Kill>::new());
    let kill_loop = async {
        for _ in 0..kills {
            let after = if rng.between(0, 1) == 0 {
                rng.between(kill_after.0, kill_after.1)
            } else {
                rng.between(kill_after.1, kill_after.2)
            };
            tokio::time::sleep(Duration::from_millis(after)).await;
            lab.stop_proxy(0);
            let at = now();
            let restart = rng.between(0, RESTART_AFTER_MS);
            tokio::time::sleep(Duration::from_millis(restart)).await;
            lab.start_proxy(0);
            kill_log.borrow_mut().push(Kill {
                at,
                after_start: after,
                restarted: now(),
            });
        }
        // The last start serves the streams a while too.
        tokio::time::sleep(Duration::from_millis(kill_after.2)).await;
        done.set(true);
    };
    let churn_rng = Rng(Cell::new(seed ^ 0x5eed));
    let churn = churn(&lab, &churn_rng, &done);
    let run = |i: usize| {
        let (from, proto, target, what) = streams[i];
        stream(&lab, from, proto, target, what, &done)
    };
    let started = tokio::time::Instant::now();
    let ((), writes, s0, s1, s2) = tokio::join!(kill_loop, churn, run(0), run(1), run(2));
    let took = started.elapsed();
    eprintln!(
        "{label}: {kills} kills in {:.1}s; {writes} API writes ({:.1}/s)",
        took.as_secs_f64(),
        writes as f64 / took.as_secs_f64()
    );

    let kills_done = kill_log.into_inner();
    let log = lab
        .proxy_logs()
        .into_iter()
        .next()
        .expect("node 1's proxy runs");
    let syncs = first_syncs(&std::fs::read_to_string(&log).unwrap_or_default());
    let down = down_windows(&kills_done, &syncs);
    let down_ms: u128 = down
        .iter()
        .map(|(a, b)| b.duration_since(*a).unwrap_or_default().as_millis())
        .sum();
    let early = kills_done
        .windows(2)
        .filter(|k| !syncs.iter().any(|s| *s >= k[0].restarted && *s < k[1].at))
        .count();
    eprintln!(
        "{label}: each kill this many ms after the start before it: {:?}",
        kills_done.iter().map(|k| k.after_start).collect::<Vec<_>>()
    );
    eprintln!(
        "{label}: {early} of {} kills came before the killed process's first sync; node 1 had \
         no synced proxy for {down_ms} ms in all ({} ms a kill)",
        kills_done.len(),
        down_ms / kills_done.len().max(1) as u128,
    );
    let mut bad = Vec::new();
    for s in [&s0, &s1, &s2] {
        let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
        let mut outside = Vec::new();
        for (at, o) in &s.attempts {
            let Err(kind) = o else { continue };
            *kinds.entry(kind.as_str()).or_default() += 1;
            let while_down = down
                .iter()
                .any(|(a, b)| *at + SLACK >= *a && *at <= *b + SLACK);
            if !while_down {
                outside.push(kind.clone());
            }
            if may_fail(mode).is_none() || !while_down {
                bad.push(format!(
                    "{}: {kind} ({})",
                    s.what,
                    if while_down {
                        "while node 1 had no synced proxy"
                    } else {
                        "while node 1's proxy had synced"
                    }
                ));
            }
        }
        eprintln!(
            "{label}: {}: {} connections, {} failed {kinds:?}, {} of them while node 1's \
             proxy had synced",
            s.what,
            s.attempts.len(),
            kinds.values().sum::<usize>(),
            outside.len(),
        );
        if s.attempts.iter().all(|(_, o)| o.is_err()) {
            bad.push(format!("{}: no connection succeeded", s.what));
        }
    }
    if let Some(why) = may_fail(mode) {
        eprintln!("{label}: failures allowed while node 1 has no synced proxy: {why}");
    }
    // A listener closed by a sync is not an accept failure.
    for log in lab.proxy_logs() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let failed = text
            .lines()
            .filter(|l| l.contains("\"accept failed\""))
            .count();
        if failed > 0 {
            bad.push(format!("{log}: {failed} \"accept failed\" warnings"));
        }
    }

    let converged = lab
        .eventually("node 1 holds the plan of the final objects", || {
            final_state::final_state_matches(&lab)
        })
        .await;
    let tails = lab.proxy_log_tails(20).join("\n");
    drop(lab);
    assert!(
        bad.is_empty() && converged.is_ok(),
        "{label} ({SEED_VAR}={seed}): {} failures (connections to the stable Service, proxy \
         warnings), the first: \
         {:?}\n\
         final state: {converged:?}\n{tails}",
        bad.len(),
        &bad[..bad.len().min(10)],
    );
}

/// Runs probe processes of [`CHUNK`] attempts from `from` to `target` until `done`.
async fn stream(
    lab: &Lab,
    from: From<'_>,
    proto: Proto,
    target: std::net::SocketAddr,
    what: &str,
    done: &Cell<bool>,
) -> Stream {
    let mut attempts = Vec::new();
    while !done.get() {
        let mut r = request(proto, target, CHUNK);
        r.interval_ms = INTERVAL_MS;
        let chunk = lab.attempts(from, r).await;
        // Counted back from when the probe ended: its start-up is not in its attempts.
        let mut at = now();
        let mut timed = Vec::new();
        for a in chunk.into_iter().rev() {
            at -= Duration::from_millis(a.ms);
            timed.push((at, a.reply.ok_or_else(|| a.error.unwrap_or_default())));
            at -= Duration::from_millis(INTERVAL_MS);
        }
        attempts.extend(timed.into_iter().rev());
    }
    Stream {
        what: what.to_owned(),
        attempts,
    }
}

/// Writes to the churn Services and their slices, [`CHURN_PER_SEC`] a second, until `done`;
/// how many writes it made. Each write creates or changes a Service (its port and session
/// affinity), deletes it, replaces its slice's endpoints, or deletes the slice.
async fn churn(lab: &Lab, rng: &Rng, done: &Cell<bool>) -> u64 {
    let mut services = [false; CHURN_SERVICES];
    let mut slices = [false; CHURN_SERVICES];
    let mut writes = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / CHURN_PER_SEC));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let pods: Vec<String> = lab.pods.iter().map(|p| p.name.clone()).collect();
    while !done.get() {
        tick.tick().await;
        let i = rng.between(0, CHURN_SERVICES as u64 - 1) as usize;
        let name = format!("churn-{i}");
        let slice = format!("churn-{i}-x");
        match rng.between(0, 9) {
            0 | 1 if services[i] => {
                lab.cluster.delete_service(&name).await;
                services[i] = false;
            }
            2 if slices[i] => {
                lab.cluster.delete_slice(&slice).await;
                slices[i] = false;
            }
            0..=3 => {
                lab.cluster
                    .apply_service(churn_service(&name, i, rng))
                    .await;
                services[i] = true;
            }
            _ => {
                let endpoints: Vec<Endpoint> = pods
                    .iter()
                    .filter(|_| rng.between(0, 1) == 1)
                    .map(|p| {
                        let mut e = lab.endpoint(lab.pod(p));
                        e.ready = rng.between(0, 4) > 0;
                        e
                    })
                    .collect();
                lab.cluster
                    .apply_slice(&slice, &name, &[("p", 8080, Proto::Tcp)], &endpoints)
                    .await;
                slices[i] = true;
            }
        }
        writes += 1;
    }
    writes
}

/// Churn Service `name`: even ones ClusterIP, odd ones NodePort; a port and a session
/// affinity drawn anew at each write.
fn churn_service(name: &str, i: usize, rng: &Rng) -> Value {
    let port = 80 + rng.between(0, 3);
    let affinity = if rng.between(0, 1) == 1 {
        "ClientIP"
    } else {
        "None"
    };
    let kind = if i.is_multiple_of(2) {
        "ClusterIP"
    } else {
        "NodePort"
    };
    json!({ "metadata": { "name": name }, "spec": {
        "type": kind,
        "sessionAffinity": affinity,
        "ports": [{ "name": "p", "port": port, "targetPort": 8080, "protocol": "TCP" }],
    }})
}
