//! `explain` at 10,000 Services × 10 endpoints, in every mode (nftables, iptables, ipvs,
//! userspace, ebpf): what it costs once the objects
//! are loaded (from manifests, or listed from the API server), the goal being an answer in
//! under a second.
//!
//! - `<mode>/plan_and_explain`: plan the mode's rules of both families from the snapshot and
//!   explain one packet to a ClusterIP (`explain --manifests`);
//! - `iptables/read_and_explain`: on a live iptables node, what follows `iptables-save`: its
//!   text split and typed ([`adopt::parse`], `iptables::parse`), the drift from the plan, and
//!   the packet explained over what was read;
//! - `<mode>/explain`: the same packet over rules already planned (or read from the kernel):
//!   the model lookup, the tracer and the report.
//! - `<mode>/status`: `status` of the whole node over rules already planned, taken as the
//!   kernel's too: every frontend of every port traced twice, the table rendered (what
//!   `/debug/status` does once the kernel is read; in iptables mode the whole node is not
//!   traced: that is 10,000 × 2 walks of KUBE-SERVICES, too slow to sample).
//!
//! Run: `cargo bench --bench explain`. Results go to docs/benchmarks.md.

use std::hint::black_box;

use support::planner_bench;

/// The same allocator as the binary, so the numbers are the product's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{Criterion, criterion_group, criterion_main};
use kube_proxy_rs::cli::explain::{Plan, Request, RulesFrom, explain};
use kube_proxy_rs::cli::status::{self, Inputs, Runtime};
use kube_proxy_rs::cluster::{IpFamily, Snapshot};
use kube_proxy_rs::config::{Config, NodePortAddresses};
use kube_proxy_rs::dataplane::iptables::inspect::saved;
use kube_proxy_rs::dataplane::node::NodePolicy;
use kube_proxy_rs::dataplane::{ebpf, iptables, ipvs, nftables, userspace};

/// How one mode plans the snapshot.
type Planner = fn(&Snapshot) -> Box<dyn Plan>;

/// A packet from outside to the middle Service's ClusterIP (Service 5,000: 10.96.20.1).
fn request() -> Request {
    Request::parse("10.96.20.1:80", Some("outside"), None).expect("a valid request")
}

fn bench(c: &mut Criterion) {
    let (mut g, cluster, cfg, _) = planner_bench::start(c, "explain", nftables::plan_all);
    let snap: &Snapshot = &cluster.before;
    let node: NodePolicy = cfg.node.clone();
    let modes: [(&str, Planner); 5] = [
        ("nftables", |s| {
            Box::new(nftables::inspect::Planned::new(
                s,
                &nftables::ModeConfig::default(),
            ))
        }),
        ("iptables", |s| {
            Box::new(iptables::inspect::Planned::new(
                s,
                &iptables::ModeConfig::default(),
            ))
        }),
        ("ipvs", |s| {
            Box::new(ipvs::inspect::Planned::on(
                s,
                &ipvs::ModeConfig::default(),
                &ipvs::HostAddresses::default(),
            ))
        }),
        ("userspace", |s| {
            let config = Config::default();
            let node = NodePolicy::new(&config).expect("the default node policy");
            Box::new(userspace::inspect::Planned::new(
                s,
                userspace::redirect::Settings::of(&config, &node),
            ))
        }),
        ("ebpf", |s| {
            Box::new(ebpf::inspect::Planned::new(
                s,
                &NodePortAddresses::default(),
            ))
        }),
    ];
    for (mode, planner) in modes {
        // The eBPF mode balances a ClusterIP where a socket connects, not for packets from
        // outside: its packet comes from a process of the node.
        let request = if mode == "ebpf" {
            Request::parse("10.96.20.1:80", Some("node"), None).expect("a valid request")
        } else {
            request()
        };
        let planned = planner(snap);
        let e = explain(
            snap,
            &node,
            planned.rules(IpFamily::V4),
            RulesFrom::Planned,
            &request,
        )
        .expect("explains");
        assert_eq!(
            e.outcome.endpoints.len(),
            10,
            "{mode}: the middle Service's endpoints"
        );
        g.bench_function(format!("{mode}/plan_and_explain"), |b| {
            b.iter(|| {
                let planned = planner(snap);
                black_box(
                    explain(
                        snap,
                        &node,
                        planned.rules(IpFamily::V4),
                        RulesFrom::Planned,
                        &request,
                    )
                    .map(|e| e.outcome.endpoints.len()),
                )
            })
        });
        g.bench_function(format!("{mode}/explain"), |b| {
            b.iter(|| {
                black_box(
                    explain(
                        snap,
                        &node,
                        planned.rules(IpFamily::V4),
                        RulesFrom::Planned,
                        &request,
                    )
                    .map(|e| e.outcome.endpoints.len()),
                )
            })
        });
        let status_of = || {
            let runtime = Runtime::default();
            let st = status::build(Inputs {
                snapshot: snap,
                node: &node,
                planned: IpFamily::ALL.map(|f| planned.rules(f)),
                kernel: Some(IpFamily::ALL.map(|f| planned.rules(f))),
                drift: Vec::new(),
                runtime: &runtime,
                service: None,
            });
            status::render::text(&st, false)
        };
        let table = status_of();
        assert!(table.contains("kernel: matches the plan"), "{mode}");
        g.bench_function(format!("{mode}/status"), |b| {
            b.iter(|| black_box(status_of().len()))
        });
        if mode == "iptables" {
            let iptables_plan =
                iptables::inspect::Planned::new(snap, &iptables::ModeConfig::default());
            let want = &iptables_plan.0[IpFamily::V4.index()];
            // What iptables-save prints of our rules: declared chains and `-A` lines.
            let save = iptables::render::from_scratch(want)
                .replace("\n-I ", "\n-A ")
                .replace(" 1 -m ", " -m ");
            let read_and_explain = || {
                let read = saved::as_read(&iptables::adopt::parse(&save), want, None);
                let rules = read.rules.expect("our chains");
                explain(snap, &node, &rules, RulesFrom::Kernel, &request)
                    .map(|e| e.outcome.endpoints.len())
            };
            assert_eq!(read_and_explain().ok(), Some(10));
            g.bench_function("iptables/read_and_explain", |b| {
                b.iter(|| black_box(read_and_explain()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
