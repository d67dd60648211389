//! The scale benchmark: upstream kube-proxy and ours against a real API server with
//! N Services × M endpoints, one after another in fresh node namespaces, measured the same way.
//! What each figure means and how it is taken: docs/benchmarks.md, "Scale harness".
//!
//! ```text
//! cargo bench --bench scale -- --scale 1000x10 --scale 10000x10
//!     [--proxies ours-nftables,ours-iptables,upstream-nftables,upstream-iptables]
//!     [--churn-rate 10] [--churn-secs 30] [--cold-limit 900] [--change-limit 60]
//!     [--drain-limit 120] [--concurrency 32] [--proxy-verbosity 2] [--perf-cold] [--ours-bin PATH]
//!     [--nodes 100] [--latency-samples 1000] [--memory-max MIB]
//!     [--iptables-flavour nft|legacy] [--sync-period SECS] [--out target/scale]
//! cargo bench --bench scale -- --uml [MIB] [--uml-limit SECS] --scale 10000x10 \
//!     --proxies ours-ipvs,upstream-ipvs        # the same, inside a User-mode Linux guest
//! cargo bench --bench scale -- --scale 10000x10 --proxies ours-ebpf,ours-nftables,upstream-nftables
//! cargo bench --bench scale -- --charts-from run1/scale-results.json \
//!     --charts-from run2/scale-results.json --out docs/images    # charts of several runs
//! ```
//!
//! Needs root, `ip`, `nft`, `iptables` and `testenv/build` (and `ipset` for upstream's ipvs
//! mode). A bench target, not an example, so that cargo builds our binary with it and the test
//! support is at hand. Without `--scale` it does nothing (so `cargo bench` and
//! `cargo test --all-targets` stay quick). ipvs mode needs a kernel with IPVS: `--uml` runs the
//! whole harness in a User-mode Linux guest that has it (`support/scale_uml.rs`).

#![allow(
    clippy::disallowed_methods,
    reason = "the harness's entry point: reads its arguments and starts processes"
)]

#[path = "support/scale_uml.rs"]
mod scale_uml;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use scale::helper::SelfExec;
use scale::options::{Churn, IptablesFlavour, Limits, Options, ProxyKind, Scale};
use support::{scale, testenv, uml};

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
    /// API requests in flight while creating the Node objects (Services and slices are loaded
    /// into etcd by `testenv load`).
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Run our proxy in a memory cgroup of its own with this hard limit in MiB, and report the
    /// peak charged and OOM kills (upstream's proxy runs without one).
    #[arg(long, value_name = "MIB")]
    memory_max: Option<u64>,
    /// Both proxies' `--v` (klog verbosity): 4 shows ours' debug lines, such as each sync's
    /// phases, in the proxies' logs (the scratch directory; a `--uml` guest's are copied to
    /// `--out`'s `logs/`).
    #[arg(long, default_value_t = 2)]
    proxy_verbosity: u8,
    /// Our binary to measure, instead of the one built with this bench (say, an earlier
    /// commit's, to compare two builds in one run of the same harness).
    #[arg(long)]
    ours_bin: Option<PathBuf>,
    /// Record our proxy's cold start (spawn to a working ClusterIP) with `perf record` into
    /// `--out`'s `perf-<proxy>-<scale>.data`, for `perf report -i`.
    #[arg(long)]
    perf_cold: bool,
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
    /// Both proxies' syncPeriod in seconds (the mode's `--iptables-sync-period` or
    /// `--ipvs-sync-period`); without it their default, 30 s. The idle-sync phase waits for two.
    #[arg(long)]
    sync_period: Option<u64>,
    /// Run the whole harness inside a User-mode Linux guest (kernel 6.1 with IPVS) with this
    /// much memory in MiB (8192 without a value): for ipvs mode, which this host lacks.
    #[arg(
        long,
        value_name = "MIB",
        num_args = 0..=1,
        default_missing_value = scale_uml::DEFAULT_MEMORY_MIB
    )]
    uml: Option<u64>,
    /// With --uml: seconds before the guest is killed (default: from the limits and scales).
    #[arg(long, requires = "uml")]
    uml_limit: Option<u64>,
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
    let host_args: Vec<String> = std::env::args().skip(1).collect();
    let command = std::env::var(scale_uml::COMMAND_VAR).unwrap_or_else(|_| {
        format!(
            "cargo bench --bench scale -- {}",
            host_args
                .iter()
                .filter(|a| *a != "--bench")
                .cloned()
                .collect::<Vec<_>>()
                .join(" ")
        )
    });
    if let Some(memory_mib) = args.uml {
        in_guest(&args, memory_mib, &host_args, &command);
        return;
    }
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
        memory_max: args.memory_max.map(|mib| mib * 1024 * 1024),
        proxy_verbosity: args.proxy_verbosity,
        perf_cold: args.perf_cold,
        nodes: args.nodes.max(1),
        latency_samples: args.latency_samples.max(1),
        iptables_flavour: args.iptables_flavour,
        sync_period: args.sync_period.map(Duration::from_secs),
        guest: std::env::var(scale_uml::GUEST_VAR).ok(),
        ours_bin: args
            .ours_bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kube-proxy-rs"))),
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

/// Runs the harness with these arguments in a User-mode Linux guest and prints its report;
/// exits on failure.
fn in_guest(args: &Args, memory_mib: u64, host_args: &[String], command: &str) {
    let limit = args
        .uml_limit
        .map_or_else(|| guest_limit(args), Duration::from_secs);
    let run = scale_uml::GuestRun {
        memory_mib,
        limit,
        args: scale_uml::guest_args(host_args),
        out: &std::path::absolute(&args.out).unwrap_or_else(|_| args.out.clone()),
        command,
        host: scale::report::machine(),
    };
    match scale_uml::run(&run) {
        Ok(text) => println!("{text}"),
        Err(e) => {
            eprintln!("scale: --uml: {e}");
            std::process::exit(1);
        }
    }
}

/// How long a guest may run: boot and a control plane per scale, loading its objects (slow on
/// the guest's one CPU: 200 ms per Service allowed), and per proxy every phase's limit, two
/// idle sync periods and the probes, with room to spare. About 95 minutes for 10,000 × 10 with
/// ours and upstream in ipvs mode and the default limits.
fn guest_limit(args: &Args) -> Duration {
    let sync_period = args
        .sync_period
        .unwrap_or(scale::options::DEFAULT_SYNC_PERIOD.as_secs());
    let per_proxy = args.cold_limit
        + 2 * args.change_limit
        + args.churn_secs
        + args.drain_limit
        + 3 * sync_period
        + 300;
    let per_scale: u64 = args
        .scales
        .iter()
        .map(|s| 120 + s.services as u64 / 5 + per_proxy * args.proxies.len() as u64)
        .sum();
    Duration::from_secs(300 + per_scale)
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
