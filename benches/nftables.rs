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

#[path = "support/synthetic.rs"]
mod synthetic;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::cluster::Changes;
use kube_proxy_rs::dataplane::nftables::{self, ModeConfig, Planner, Ruleset};
use synthetic::Synthetic;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// 10,000 Services × 10 endpoints.
const CLUSTER: Synthetic = Synthetic {
    services: 10_000,
    endpoints: 10,
};

fn bench(c: &mut Criterion) {
    let cfg = ModeConfig::default();
    let snap = CLUSTER.snapshot();
    let before = nftables::plan_all(&snap, &cfg);
    let after_snap = CLUSTER.moved(&snap, "10.200.0.1");
    let mut g = c.benchmark_group("nftables_10k_x_10");
    g.sample_size(10);
    g.bench_function("plan", |b| {
        b.iter(|| black_box(nftables::plan_all(&snap, &cfg)))
    });
    g.bench_function("cold_diff_render", |b| {
        b.iter(|| {
            let t = nftables::diff(&Ruleset::empty(before[0].family), &before[0]);
            black_box(nftables::render(&t).len())
        })
    });
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            let want = nftables::plan_all(&after_snap, &cfg);
            let ts: Vec<_> = before
                .iter()
                .zip(&want)
                .map(|(l, w)| nftables::diff(l, w))
                .collect();
            black_box(nftables::render_all(&ts).len())
        })
    });
    let changes = Changes {
        ports: [CLUSTER.moved_port()].into(),
        ..Changes::default()
    };
    let mut planner = Planner::new(cfg.clone());
    planner.update(&snap, &changes);
    // Each iteration moves the endpoint there or back: always one change from the last plan.
    let mut there = false;
    g.bench_function("one_endpoint_change_incremental", |b| {
        b.iter(|| {
            there = !there;
            let next = if there { &after_snap } else { &snap };
            let update = planner.update(next, &changes);
            black_box(nftables::render_all(&update.transactions).len())
        })
    });
    g.finish();
    let want = nftables::plan_all(&after_snap, &cfg);
    let t = nftables::diff(&before[0], &want[0]);
    let cold = nftables::render(&nftables::diff(
        &Ruleset::empty(before[0].family),
        &before[0],
    ));
    println!(
        "one endpoint change: {} operations, {} bytes; cold script: {} bytes, {} objects",
        t.operations(),
        nftables::render(&t).len(),
        cold.len(),
        before[0].objects()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
