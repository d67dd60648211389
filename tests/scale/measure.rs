//! One proxy at one scale, in a fresh node: the probe's floor before the proxy starts, then,
//! once the machine is quiet (`quiet.rs`), start it, time its cold sync, let it settle, take
//! the first-packet latency (`first_packet.rs`) and the netlink messages of its idle syncs
//! (`idle.rs`), one endpoint change and the churn (`changes.rs`), and read what the process
//! cost.
//!
//! Cold sync is taken two ways from the same start (the wall-clock time just before the proxy is
//! spawned): from the proxy's own metrics (`kubeproxy_sync_proxy_rules_last_timestamp_seconds`
//! once `kubeproxy_sync_proxy_rules_duration_seconds` has counted a sync), and from the first
//! connection through the probe ClusterIP that the pod answers. The second is what a user sees;
//! the first is what the proxy reports.

use std::net::SocketAddrV4;
use std::time::{Duration, SystemTime};

use super::changes;
use super::first_packet;
use super::helper::Aim;
use super::idle;
use super::memory_cgroup::{self, MemoryCgroup};
use super::metrics::{LAST_SYNC, Metrics, SYNC_DURATION, scrape};
use super::node::Node;
use super::objects::{Cluster, POD_A, PROBE_IP, SERVICE_PORT, TARGET_PORT};
use super::options::{Implementation, Options, ProxyKind};
use super::process;
use super::profile::CpuProfile;
use super::quiet;
use super::report::{Figure, ProxyResult};
use super::watch::{Outcome, Watcher, seconds_between};
use crate::testenv::TestEnv;

/// How often the harness reads a proxy's metrics while waiting.
const POLL: Duration = Duration::from_millis(100);

/// A proxy running in its node, and what the phases need.
pub struct Session<'a> {
    pub opts: &'a Options,
    pub node: Node,
    pub pid: u32,
    pub notes: Vec<String>,
    /// The proxy sampled during the churn (`soak`).
    pub soak: Vec<super::soak::Sample>,
}

impl Session<'_> {
    /// The proxy's metrics now, or why not (also when the proxy has exited).
    pub async fn metrics(&mut self) -> Result<Metrics, String> {
        if let Some(exit) = self.node.proxy_exited() {
            return Err(exit);
        }
        scrape(&self.opts.exec, &self.node.ns.name).await
    }

    /// A watcher for the probe Service answering from `want`.
    pub fn watch_probe(
        &self,
        want: std::net::Ipv4Addr,
        interval: Duration,
        limit: Duration,
    ) -> Result<Watcher, String> {
        let aim = Aim::new(SocketAddrV4::new(PROBE_IP, SERVICE_PORT), want);
        Watcher::start(&self.opts.exec, &self.node.ns.name, aim, interval, limit)
    }
}

