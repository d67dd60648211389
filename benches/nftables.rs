//! The nftables planner, diff and renderer at 10,000 Services × 10 endpoints.
//!
//! - `plan`: both families' rulesets from a snapshot (every sync pays this). Goal: ≤ 30 ms.
//! - `cold_diff_render`: diff against an empty table and render the whole script (first start).
//! - `one_endpoint_change`: plan a snapshot where one endpoint moved, diff it against the
//!   previous plan and render the transaction (what a one-endpoint sync costs before `nft`).
//! - `one_endpoint_change_incremental`: the same change through the incremental `Planner`
//!   (re-plans the changed service port only and yields the transaction), then render.
//!   Goal: ≤ 10 ms.
//!
//! Run: `cargo bench --bench nftables`. Results go to docs/benchmarks.md.

use std::hint::black_box;

use support::planner_bench;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::dataplane::nftables::{self, Planner};
use kube_proxy_rs::nft::{self, Ruleset};

fn bench(c: &mut Criterion) {
    let (mut g, cluster, cfg, before) = planner_bench::start(c, "nftables", nftables::plan_all);
    g.bench_function("cold_diff_render", |b| {
        b.iter(|| {
            let t = nft::diff(&Ruleset::empty(before[0].family), &before[0]);
            black_box(nft::render(&t).len())
        })
    });
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            let want = nftables::plan_all(&cluster.after, &cfg);
            let ts: Vec<_> = before
                .iter()
                .zip(&want)
                .map(|(l, w)| nft::diff(l, w))
                .collect();
            black_box(nft::render_all(&ts).len())
        })
    });
    let mut planner = Planner::new(cfg.clone());
    planner.update(&cluster.before, &cluster.changes);
    // Each iteration moves the endpoint there or back: always one change from the last plan.
    let mut there = false;
    g.bench_function("one_endpoint_change_incremental", |b| {
        b.iter(|| {
            there = !there;
            let next = cluster.snapshot(there);
            let update = planner.update(next, &cluster.changes);
            black_box(nft::render_all(&update.transactions).len())
        })
    });
    g.finish();
    let want = nftables::plan_all(&cluster.after, &cfg);
    let t = nft::diff(&before[0], &want[0]);
    let cold = nft::render(&nft::diff(&Ruleset::empty(before[0].family), &before[0]));
    println!(
        "one endpoint change: {} operations, {} bytes; cold script: {} bytes, {} objects",
        t.operations(),
        nft::render(&t).len(),
        cold.len(),
        before[0].objects()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
