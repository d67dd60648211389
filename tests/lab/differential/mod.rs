//! The randomized differential test: seeded clusters of Services and EndpointSlices, run under
//! upstream kube-proxy and ours on the same lab and API server, every frontend probed from a
//! pod, a node and outside, and the outcomes compared.
//!
//! - `model`, `generate`: the clusters and the seeded generator.
//! - `objects`: a cluster as API objects (and as YAML for a report).
//! - `frontends`, `outcome`, `compare`: what is probed, what it did, how two outcomes compare.
//! - `intended`: the one list of intended differences, each with its reason.
//! - `shrink`: the smallest cluster that still shows a difference.
//! - `trial`: the imperative shell: a lab, both proxies in turn, the probes.
//!
//! A seed is "same" when every frontend got the same outcome from both proxies, "different"
//! otherwise; each difference is either one of the intended ones or unexplained. A difference
//! must show in a second trial of the same cluster (on a fresh lab) to count; one that does not
//! is reported as unconfirmed. Each Service with an unexplained difference is shrunk to a
//! minimal cluster, printed as YAML.

pub mod compare;
pub mod frontends;
pub mod generate;
#[cfg(test)]
mod generate_tests;
pub mod intended;
pub mod model;
pub mod objects;
pub mod outcome;
pub mod shrink;
pub mod trial;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use compare::Difference;
use frontends::Key;
use model::World;

use crate::lab::Mode;
use crate::lab::scenarios::report::say;
use crate::testenv::TestEnv;

/// A minimal cluster for an unexplained difference.
pub struct Minimal {
    pub service: String,
    /// The differences the minimal cluster shows.
    pub differences: Vec<Difference>,
    pub yaml: String,
    /// Trials the shrinking took (each one lab and both proxies).
    pub trials: usize,
}

/// What one seed did.
pub struct SeedReport {
    pub seed: u64,
    pub services: usize,
    pub frontends: usize,
    /// Confirmed differences, intended and unexplained.
    pub differences: Vec<Difference>,
    /// Differences of the first trial that the second did not show.
    pub unconfirmed: Vec<Difference>,
    /// Frontends where ours agreed only when probed again.
    pub settled_on_recheck: usize,
    pub minimal: Vec<Minimal>,
    pub took: Duration,
}

impl SeedReport {
    pub fn same(&self) -> bool {
        self.differences.is_empty()
    }

    pub fn unexplained(&self) -> impl Iterator<Item = &Difference> {
        self.differences.iter().filter(|d| d.intended.is_none())
    }
}

/// How much shrinking a seed may do.
#[derive(Debug, Clone, Copy)]
pub struct ShrinkBudget {
    /// Services to shrink per seed (each with its own unexplained differences).
    pub services: usize,
    /// Trials per Service.
    pub trials: usize,
}

/// The time seed `seed` may take: a bound on one trial (a lab, each proxy's two syncs, the
/// probes of its frontends, failures waiting out their timeouts), scaled by how slow the lab
/// is said to be (the sync wait: 30 s on a host, more in the UML guest), times the trials
/// the seed may make (the first, the confirming one, and the shrinking budget).
pub fn seed_limit(seed: u64, budget: ShrinkBudget) -> Duration {
    let world = generate::generate(seed);
    let frontends = frontends::enumerate(&world, &frontends::nominal(&world)).len();
    let sync = trial::sync_wait();
    let slow = sync.as_secs_f64() / 30.0;
    let work = Duration::from_secs_f64(slow * (60.0 + 0.25 * frontends as f64));
    let per_trial = work + 4 * sync;
    let trials = 2 + budget.services * (budget.trials + 2);
    per_trial * u32::try_from(trials).unwrap_or(u32::MAX)
}

