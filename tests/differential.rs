//! The randomized differential test against upstream kube-proxy (`lab/differential/`): for each
//! seed, a generated cluster of Services and EndpointSlices in the real API server from
//! `testenv/`, run under upstream and ours one after the other on the same lab, every frontend
//! probed from a pod, a node and outside, outcomes compared. Differences are either in the
//! intended list (`lab/differential/intended.rs`) or fail the test, with the minimal cluster
//! that shows each, as YAML.
//!
//! One test per mode of ours: nftables and iptables against upstream in the same mode,
//! userspace and eBPF against upstream's nftables mode, and ipvs against upstream's ipvs mode
//! in a User-mode Linux guest (`ipvs_matches_upstream_ipvs_in_uml`: this host's kernel has no
//! IPVS). Each runs a few small fixed seeds (the nftables, iptables, userspace and eBPF ones in
//! the default `cargo test`; ipvs only with `--include-ignored`, see its reason);
//! `DIFF_SEEDS=20` (seeds 1-20), `DIFF_SEEDS=5-9` or `DIFF_SEEDS=3,7` runs others, and
//! `DIFF_MODES=nftables,ebpf` runs only those modes' tests (the others return at once, saying
//! so). `DIFF_SHRINK_TRIALS`
//! (default 15; 0 prints the Service unshrunk) and `DIFF_SHRINK_SERVICES` (default 1) bound
//! the shrinking. `DIFF_PRINT=7` (or `7:s3`) prints seed 7's cluster (or its Service s3) as
//! YAML. Needs root and `testenv/build`; without root it fails with that reason.
//! The pure parts (generator, shrinker, comparison, the intended list) are unit tests here
//! that need neither.

#![allow(
    clippy::disallowed_methods,
    reason = "a developer's seeds and modes come from the environment"
)]

use support::testenv;
use support::uml;

use support::lab;

#[path = "lab/differential/mod.rs"]
mod differential;

use std::time::Duration;

use std::path::Path;

use differential::{SeedReport, ShrinkBudget};
use lab::Mode;
use uml::host::helper_process::{HelperProcess, RESULT, results};

/// The seeds `DIFF_SEEDS` names, or `default`.
fn seeds(default: &[u64]) -> Vec<u64> {
    let Ok(text) = std::env::var("DIFF_SEEDS") else {
        return default.to_vec();
    };
    parse_seeds(&text).unwrap_or_else(|| panic!("DIFF_SEEDS={text}: want N, A-B or A,B,C"))
}

/// `20` → 1..=20; `5-9` → 5..=9; `3,7` → [3, 7].
fn parse_seeds(text: &str) -> Option<Vec<u64>> {
    let text = text.trim();
    if text.contains(',') {
        return text.split(',').map(|s| s.trim().parse().ok()).collect();
    }
    if let Some((a, b)) = text.split_once('-') {
        let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        return (a <= b).then(|| (a..=b).collect());
    }
    let n: u64 = text.parse().ok()?;
    Some((1..=n).collect())
}

