//! Times the nftables applier against the real kernel (root), for both encoders (netlink and
//! `nft -f` text) in one run: cold apply into an empty network namespace, one endpoint change
//! (a steady-state sync through the incremental planner, with the tracker-style changes naming
//! the one service port; once, then repeated), and a restart's adoption (dump and parse), at
//! 1,000 Services × 10 endpoints, 10,000 × 10, 44,000 × 1 and 5,000 × 50. Not a test: timings
//! are reported, never asserted.
//!
//! Run: `sudo cargo run --release --example nftables_apply [SERVICES ENDPOINTS ...]`; set
//! `ENCODERS=netlink` (or `nft`) to time one encoder only. Each size and encoder runs in its
//! own namespace `nfa-bench-<pid>-<n>`, deleted afterwards. Results go to docs/benchmarks.md.
//!
//! `MONITOR` says who listens to the namespace's nf_tables notifications meanwhile, because a
//! listener makes the kernel build one notification per element of every batch:
//! `none` (the default: nobody in this run; other processes on the host still count, since the
//! kernel asks whether anyone listens per protocol, not per namespace), `nft` (an
//! `nft monitor` process, a listener we cannot pause), or `ours` (the proxy's own monitor,
//! which large transactions pause).

#![allow(
    clippy::disallowed_methods,
    reason = "a timing harness: it reads the clock and runs ip"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::netns;
use support::synthetic;

use kube_proxy_rs::cluster::{Changes, Snapshot};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::monitor::{self, OurTable};
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane, plan_all};
use kube_proxy_rs::dataplane::{Dataplane, SyncReport};
use kube_proxy_rs::nft::adopt::Parsed;
use kube_proxy_rs::nft::backend::{self, Backend};
use kube_proxy_rs::nft::{Family, Ruleset, Transaction};
use netns::NetNs;
use synthetic::Synthetic;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A real backend, timing each apply and dump.
struct Timed {
    inner: Box<dyn Backend>,
    run: Duration,
    dump: Duration,
}

impl Backend for Timed {
    fn run(&mut self, transactions: &[Transaction]) -> Result<(), backend::Error> {
        let t = Instant::now();
        let r = self.inner.run(transactions);
        self.run += t.elapsed();
        r
    }

    fn dump(&mut self, family: Family) -> Result<Option<Parsed>, backend::Error> {
        let t = Instant::now();
        let r = self.inner.dump(family);
        self.dump += t.elapsed();
        r
    }

    fn dump_expecting(
        &mut self,
        family: Family,
        want: &Ruleset,
    ) -> Result<Option<Parsed>, backend::Error> {
        let t = Instant::now();
        let r = self.inner.dump_expecting(family, want);
        self.dump += t.elapsed();
        r
    }

    fn watched_by(&mut self, drift: std::sync::Arc<Drift>) {
        self.inner.watched_by(drift)
    }
}

/// One-endpoint syncs timed after the first, alternating the endpoint back and forth.
const REPEATS: usize = 20;

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn dataplane(ns: &NetNs, encoder: NftablesEncoder, drift: Arc<Drift>) -> NftablesDataplane<Timed> {
    let backend = Timed {
        inner: backend::for_encoder(encoder, Some(&ns.name)),
        run: Duration::ZERO,
        dump: Duration::ZERO,
    };
    NftablesDataplane::with_backend(ModeConfig::default(), backend, drift)
}

/// Who listens to nf_tables notifications during a measurement (`MONITOR`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Listener {
    None,
    Nft,
    Ours,
}

/// A listener running in the namespace until dropped.
enum Listening {
    None,
    Nft(std::process::Child),
    /// The runtime the monitor task runs on; dropping it stops the monitor.
    Ours {
        _runtime: tokio::runtime::Runtime,
    },
}

