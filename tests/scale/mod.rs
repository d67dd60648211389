//! The scale harness: upstream kube-proxy and ours, one after another, against the same real API
//! server holding N Services × M endpoints, each in a fresh node namespace, measured the same way.
//!
//! - `options`: scales, proxies, churn, limits.
//! - `control_plane`: a private testenv control plane per scale, torn down afterwards.
//! - `objects`: Services, EndpointSlices (≤ 100 endpoints each) and Nodes, created concurrently;
//!   endpoint changes.
//! - `node`: the node and pod namespaces of one proxy run, the proxy process.
//! - `helper`, `watch`: processes re-run from this binary inside namespaces (echo server,
//!   ClusterIP watcher, metrics reader).
//! - `metrics`, `process`: what the proxy reports, and what `/proc` says it cost.
//! - `profile`: `perf record` of our proxy's cold start (`--perf-cold`).
//! - `quiet`: each cold start waits for the machine's CPUs to be mostly idle.
//! - `measure`, `changes`, `first_packet`, `idle`: the phases (cold sync, first-packet latency
//!   and netlink messages per idle sync with the proxy idle, one endpoint change, churn).
//! - `report`, `chart`, `axis`, `png`: markdown tables, the results as JSON, and SVG charts
//!   rendered to PNG.
//!
//! Used by `benches/scale.rs` (the command) and `tests/scale_smoke.rs` (CI, 1,000 × 10). Numbers
//! are never asserted: the machine is shared and noisy, so only ratios within one run mean much.
//!
//! Cleanup: every namespace and process is owned by a guard (`Node`, `ChildGuard`, the watcher's
//! kill-on-drop child, `ControlPlane`), so it goes also when a phase fails or panics.

pub mod axis;
pub mod changes;
pub mod chart;
pub mod control_plane;
pub mod first_packet;
pub mod helper;
pub mod idle;
pub mod measure;
pub mod memory_cgroup;
pub mod metrics;
pub mod node;
pub mod objects;
pub mod options;
pub mod png;
pub mod process;
pub mod profile;
pub mod quiet;
pub mod report;
pub mod soak;
pub mod watch;

use std::path::Path;
use std::time::Instant;

use control_plane::ControlPlane;
use objects::Cluster;
use options::Options;
use report::ScaleReport;

/// Runs every scale of `opts` in turn; each gets its own control plane. Progress goes to stderr.
pub async fn run(opts: &Options) -> Result<Vec<ScaleReport>, String> {
    crate::testenv::require_root();
    let mut reports = Vec::new();
    for (k, &scale) in opts.scales.iter().enumerate() {
        eprintln!("scale: {scale}: starting a control plane");
        let plane = ControlPlane::start(&format!("scale-{k}"))?;
        let started = Instant::now();
        let mut cluster = Cluster::create(
            &plane.env,
            plane.env.client().await,
            scale,
            opts.nodes,
            opts.concurrency,
        )
        .await?;
        let load_seconds = started.elapsed().as_secs_f64();
        eprintln!("scale: {scale}: objects created in {load_seconds:.1} s");
        let mut results = Vec::new();
        for &kind in &opts.proxies {
            eprintln!("scale: {scale}: measuring {}", kind.label());
            let t = Instant::now();
            let r = measure::measure(opts, &plane.env, &mut cluster, kind).await;
            eprintln!(
                "scale: {scale}: {} done in {:.0} s",
                kind.label(),
                t.elapsed().as_secs_f64()
            );
            results.push(r);
        }
        let report = ScaleReport {
            scale,
            load_seconds,
            results,
        };
        eprintln!("{}", report.markdown());
        reports.push(report);
    }
    Ok(reports)
}

