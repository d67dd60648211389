//! The scale benchmark (issue 10): upstream kube-proxy and ours against a real API server with
//! N Services × M endpoints, one after another in fresh node namespaces, measured the same way.
//! What each figure means and how it is taken: docs/benchmarks.md, "Scale harness".
//!
//! ```text
//! cargo bench --bench scale -- --scale 1000x10 --scale 10000x10
//!     [--proxies ours-nftables,ours-iptables,upstream-nftables,upstream-iptables]
//!     [--churn-rate 10] [--churn-secs 30] [--cold-limit 900] [--change-limit 60]
//!     [--drain-limit 120] [--concurrency 32] [--nodes 100] [--latency-samples 1000]
//!     [--iptables-flavour nft|legacy] [--out target/scale]
//! cargo bench --bench scale -- --charts-from run1/scale-results.json \
//!     --charts-from run2/scale-results.json --out docs/images    # charts of several runs
//! ```
//!
//! Needs root, `ip`, `nft`, `iptables` and `testenv/build`. A bench target, not an example, so
//! that cargo builds our binary with it and the test support compiles unchanged. Without
//! `--scale` it does nothing (so `cargo bench` and `cargo test --all-targets` stay quick).

#![allow(
    clippy::disallowed_methods,
    reason = "the harness's entry point: reads its arguments and starts processes"
)]

#[path = "../tests/support/testenv.rs"]
mod testenv;

#[path = "../tests/scale/mod.rs"]
mod scale;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use scale::helper::SelfExec;
use scale::options::{Churn, IptablesFlavour, Limits, Options, ProxyKind, Scale};

/// The scale benchmark: upstream kube-proxy against ours.
#[derive(Parser, Debug)]
struct Args {
    /// SERVICESxENDPOINTS, e.g. 1000x10; repeat for several scales. Without it, nothing runs.
    #[arg(long = "scale", value_parser = Scale::parse)]
    scales: Vec<Scale>,
    /// Proxies and modes, in the order they run.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = ProxyKind::parse,
        default_value = "ours-nftables,ours-iptables,upstream-nftables,upstream-iptables"
    )]
    proxies: Vec<ProxyKind>,
    /// Endpoint changes per second during the churn.
    #[arg(long, default_value_t = 10.0)]
    churn_rate: f64,
    /// How long the churn writes changes, in seconds.
    #[arg(long, default_value_t = 30)]
    churn_secs: u64,
    /// Seconds from proxy start to a working ClusterIP before "> limit".
    #[arg(long, default_value_t = 900)]
    cold_limit: u64,
    /// Seconds from one endpoint change's write to the new endpoint answering.
    #[arg(long, default_value_t = 60)]
    change_limit: u64,
    /// Seconds after the churn for the proxy to report every change programmed.
    #[arg(long, default_value_t = 120)]
    drain_limit: u64,
    /// API requests in flight while creating objects.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Node objects the endpoints are spread over.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// Timed TCP connects per first-packet probe (after 50 untimed ones).
    #[arg(long, default_value_t = 1000)]
    latency_samples: usize,
    /// The iptables back end both proxies' iptables mode uses: nft (the host's default) or
    /// legacy (x_tables).
    #[arg(long, value_parser = IptablesFlavour::parse, default_value = "nft")]
    iptables_flavour: IptablesFlavour,
    /// Draw the charts from these saved results (`scale-results.json` of earlier runs, later
    /// files win for a scale they share) into --out, and run nothing.
    #[arg(long = "charts-from")]
    charts_from: Vec<PathBuf>,
    /// Where the report, the results (JSON) and the charts (SVG and PNG) go.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/target/scale"))]
    out: PathBuf,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    scale::helper::run_if_requested();
    let args = Args::parse();
    if !args.charts_from.is_empty() {
        charts_from(&args.charts_from, &args.out);
        return;
    }
    if args.scales.is_empty() {
        eprintln!(
            "scale: nothing to do without --scale (e.g. `cargo bench --bench scale -- --scale 1000x10`)"
        );
        return;
    }
    let command = format!(
        "cargo bench --bench scale -- {}",
        std::env::args()
            .skip(1)
            .filter(|a| a != "--bench")
            .collect::<Vec<_>>()
            .join(" ")
    );
    let opts = Options {
        scales: args.scales,
        proxies: args.proxies,
        churn: Churn {
            rate: args.churn_rate,
            duration: Duration::from_secs(args.churn_secs),
        },
        limits: Limits {
            cold: Duration::from_secs(args.cold_limit),
            change: Duration::from_secs(args.change_limit),
            drain: Duration::from_secs(args.drain_limit),
        },
        concurrency: args.concurrency,
        nodes: args.nodes.max(1),
        latency_samples: args.latency_samples.max(1),
        iptables_flavour: args.iptables_flavour,
        ours_bin: PathBuf::from(env!("CARGO_BIN_EXE_kube-proxy-rs")),
        exec: SelfExec::current(&[]),
        out_dir: args.out,
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let reports = match runtime.block_on(scale::run(&opts)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("scale: failed: {e}");
            std::process::exit(1);
        }
    };
    match scale::write_report(&opts, &command, &reports) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::exit(1);
        }
    }
}

/// Merges saved results and writes their charts; exits on failure.
fn charts_from(files: &[PathBuf], out: &std::path::Path) {
    let mut reports: Vec<scale::report::ScaleReport> = Vec::new();
    for f in files {
        match scale::read_results(f) {
            Ok(r) => reports.extend(r),
            Err(e) => {
                eprintln!("scale: {e}");
                std::process::exit(1);
            }
        }
    }
    reports.sort_by_key(|r| r.scale.services);
    match scale::write_charts(out, &reports) {
        Ok(paths) => println!("charts: {}", paths.join(", ")),
        Err(e) => {
            eprintln!("scale: {e}");
            std::process::exit(1);
        }
    }
}
