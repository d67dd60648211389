//! What the planner benches (`benches/{nftables,iptables,ipvs,explain}.rs`) share, so that their
//! figures compare: the cluster (10,000 Services × 10 endpoints, from the shared
//! synthetic cluster of `src/testing/synthetic.rs`) before and after its one endpoint change, and
//! the benchmark both modes have, `plan`, in a group sized for plans that take milliseconds.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use kube_proxy_rs::cluster::{Changes, Snapshot};

use crate::synthetic::Synthetic;

/// 10,000 Services × 10 endpoints.
const CLUSTER: Synthetic = Synthetic {
    services: 10_000,
    endpoints: 10,
};

/// The cluster before and after the middle Service's middle endpoint moved, and the changes
/// that name that one service port, as the tracker reports them.
pub struct Cluster {
    pub before: Snapshot,
    pub after: Snapshot,
    pub changes: Changes,
}

impl Cluster {
    /// `after` when `moved`, else `before`: the benchmarks of a sync alternate between the two,
    /// so that each sync is one change away from the last.
    pub fn snapshot(&self, moved: bool) -> &Snapshot {
        if moved { &self.after } else { &self.before }
    }
}

/// Builds the cluster and opens the benchmark group of `mode` (`<mode>_10k_x_10`) with the
/// benchmark every mode has: `plan`, both families' rulesets from the cluster before the change
/// under the mode's default configuration, which every sync pays. Returns the group, the
/// cluster, that configuration and that plan, from which the mode's own benchmarks start.
///
/// Ten samples per benchmark: a full plan takes tens of milliseconds, and criterion's default
/// hundred would make a run take minutes.
pub fn start<'a, C: Default, P>(
    c: &'a mut Criterion,
    mode: &str,
    plan: fn(&Snapshot, &C) -> P,
) -> (BenchmarkGroup<'a, WallTime>, Cluster, C, P) {
    let before = CLUSTER.snapshot();
    let cluster = Cluster {
        after: CLUSTER.moved(&before, "10.200.0.1"),
        changes: Changes {
            ports: [CLUSTER.moved_port()].into(),
            ..Changes::default()
        },
        before,
    };
    let cfg = C::default();
    let planned = plan(&cluster.before, &cfg);
    let mut g = c.benchmark_group(format!("{mode}_10k_x_10"));
    g.sample_size(10);
    g.bench_function("plan", |b| {
        b.iter(|| black_box(plan(&cluster.before, &cfg)))
    });
    (g, cluster, cfg, planned)
}