/// The whole report: machine, command, load, one table per scale; and where it was written.
pub fn write_report(
    opts: &Options,
    command: &str,
    reports: &[ScaleReport],
) -> Result<String, String> {
    let guest = opts
        .guest
        .as_ref()
        .map(|g| format!("- Run in: {g}\n"))
        .unwrap_or_default();
    let sync_period = match opts.sync_period {
        Some(p) => format!("{} s (both proxies)", p.as_secs()),
        None => format!("{} s (default)", options::DEFAULT_SYNC_PERIOD.as_secs()),
    };
    let mut text = format!(
        "### Scale run {}\n\n- Machine: {}\n{guest}- Command: `{command}`\n- iptables mode: iptables-{}\n- syncPeriod: {sync_period}\n- Load: churn {} changes/s for {} s; limits: cold {} s, change {} s, drain {} s; {} Nodes; {} requests in flight while loading\n\n",
        crate::testenv::rfc3339_now(),
        report::machine(),
        opts.iptables_flavour.as_str(),
        opts.churn.rate,
        opts.churn.duration.as_secs(),
        opts.limits.cold.as_secs(),
        opts.limits.change.as_secs(),
        opts.limits.drain.as_secs(),
        opts.nodes,
        opts.concurrency,
    );
    std::fs::create_dir_all(&opts.out_dir).map_err(|e| e.to_string())?;
    for r in reports {
        text.push_str(&r.markdown());
        for line in write_soak_series(&opts.out_dir, r)? {
            text.push_str(&line);
        }
        text.push('\n');
    }
    let md = opts.out_dir.join("scale-report.md");
    std::fs::write(&md, &text).map_err(|e| format!("write {}: {e}", md.display()))?;
    let json = opts.out_dir.join(RESULTS_FILE);
    let data = serde_json::to_string_pretty(reports).map_err(|e| e.to_string())?;
    std::fs::write(&json, data).map_err(|e| format!("write {}: {e}", json.display()))?;
    let charts = write_charts(&opts.out_dir, reports)?;
    Ok(format!(
        "{text}\n(written to {}, {} and {})",
        md.display(),
        json.display(),
        charts.join(", ")
    ))
}

/// Writes each proxy's churn samples of `report` as CSV into `dir`; returns a markdown line
/// naming each file.
fn write_soak_series(dir: &Path, report: &ScaleReport) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for r in report.results.iter().filter(|r| !r.soak.is_empty()) {
        let name = soak::file_name(report.scale, r.kind);
        let path = dir.join(&name);
        std::fs::write(&path, soak::csv(&r.soak))
            .map_err(|e| format!("write {}: {e}", path.display()))?;
        lines.push(format!(
            "- {}: churn samples every {} s (seconds since the churn began, RSS MiB, open fds, tasks): `{name}`\n",
            r.kind.label(),
            soak::EVERY.as_secs()
        ));
    }
    Ok(lines)
}

/// The results of one run, as `write_report` saves them beside the markdown.
pub const RESULTS_FILE: &str = "scale-results.json";

/// Reads the results `write_report` saved (to chart several runs together); results saved
/// before a column existed get "—" there.
pub fn read_results(path: &Path) -> Result<Vec<ScaleReport>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    let mut reports: Vec<ScaleReport> =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for r in reports.iter_mut().flat_map(|r| r.results.iter_mut()) {
        r.pad_columns();
    }
    Ok(reports)
}

/// Writes each chart as SVG and PNG into `dir`, ordered by Service count; returns the paths.
pub fn write_charts(dir: &Path, reports: &[ScaleReport]) -> Result<Vec<String>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for (name, svg) in [
        ("scale-sync-rss", chart::sync_and_rss(reports)),
        ("scale-first-packet", chart::first_packet(reports)),
    ] {
        let path = dir.join(format!("{name}.svg"));
        std::fs::write(&path, &svg).map_err(|e| format!("write {}: {e}", path.display()))?;
        written.push(path.display().to_string());
        let path = dir.join(format!("{name}.png"));
        let bytes = png::render(&svg, 1.5).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::write(&path, bytes).map_err(|e| format!("write {}: {e}", path.display()))?;
        written.push(path.display().to_string());
    }
    Ok(written)
}