impl Drop for Listening {
    fn drop(&mut self) {
        if let Listening::Nft(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `listener` in `ns`, reporting to `drift`, and returns once it listens.
fn listen(listener: Listener, ns: &NetNs, drift: &Arc<Drift>) -> Listening {
    match listener {
        Listener::None => Listening::None,
        Listener::Nft => {
            let child = ns
                .command("nft")
                .arg("monitor")
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("nft monitor");
            // It subscribes right after start; give it the time to.
            std::thread::sleep(Duration::from_millis(500));
            Listening::Nft(child)
        }
        Listener::Ours => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            runtime.spawn(monitor::run(
                Some(ns.name.clone()),
                drift.clone(),
                &OurTable,
            ));
            // It serves pause requests once subscribed; one answered pause says it listens.
            let deadline = Instant::now() + Duration::from_secs(5);
            while drift.pause_monitor().is_none() {
                assert!(Instant::now() < deadline, "the monitor did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
            Listening::Ours { _runtime: runtime }
        }
    }
}

/// This process's peak resident memory (`VmHWM`), in MB.
fn peak_rss_mb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024)
}

/// One sync, timed; the sync must succeed (`what` names it when it does not).
fn timed_sync(
    dp: &mut NftablesDataplane<Timed>,
    snap: &Snapshot,
    changes: &Changes,
    full: bool,
    what: &str,
) -> (SyncReport, Duration) {
    let t = Instant::now();
    let report = dp.sync(snap, changes, full).expect(what);
    (report, t.elapsed())
}

/// Operations sent over both families.
fn operations(report: &SyncReport) -> usize {
    report.families.iter().map(|f| f.operations).sum()
}

fn measure(services: usize, endpoints: usize, encoder: NftablesEncoder, listener: Listener) {
    println!(
        "== {services} services x {endpoints} endpoints, encoder {encoder:?}, listener {listener:?}"
    );
    let ns = NetNs::new("nfa-bench");
    let drift = Drift::new();
    let listening = listen(listener, &ns, &drift);
    let pauses_before = drift.pauses();
    let cfg = ModeConfig::default();
    let cluster = Synthetic {
        services,
        endpoints,
    };
    let snap = cluster.snapshot();
    let moved = cluster.moved(&snap, "10.200.0.1");
    let t = Instant::now();
    let planned = plan_all(&snap, &cfg);
    println!("plan (both families): {}", ms(t.elapsed()));
    let objects: usize = planned.iter().map(|r| r.objects()).sum();

    let mut dp = dataplane(&ns, encoder, drift.clone());
    let (r, total) = timed_sync(&mut dp, &snap, &Changes::default(), true, "cold");
    let b = dp.applier().backend();
    println!(
        "cold apply: total {} (backend run {}, empty-table probe {}), {} operations, {} objects",
        ms(total),
        ms(b.run),
        ms(b.dump),
        operations(&r),
        objects,
    );

    // What the tracker reports for this change: the one service port.
    let changes = Changes {
        ports: [cluster.moved_port()].into(),
        ..Changes::default()
    };
    dp.applier_mut().backend_mut().run = Duration::ZERO;
    let (r, total) = timed_sync(&mut dp, &moved, &changes, false, "one change");
    assert!(!r.full, "a steady-state sync");
    println!(
        "one endpoint change: total {} (backend run {}), {} operations",
        ms(total),
        ms(dp.applier().backend().run),
        operations(&r),
    );

    let mut totals = Vec::with_capacity(REPEATS);
    let mut runs = Vec::with_capacity(REPEATS);
    for k in 0..REPEATS {
        let next = if k % 2 == 0 { &snap } else { &moved };
        dp.applier_mut().backend_mut().run = Duration::ZERO;
        let (r, total) = timed_sync(&mut dp, next, &changes, false, "one change");
        totals.push(total);
        runs.push(dp.applier().backend().run);
        assert!(!r.full, "a steady-state sync");
    }
    totals.sort();
    runs.sort();
    println!(
        "one endpoint change x{REPEATS}: total median {} (min {}, max {}), backend run median {}",
        ms(totals[REPEATS / 2]),
        ms(totals[0]),
        ms(totals[REPEATS - 1]),
        ms(runs[REPEATS / 2])
    );

    let mut restarted = dataplane(&ns, encoder, drift.clone());
    let (r, total) = timed_sync(&mut restarted, &moved, &Changes::default(), true, "adopt");
    println!(
        "restart (adopt, nothing changed): total {} (dump and parse {}), {} operations",
        ms(total),
        ms(restarted.applier().backend().dump),
        operations(&r)
    );
    if listener == Listener::Ours {
        println!(
            "monitor paused for {} of these syncs",
            drift.pauses() - pauses_before
        );
    }
    drop(listening);
    println!("peak RSS of this process so far: {} MB", peak_rss_mb());
}

fn main() {
    // The dataplane's own logs (a monitor pause, a full sync it asks for), with `RUST_LOG`.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numbers: SERVICES ENDPOINTS ..."))
        .collect();
    let sizes: Vec<(usize, usize)> = if args.is_empty() {
        vec![(1_000, 10), (10_000, 10), (44_000, 1), (5_000, 50)]
    } else {
        args.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    let encoders: Vec<NftablesEncoder> = match std::env::var("ENCODERS").as_deref() {
        Ok("netlink") => vec![NftablesEncoder::Netlink],
        Ok("nft") => vec![NftablesEncoder::Nft],
        _ => vec![NftablesEncoder::Netlink, NftablesEncoder::Nft],
    };
    let listener = match std::env::var("MONITOR").as_deref() {
        Ok("nft") => Listener::Nft,
        Ok("ours") => Listener::Ours,
        Ok("none") | Err(_) => Listener::None,
        Ok(other) => panic!("MONITOR={other}: accepted values are none, nft, ours"),
    };
    for (s, e) in sizes {
        for encoder in &encoders {
            measure(s, e, *encoder, listener);
        }
    }
}