/// Runs seed `seed` in `mode`: a trial, a confirming trial of the frontends that differed
/// (unless every difference is intended), and shrinking for the unexplained ones.
pub async fn run_seed(
    env: &'static TestEnv,
    mode: Mode,
    seed: u64,
    budget: ShrinkBudget,
) -> SeedReport {
    let started = Instant::now();
    let world = generate::generate(seed);
    let first = trial::run(env, mode, &world, None).await;
    let first_diffs =
        compare::compare(mode, &world, &first.frontends, &first.upstream, &first.ours);
    let label = format!("differential {} seed {seed}", mode.as_str());
    say(&format!(
        "{label}: {} Services, {} frontends, {} differing, {} settled on re-check ({:.1}s)",
        world.services.len(),
        first.frontends.len(),
        first_diffs.len(),
        first.settled_on_recheck.len(),
        first.took.as_secs_f64()
    ));
    let mut report = SeedReport {
        seed,
        services: world.services.len(),
        frontends: first.frontends.len(),
        differences: Vec::new(),
        unconfirmed: Vec::new(),
        settled_on_recheck: first.settled_on_recheck.len(),
        minimal: Vec::new(),
        took: Duration::ZERO,
    };
    if first_diffs.iter().all(|d| d.intended.is_some()) {
        report.differences = first_diffs;
    } else {
        let keys: BTreeSet<Key> = first_diffs.iter().map(|d| d.key.clone()).collect();
        let second = trial::run(env, mode, &world, Some(&keys)).await;
        let again = compare::compare(
            mode,
            &world,
            &second.frontends,
            &second.upstream,
            &second.ours,
        );
        let again_keys: BTreeSet<&Key> = again.iter().map(|d| &d.key).collect();
        report.unconfirmed = first_diffs
            .iter()
            .filter(|d| !again_keys.contains(&d.key))
            .cloned()
            .collect();
        report.differences = again;
        say(&format!(
            "{label}: confirmed {} of {} ({:.1}s)",
            report.differences.len(),
            first_diffs.len(),
            second.took.as_secs_f64()
        ));
    }
    for d in &report.differences {
        say(&format!("{label}: {d}"));
    }
    // The unallocated service addresses (no Service) need no shrinking.
    let unexplained_services: BTreeSet<String> = report
        .unexplained()
        .map(|d| d.key.service.clone())
        .filter(|s| s != frontends::NO_SERVICE)
        .collect();
    for service in unexplained_services.into_iter().take(budget.services) {
        let keys: BTreeSet<Key> = report
            .unexplained()
            .filter(|d| d.key.service == service)
            .map(|d| d.key.clone())
            .collect();
        let minimal = minimize(env, mode, &world, &service, &keys, budget.trials).await;
        say(&format!(
            "{label}: minimal cluster for {service} after {} trials:\n{}\n{}",
            minimal.trials,
            minimal
                .differences
                .iter()
                .map(|d| format!("  {d}"))
                .collect::<Vec<_>>()
                .join("\n"),
            minimal.yaml
        ));
        report.minimal.push(minimal);
    }
    report.took = started.elapsed();
    report
}

/// The unexplained differences a trial of `world` shows at `keys`.
async fn unexplained_at(
    env: &'static TestEnv,
    mode: Mode,
    world: &World,
    keys: &BTreeSet<Key>,
) -> Vec<Difference> {
    let t = trial::run(env, mode, world, Some(keys)).await;
    compare::compare(mode, world, &t.frontends, &t.upstream, &t.ours)
        .into_iter()
        .filter(|d| d.intended.is_none())
        .collect()
}

/// Shrinks `world` to the smallest cluster that still shows an unexplained difference at one
/// of `keys` (all of Service `service`), starting from that Service alone.
async fn minimize(
    env: &'static TestEnv,
    mode: Mode,
    world: &World,
    service: &str,
    keys: &BTreeSet<Key>,
    max_trials: usize,
) -> Minimal {
    let alone = shrink::only(world, &[service.to_owned()]);
    let mut trials = 1;
    let start = if unexplained_at(env, mode, &alone, keys).await.is_empty() {
        say(&format!(
            "differential: {service} alone does not differ; shrinking the whole cluster"
        ));
        world.clone()
    } else {
        alone
    };
    let (small, used) = if max_trials == 0 {
        (start, 0)
    } else {
        shrink::shrink(start, max_trials, |what, w| async move {
            let fails = !unexplained_at(env, mode, &w, keys).await.is_empty();
            say(&format!(
                "differential: shrink {service}: {what}: {}",
                if fails { "still differs" } else { "same" }
            ));
            fails
        })
        .await
    };
    trials += used;
    let differences = unexplained_at(env, mode, &small, keys).await;
    Minimal {
        service: service.to_owned(),
        differences,
        yaml: objects::yaml(&small),
        trials: trials + 1,
    }
}

/// The one-line summary of a mode's seeds: `N same, M different`, the intended differences
/// by name with how many seeds showed each, and the unexplained ones.
pub fn summary(mode: Mode, reports: &[SeedReport]) -> String {
    let same = reports.iter().filter(|r| r.same()).count();
    let seeds: Vec<String> = reports.iter().map(|r| r.seed.to_string()).collect();
    let mut lines = vec![format!(
        "differential {} (against {}): seeds {}: {same} same, {} different",
        mode.as_str(),
        trial::reference(mode).label(),
        seeds.join(","),
        reports.len() - same
    )];
    for r in reports {
        lines.push(format!(
            "  seed {}: {} Services, {} frontends, {} differing ({} intended), {} unconfirmed, \
             {} settled on re-check, {:.0}s",
            r.seed,
            r.services,
            r.frontends,
            r.differences.len(),
            r.differences
                .iter()
                .filter(|d| d.intended.is_some())
                .count(),
            r.unconfirmed.len(),
            r.settled_on_recheck,
            r.took.as_secs_f64()
        ));
    }
    let mut intended: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for r in reports {
        let names: BTreeSet<&str> = r.differences.iter().filter_map(|d| d.intended).collect();
        for name in names {
            let e = intended.entry(name).or_default();
            e.0 += 1;
            e.1 += r
                .differences
                .iter()
                .filter(|d| d.intended == Some(name))
                .count();
        }
    }
    for (name, (seeds, frontends)) in intended {
        lines.push(format!(
            "  intended \"{name}\": {seeds} seed(s), {frontends} frontend(s)"
        ));
    }
    for r in reports {
        for d in r.unexplained() {
            lines.push(format!("  UNEXPLAINED seed {}: {d}", r.seed));
        }
        for d in &r.unconfirmed {
            lines.push(format!("  unconfirmed seed {}: {d}", r.seed));
        }
    }
    lines.join("\n")
}