/// Measures `kind` against `cluster`; never panics on the proxy's account.
pub async fn measure(
    opts: &Options,
    env: &TestEnv,
    cluster: &mut Cluster,
    kind: ProxyKind,
) -> ProxyResult {
    let mut notes = Vec::new();
    if let Some(why) = kind.unavailable() {
        return ProxyResult {
            kind,
            figures: Err(why),
            notes,
            soak: Vec::new(),
        };
    }
    let mut node = match Node::build(&opts.exec) {
        Ok(n) => n,
        Err(e) => {
            return ProxyResult {
                kind,
                figures: Err(format!("not run: node setup failed: {e}")),
                notes,
                soak: Vec::new(),
            };
        }
    };
    // The probe's floor: the same connects straight to the pod, before any proxy rule exists.
    let floor = first_packet::probe(
        &opts.exec,
        &node.ns.name,
        Aim::new(SocketAddrV4::new(POD_A, TARGET_PORT), POD_A),
        opts.latency_samples,
    )
    .await;
    notes.push(quiet::wait().await);
    let started = SystemTime::now();
    let pid = node.start_proxy(env, kind, opts);
    // Declared before the session, so dropped after it: the proxy is gone by then.
    let memory = match opts.memory_max {
        Some(limit) if kind.implementation == Implementation::Ours => {
            match MemoryCgroup::create(&kind.flag_name(), limit)
                .and_then(|g| g.adopt(pid).map(|()| g))
            {
                Ok(g) => Some(g),
                Err(e) => {
                    notes.push(format!("--memory-max not applied: {e}"));
                    None
                }
            }
        }
        _ => None,
    };
    let profile = if opts.perf_cold && kind.implementation == Implementation::Ours {
        let path = opts.out_dir.join(format!(
            "perf-{}-{}x{}.data",
            kind.flag_name(),
            cluster.scale().services,
            cluster.scale().endpoints
        ));
        CpuProfile::start(pid, &path)
            .map_err(|e| notes.push(format!("cold-start profile: {e}")))
            .ok()
    } else {
        None
    };
    let mut s = Session {
        opts,
        node,
        pid,
        notes,
        soak: Vec::new(),
    };
    let mut figures = cold(&mut s, cluster, started).await;
    if let Some(p) = profile {
        match tokio::task::spawn_blocking(move || p.stop()).await {
            Ok(Ok(path)) => s
                .notes
                .push(format!("cold-start profile: {}", path.display())),
            Ok(Err(e)) => s.notes.push(format!("cold-start profile: {e}")),
            Err(e) => s.notes.push(format!("cold-start profile: {e}")),
        }
    }
    // `ip netns exec` execs the proxy in place, so its pid is the proxy's (checked after start).
    if let Some(comm) = process::command_name(pid)
        && comm == "ip"
    {
        s.notes
            .push("pid is `ip netns exec`, not the proxy: RSS and CPU are not the proxy's".into());
    }
    let log = s.node.proxy_log();
    let mut latency = vec![Figure::Missing; 2];
    let mut idle_messages = Figure::Missing;
    let worked = !(figures[1] == Figure::Missing || matches!(figures[1], Figure::Over(_)));
    if !worked {
        // Without a working ClusterIP the later phases would only measure the limits.
        figures.extend(std::iter::repeat_n(Figure::Missing, 8));
        s.notes.push(
            "first packet, idle syncs, change and churn not measured: the ClusterIP never worked"
                .into(),
        );
    } else {
        settle(&mut s).await;
        latency = first_packet_figures(&mut s, cluster).await;
        idle_messages = idle::messages_per_idle_sync(&mut s).await;
        figures.extend(changes::one_change(&mut s, cluster).await);
        figures.extend(changes::churn(&mut s, cluster).await);
    }
    let usage = process::usage(pid);
    figures.push(usage.map_or(Figure::Missing, |u| {
        Figure::Mib(u.peak_rss as f64 / 1024.0 / 1024.0)
    }));
    figures.push(usage.map_or(Figure::Missing, |u| Figure::Secs(u.cpu_seconds)));
    figures.extend(latency);
    figures.push(match floor {
        Ok(l) => {
            s.notes.push(format!(
                "first packet, no rules (floor, straight to the pod): {l}"
            ));
            Figure::Secs(l.median)
        }
        Err(e) => {
            s.notes.push(format!("first packet, no rules (floor): {e}"));
            Figure::Missing
        }
    });
    figures.push(idle_messages);
    figures.push(usage.map_or(Figure::Missing, |u| {
        Figure::Mib(u.rss as f64 / 1024.0 / 1024.0)
    }));
    figures.push(if worked {
        restart(&mut s, env, kind).await
    } else {
        Figure::Missing
    });
    if let Some(group) = &memory {
        s.notes.push(memory_cgroup::summary(&group.outcome()));
    }
    s.notes.push(format!("log: {log}"));
    ProxyResult {
        kind,
        figures: Ok(figures),
        notes: s.notes,
        soak: s.soak,
    }
}

/// Cold sync: columns 0-3 (metrics, first connection, first sync's own duration, CPU).
async fn cold(s: &mut Session<'_>, cluster: &Cluster, started: SystemTime) -> Vec<Figure> {
    let limit = s.opts.limits.cold;
    let over = Figure::Over(limit.as_secs_f64());
    let mut watcher = match s.watch_probe(cluster.probe_ip(), Duration::from_millis(20), limit) {
        Ok(w) => w,
        Err(e) => {
            s.notes.push(e);
            return vec![Figure::Missing; 4];
        }
    };
    let watch = tokio::spawn(async move {
        let _ = watcher.armed().await;
        watcher.outcome().await
    });
    let (mut by_metrics, mut first_sync) = (None, None);
    let mut last_error = String::new();
    while by_metrics.is_none() && seconds_between(started, SystemTime::now()) < limit.as_secs_f64()
    {
        match s.metrics().await {
            Ok(m) => {
                let h = m.histogram(SYNC_DURATION);
                if h.count >= 1.0 {
                    let at = m.max(LAST_SYNC).unwrap_or(0.0);
                    let start = seconds_between(std::time::UNIX_EPOCH, started);
                    first_sync = Some(Figure::Secs(h.sum / h.count));
                    if h.count > 1.0 {
                        // The first sync ended no later than the last one did.
                        by_metrics = Some(Figure::AtMost(at - start));
                        s.notes.push(format!(
                            "cold sync: {} syncs had completed at the first reading of the metrics; shown: the last one's end (an upper bound) and their mean duration",
                            h.count
                        ));
                    } else {
                        by_metrics = Some(Figure::Secs(at - start));
                    }
                }
            }
            Err(e) if e.contains("exited") => {
                s.notes.push(e);
                break;
            }
            Err(e) => last_error = e,
        }
        tokio::time::sleep(POLL).await;
    }
    let cpu = process::usage(s.pid).map_or(Figure::Missing, |u| Figure::Secs(u.cpu_seconds));
    if by_metrics.is_none() && !last_error.is_empty() {
        s.notes.push(format!("metrics, last reading: {last_error}"));
    }
    let connected = match watch.await {
        Ok(Outcome::Seen(at)) => Figure::Secs(seconds_between(started, at)),
        Ok(Outcome::Timeout(last)) => {
            s.notes.push(format!(
                "no connection through the probe ClusterIP within {limit:?} (last attempt: {last}){}",
                if by_metrics.is_some() {
                    "; the proxy reported a sync, so it programmed nothing that works (no dataplane?)"
                } else {
                    ""
                }
            ));
            over.clone()
        }
        Ok(Outcome::Failed(e)) => {
            s.notes.push(e);
            Figure::Missing
        }
        Err(e) => {
            s.notes.push(format!("watcher task: {e}"));
            Figure::Missing
        }
    };
    vec![
        by_metrics.unwrap_or(over.clone()),
        connected,
        first_sync.unwrap_or(Figure::Missing),
        cpu,
    ]
}

