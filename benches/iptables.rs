//! The iptables planner and restore-input writer at 10,000 Services × 10 endpoints.
//!
//! - `plan`: both families' rulesets from a snapshot (every sync pays this: the iptables mode
//!   re-plans everything and diffs chain by chain).
//! - `full_input`: the full-sync restore input against a kernel holding nothing of ours.
//! - `one_endpoint_change_replan`: plan a snapshot where one endpoint moved from scratch and
//!   write the partial restore input from the previous plan.
//! - `one_endpoint_change`: the same, the plan reusing the previous plan's unchanged service
//!   ports (what the dataplane does; what a one-endpoint sync costs before `iptables-restore`).
//!
//! Run: `cargo bench --bench iptables`. Results go to docs/benchmarks.md.

use std::collections::BTreeMap;
use std::hint::black_box;

use support::planner_bench;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::dataplane::iptables::{self, diff};

fn bench(c: &mut Criterion) {
    let (mut g, cluster, cfg, before) = planner_bench::start(c, "iptables", iptables::plan_all);
    g.bench_function("full_input", |b| {
        b.iter(|| black_box(diff::full(&before[0], &BTreeMap::new()).text.len()))
    });
    g.bench_function("one_endpoint_change_replan", |b| {
        b.iter(|| {
            let want = iptables::plan_all(&cluster.after, &cfg);
            let n: usize = before
                .iter()
                .zip(&want)
                .map(|(l, w)| diff::partial(l, w).text.len())
                .sum();
            black_box(n)
        })
    });
    // Each iteration moves the endpoint there or back: always one change from the last plan.
    let mut last = before.clone();
    let mut there = false;
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            there = !there;
            let next = cluster.snapshot(there);
            let want = [0, 1]
                .map(|i| iptables::plan_reusing(next, &cfg, IpFamily::ALL[i], Some(&last[i])));
            let n: usize = last
                .iter()
                .zip(&want)
                .map(|(l, w)| diff::partial(l, w).text.len())
                .sum();
            last = want;
            black_box(n)
        })
    });
    g.finish();
    let want = iptables::plan_all(&cluster.after, &cfg);
    let partial = diff::partial(&before[0], &want[0]);
    let full = diff::full(&before[0], &BTreeMap::new());
    println!(
        "one endpoint change: {} chains, {} rules, {} bytes; full input: {} chains, {} rules, {} bytes",
        partial.chains,
        partial.rules,
        partial.text.len(),
        full.chains,
        full.rules,
        full.text.len()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
