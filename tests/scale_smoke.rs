//! CI smoke run of the scale harness: 1,000 Services × 10 endpoints, ours in nftables
//! mode and upstream in nftables mode, with a short churn and 100 first-packet connects. It
//! asserts only that the harness produced a result for every proxy, its first-packet probe
//! and ours' netlink messages per idle sync included, and wrote its report and PNG charts (numbers are never asserted: the machine is
//! shared), so the harness cannot rot. The real runs: `cargo bench --bench scale` (see docs/benchmarks.md).
//!
//! Needs root, `ip`, `nft` and `testenv/build`; without root it fails with that reason.

#![allow(
    clippy::disallowed_methods,
    reason = "the smoke run starts the harness's processes"
)]

use support::scale;

use std::path::PathBuf;
use std::time::Duration;

use scale::helper::SelfExec;
use scale::options::{Churn, IptablesFlavour, Limits, Options, ProxyKind, Scale};
use scale::report::Figure;

/// The libtest name of the entry point of the harness's in-namespace processes.
const HELPER_TEST: &str = "scale_helper_process";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_harness_measures_both_proxies_at_1000_by_10() {
    let opts = Options {
        scales: vec![Scale {
            services: 1_000,
            endpoints: 10,
        }],
        proxies: vec![ProxyKind::OURS_NFTABLES, ProxyKind::UPSTREAM_NFTABLES],
        churn: Churn {
            rate: 5.0,
            duration: Duration::from_secs(6),
        },
        limits: Limits {
            cold: Duration::from_secs(60),
            change: Duration::from_secs(20),
            drain: Duration::from_secs(20),
        },
        concurrency: 32,
        memory_max: None,
        proxy_verbosity: 2,
        perf_cold: false,
        nodes: 20,
        latency_samples: 100,
        iptables_flavour: IptablesFlavour::Nft,
        // Short, so the idle-sync phase takes seconds; the same for both proxies.
        sync_period: Some(Duration::from_secs(5)),
        guest: None,
        ours_bin: PathBuf::from(env!("CARGO_BIN_EXE_kube-proxy-rs")),
        exec: SelfExec::current(&[HELPER_TEST, "--exact", "--nocapture", "--test-threads=1"]),
        out_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("scale-smoke"),
    };
    let reports = scale::run(&opts).await.expect("the harness ran");
    let text = scale::write_report(&opts, "cargo test --test scale_smoke", &reports)
        .expect("report written");
    eprintln!("{text}");
    for chart in ["scale-sync-rss.png", "scale-first-packet.png"] {
        let bytes = std::fs::read(opts.out_dir.join(chart)).expect("chart written");
        assert!(bytes.starts_with(b"\x89PNG"), "{chart} is a PNG");
    }
    assert_eq!(reports.len(), 1);
    let results = &reports[0].results;
    assert_eq!(results.len(), opts.proxies.len(), "a result per proxy");
    for r in results {
        let figures = r
            .figures
            .as_ref()
            .unwrap_or_else(|e| panic!("{} was not measured: {e}", r.kind.label()));
        assert_eq!(figures.len(), scale::report::COLUMNS.len());
        // A result, not a number: the cold sync either has a value or says it ran out of time.
        assert_ne!(
            figures[0],
            Figure::Missing,
            "{}: {:?}",
            r.kind.label(),
            r.notes
        );
        // The first-packet probe ran through the ClusterIP and before the proxy (the floor).
        let at = |name: &str| scale::report::COLUMNS.iter().position(|c| *c == name);
        for column in ["first packet p50", "first packet p50, no rules (floor)"] {
            let i = at(column).expect("column exists");
            assert!(
                matches!(figures[i], Figure::Secs(_)),
                "{}: {column}: {:?}; {:?}",
                r.kind.label(),
                figures[i],
                r.notes
            );
        }
        // Both were restarted over their own rules and synced again.
        let restart = &figures[scale::report::column("restart to first sync (metrics)")];
        assert!(
            matches!(restart, Figure::Secs(_) | Figure::AtMost(_)),
            "{}: restart: {restart:?}; {:?}",
            r.kind.label(),
            r.notes
        );
        // Ours counts its netlink messages per idle sync; upstream has no such count.
        let idle = &figures[scale::report::column("netlink messages per idle sync")];
        match r.kind.implementation {
            scale::options::Implementation::Ours => assert!(
                matches!(idle, Figure::Count(_)),
                "{}: {idle:?}; {:?}",
                r.kind.label(),
                r.notes
            ),
            scale::options::Implementation::Upstream => assert_eq!(idle, &Figure::Missing),
        }
    }
}

/// Not a test: the entry point of the harness's echo server, watcher and metrics reader, which
/// re-run this binary inside a namespace (see `scale/helper.rs`). Without their environment
/// variable it returns at once.
#[test]
fn scale_helper_process() {
    scale::helper::run_if_requested();
}
