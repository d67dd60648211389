//! The IPVS planner and diff at 10,000 Services × 10 endpoints (pure code; the kernel's part
//! is measured by the scale harness inside User-mode Linux).
//!
//! - `plan`: both families' virtual services from a snapshot (a full sync pays this).
//! - `one_endpoint_change_full`: what a one-endpoint sync cost before the incremental planner:
//!   plan everything, the helper tables, diff both against the previous state.
//! - `one_endpoint_change`: the same change through the incremental `Planner` (re-plans the
//!   changed service port only, with the helper tables' transaction) and `diff_only` of the
//!   touched virtual services against the kernel as last programmed: everything a steady
//!   sync computes before it sends. Goal: ≤ 1 ms.
//!
//! Run: `cargo bench --bench ipvs`. Results go to docs/benchmarks.md.

use std::collections::BTreeMap;
use std::hint::black_box;

use support::planner_bench;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::dataplane::ipvs::diff::{Kernel, diff, diff_only};
use kube_proxy_rs::dataplane::ipvs::plan::Planner;
use kube_proxy_rs::dataplane::ipvs::{self, HostAddresses};
use kube_proxy_rs::nft;

fn bench(c: &mut Criterion) {
    let (mut g, cluster, cfg, before) = planner_bench::start(c, "ipvs", |s, cfg| {
        ipvs::plan_all(s, cfg, &HostAddresses::default())
    });
    let host = HostAddresses::default();
    let node = &cluster.before.node;
    let bound = ipvs::bound_addresses(&before, &Default::default());
    let tables = ipvs::rules_all(&before, &cfg, node, &bound);
    let kernel: Vec<Kernel> = before
        .iter()
        .map(|want| {
            let mut k = Kernel::default();
            for r in diff(&k, want, &cfg, &BTreeMap::new()).requests {
                k.apply(&r);
            }
            k
        })
        .collect();
    g.bench_function("one_endpoint_change_full", |b| {
        b.iter(|| {
            let want = ipvs::plan_all(&cluster.after, &cfg, &host);
            let bound = ipvs::bound_addresses(&want, &Default::default());
            let new_tables = ipvs::rules_all(&want, &cfg, node, &bound);
            let ops: usize = (0..2)
                .map(|i| {
                    nft::diff(&tables[i], &new_tables[i]).ops.len()
                        + diff(&kernel[i], &want[i], &cfg, &BTreeMap::new())
                            .requests
                            .len()
                })
                .sum();
            black_box(ops)
        })
    });
    let mut planner = Planner::new();
    planner.replan(&cluster.before, &cfg, &host);
    let mut kernel = kernel;
    // Each iteration moves the endpoint there or back, and the kernel follows: always one
    // change from the last plan.
    let mut there = false;
    g.bench_function("one_endpoint_change", |b| {
        b.iter(|| {
            there = !there;
            let update = planner.update(cluster.snapshot(there), &cluster.changes, &cfg, &host);
            let mut sent = 0;
            for (i, family) in IpFamily::ALL.into_iter().enumerate() {
                let want = &planner.desired()[i];
                debug_assert_eq!(want.family, family);
                let d = diff_only(&kernel[i], want, &update.touched[i], &cfg, &BTreeMap::new());
                for r in &d.requests {
                    kernel[i].apply(r);
                }
                sent += d.requests.len() + update.transactions[i].ops.len();
            }
            black_box(sent)
        })
    });
    // What a sync reads for its report besides the plan (upstream's no-local-endpoints gauges
    // and the objects gauge): counts kept as ports change, once a walk of every service port
    // and virtual service.
    g.bench_function("report_scans", |b| {
        b.iter(|| {
            let mut n = 0;
            for (i, family) in IpFamily::ALL.into_iter().enumerate() {
                let no_local = cluster.after.no_local_endpoints(family);
                n += no_local.internal + no_local.external + planner.objects()[i];
            }
            black_box(n)
        })
    });
    g.finish();
    let update = planner.update(cluster.snapshot(!there), &cluster.changes, &cfg, &host);
    println!(
        "one endpoint change: {} IPVS requests, {} helper-table operations; {} virtual services",
        (0..2)
            .map(|i| diff_only(
                &kernel[i],
                &planner.desired()[i],
                &update.touched[i],
                &cfg,
                &BTreeMap::new()
            )
            .requests
            .len())
            .sum::<usize>(),
        update
            .transactions
            .iter()
            .map(|t| t.ops.len())
            .sum::<usize>(),
        before.iter().map(|d| d.services.len()).sum::<usize>(),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