/// `seeds` as `DIFF_SEEDS` takes them (a list, or a range for one seed).
fn seeds_var(seeds: &[u64]) -> String {
    match seeds {
        [one] => format!("{one}-{one}"),
        many => many
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Whether `DIFF_MODES` (when set) lists `mode`.
fn selected(mode: Mode) -> bool {
    std::env::var("DIFF_MODES").map_or(true, |m| m.split(',').any(|s| s.trim() == mode.as_str()))
}

fn shrink_budget() -> ShrinkBudget {
    ShrinkBudget {
        services: env_number("DIFF_SHRINK_SERVICES", 1),
        trials: env_number("DIFF_SHRINK_TRIALS", 15),
    }
}

/// Runs `seeds` for `mode`, prints the summary, and fails on any unexplained difference.
async fn run_mode(mode: Mode, default_seeds: &[u64]) {
    if !selected(mode) {
        eprintln!("differential {}: not in DIFF_MODES", mode.as_str());
        return;
    }
    let budget = shrink_budget();
    // One lab at a time: the modes' tests would otherwise build labs side by side on the
    // same cores, and a starved proxy misses its sync time.
    static ONE_MODE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _turn = ONE_MODE_AT_A_TIME.lock().await;
    let env = testenv::TestEnv::shared();
    let mut reports: Vec<SeedReport> = Vec::new();
    for seed in seeds(default_seeds) {
        let limit = differential::seed_limit(seed, budget);
        let report = tokio::time::timeout(limit, differential::run_seed(env, mode, seed, budget))
            .await
            .unwrap_or_else(|_| panic!("seed {seed} took longer than {limit:?}"));
        eprintln!(
            "differential {} seed {seed}: {} in {:.1}s",
            mode.as_str(),
            if report.same() { "same" } else { "different" },
            report.took.as_secs_f64()
        );
        reports.push(report);
    }
    let summary = differential::summary(mode, &reports);
    eprintln!("{summary}");
    let unexplained: usize = reports.iter().map(|r| r.unexplained().count()).sum();
    assert!(
        unexplained == 0,
        "{unexplained} unexplained difference(s):\n{summary}\n{}",
        reports
            .iter()
            .flat_map(|r| &r.minimal)
            .map(|m| format!("--- minimal cluster for {}:\n{}", m.service, m.yaml))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn nftables_matches_upstream_nftables() {
    run_mode(Mode::Nftables, &[12, 15]).await;
}

#[tokio::test]
async fn iptables_matches_upstream_iptables() {
    run_mode(Mode::Iptables, &[12, 15]).await;
}

#[tokio::test]
async fn userspace_matches_upstream_nftables() {
    run_mode(Mode::Userspace, &[15, 20]).await;
}

#[tokio::test]
async fn ebpf_matches_upstream_nftables() {
    run_mode(Mode::Ebpf, &[2, 8]).await;
}

/// The UML guest for ipvs mode: the API server, three proxies and the probes on one CPU.
const GUEST_MEMORY_MIB: u64 = 3072;
/// How long a proxy's first sync may take in the guest: upstream's ipvs mode execs `ipset`
/// once per entry and `iptables-restore` for each sync.
const GUEST_SETTLE_SECS: u64 = 90;
/// The guest is killed once it has printed no line for this long. Its control plane's start
/// and every trial step print lines, and each seed is cut off inside the guest at its own limit
/// (`differential::seed_limit`, scaled by the settle time), so only a guest whose kernel is
/// stuck stays silent this long, however many seeds it runs.
const SILENCE_LIMIT: Duration = Duration::from_secs(15 * 60);

static UML_HELPER: HelperProcess = HelperProcess::new("differential_uml_helper_process");

/// ipvs mode against upstream's ipvs mode, both in one User-mode Linux guest (this host's
/// kernel has no IPVS): the guest runs the API server from `testenv/` and this test's
/// ipvs seeds (`DIFF_SEEDS` and the shrinking variables are passed on).
#[test]
#[ignore = "a User-mode Linux guest with its own control plane: minutes before the first seed; run with: cargo test --test differential -- --include-ignored (docs/testing.md)"]
fn ipvs_matches_upstream_ipvs_in_uml() {
    if !selected(Mode::Ipvs) {
        eprintln!("differential ipvs: not in DIFF_MODES");
        return;
    }
    let Some(uml) = uml::Uml::find() else {
        return;
    };
    let seeds = seeds(&[19]);
    let budget = shrink_budget();
    let command = format!(
        "DIFF_SEEDS={} DIFF_SHRINK_TRIALS={} DIFF_SHRINK_SERVICES={} {}={GUEST_SETTLE_SECS} \
         TESTENV_STATE=/run/te {}=/run/scratch {}",
        seeds_var(&seeds),
        budget.trials,
        budget.services,
        lab::scenarios::SETTLE_VAR,
        uml::host::SCRATCH_VAR,
        UML_HELPER.shell_line("ipvs")
    );
    // Its console is copied to stderr as it comes: a run of many seeds takes hours.
    let run = uml.with_memory(GUEST_MEMORY_MIB).with_live_output().run(
        &[],
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &command,
        uml::Limit::Silent(SILENCE_LIMIT),
    );
    let passed = results(&run.output).contains(&"differential ipvs ok");
    assert!(
        run.exit_code == Some(0) && passed,
        "the ipvs differential failed in the UML guest (exit {:?}, after {:?}); its output is \
         above",
        run.exit_code,
        run.took
    );
}

/// Not a test: inside the guest, runs the ipvs seeds (see `ipvs_matches_upstream_ipvs_in_uml`).
#[test]
fn differential_uml_helper_process() {
    UML_HELPER.when_requested(|role| {
        assert_eq!(role, "ipvs", "unknown differential helper role");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(run_mode(Mode::Ipvs, &[19]));
        println!("{RESULT}differential ipvs ok");
    });
}

#[test]
fn seeds_are_a_count_a_range_or_a_list() {
    assert_eq!(parse_seeds("3"), Some(vec![1, 2, 3]));
    assert_eq!(parse_seeds("5-7"), Some(vec![5, 6, 7]));
    assert_eq!(parse_seeds("4, 9"), Some(vec![4, 9]));
    assert_eq!(parse_seeds("9-5"), None);
    assert_eq!(parse_seeds("x"), None);
    for seeds in [vec![4], vec![2, 9]] {
        assert_eq!(parse_seeds(&seeds_var(&seeds)), Some(seeds));
    }
}

/// Not a test: with `DIFF_PRINT=SEED` (or `SEED:SERVICE`, e.g. `7:s3`), prints that seed's
/// cluster (or one Service of it) as YAML, to read or apply by hand. Without it, nothing.
#[test]
fn print_world() {
    let Ok(asked) = std::env::var("DIFF_PRINT") else {
        return;
    };
    let (seed, service) = asked.split_once(':').unwrap_or((&asked, ""));
    let seed: u64 = seed.parse().expect("DIFF_PRINT=SEED[:SERVICE]");
    let mut world = differential::generate::generate(seed);
    if !service.is_empty() {
        world = differential::shrink::only(&world, &[service.to_owned()]);
    }
    println!("{}", differential::objects::yaml(&world));
}

/// Not a test: the entry point of the lab's pod echo servers and traffic probes, which re-run
/// this binary inside a namespace (see `lab/helper.rs`). Without their environment variable it
/// returns at once.
#[test]
fn lab_helper_process() {
    lab::helper::run_if_requested();
}