/// Restart with the rules in place: the proxy killed (SIGKILL, so what it programmed stays, as
/// after a crash or an upgrade that kills the old pod) and started again, timed from the new
/// start to the end of its first sync by its metrics. For ours the note gives that sync's
/// operations from its log (none when it adopts what is there). Last, after the process's
/// costs were read, so they are the first process's.
async fn restart(s: &mut Session<'_>, env: &TestEnv, kind: ProxyKind) -> Figure {
    if kind.mode == "ebpf" {
        s.notes
            .push("restart: not measured in eBPF mode (its cgroup is set up once)".into());
        return Figure::Missing;
    }
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &s.pid.to_string()])
        .output();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.node.proxy_exited().is_none() {
        if tokio::time::Instant::now() > deadline {
            s.notes
                .push("restart: the proxy did not exit on SIGKILL within 10 s".into());
            return Figure::Missing;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let quiet = quiet::wait().await;
    s.notes.push(format!("restart: {quiet}"));
    let started = SystemTime::now();
    s.pid = s.node.start_proxy(env, kind, s.opts);
    let limit = s.opts.limits.cold;
    let start = seconds_between(std::time::UNIX_EPOCH, started);
    while seconds_between(started, SystemTime::now()) < limit.as_secs_f64() {
        match s.metrics().await {
            Ok(m) if m.histogram(SYNC_DURATION).count >= 1.0 => {
                let at = m.max(LAST_SYNC).unwrap_or(0.0) - start;
                let count = m.histogram(SYNC_DURATION).count;
                if kind.implementation == Implementation::Ours {
                    let line = first_sync_line(&s.node.proxy_log());
                    s.notes
                        .push(format!("restart: the first sync's log line: {line}"));
                }
                return if count > 1.0 {
                    s.notes.push(format!(
                        "restart: {count} syncs had completed at the first reading; shown: the last one's end"
                    ));
                    Figure::AtMost(at)
                } else {
                    Figure::Secs(at)
                };
            }
            Ok(_) => {}
            Err(e) if e.contains("exited") => {
                s.notes.push(format!("restart: {e}"));
                return Figure::Missing;
            }
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.notes
        .push(format!("restart: no sync within {limit:?} of the restart"));
    Figure::Over(limit.as_secs_f64())
}

/// The last `number=1` sync line of the proxy's log (the restarted process's first sync).
fn first_sync_line(log: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .rev()
        .find(|l| l.contains("number=1 ") && l.contains("sync"))
        .map(|l| l.chars().take(400).collect())
        .unwrap_or_else(|| "(none found)".into())
}

/// First-packet latency through the probe ClusterIP with the proxy idle: median and p99.
async fn first_packet_figures(s: &mut Session<'_>, cluster: &Cluster) -> Vec<Figure> {
    let aim = Aim::new(
        SocketAddrV4::new(PROBE_IP, SERVICE_PORT),
        cluster.probe_ip(),
    );
    let probe =
        first_packet::probe(&s.opts.exec, &s.node.ns.name, aim, s.opts.latency_samples).await;
    match probe {
        Ok(l) => {
            s.notes
                .push(format!("first packet through the ClusterIP: {l}"));
            vec![Figure::Secs(l.median), Figure::Secs(l.p99)]
        }
        Err(e) => {
            s.notes.push(e);
            vec![Figure::Missing; 2]
        }
    }
}

/// Waits until the proxy's sync count has not moved for two seconds (at most the change limit),
/// so the next phase does not measure the tail of the cold start.
async fn settle(s: &mut Session<'_>) {
    let deadline = tokio::time::Instant::now() + s.opts.limits.change;
    let mut last = (f64::NAN, tokio::time::Instant::now());
    while tokio::time::Instant::now() < deadline {
        let count = match s.metrics().await {
            Ok(m) => m.histogram(SYNC_DURATION).count,
            Err(_) => return,
        };
        if count != last.0 {
            last = (count, tokio::time::Instant::now());
        } else if last.1.elapsed() >= Duration::from_secs(2) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
