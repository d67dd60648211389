//! `explain` over a real kernel (root, a fresh network namespace per test): the nftables
//! mode's table read back through the adopting reader explains packets exactly as the plan
//! does, and a change another program makes to our table shows as drift.

#![allow(
    clippy::disallowed_methods,
    reason = "kernel tests run nft in their namespace"
)]

#[path = "support/example_cluster.rs"]
mod example_cluster;
#[path = "support/host.rs"]
mod host;
#[path = "../src/testing/synthetic.rs"]
mod synthetic;

use example_cluster::{changed, example};
use host::NetNs;
use kube_proxy_rs::cli::explain::{Planned, Request, Rules, RulesFrom, explain, kernel, render};
use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::nftables::{Drift, Family, ModeConfig, NftablesDataplane, backend};

/// Packets of the example cluster as node-a sees them, from each kind of client.
const PACKETS: &[(&str, Option<&str>)] = &[
    ("10.96.1.10:80", None),
    ("10.96.1.10:80", Some("outside")),
    ("10.96.1.10:81", None),
    ("10.0.0.11:30080", Some("outside")),
    ("10.0.0.11:30443", Some("node")),
    ("10.96.2.10:80", None),
    ("10.96.9.9:80", None),
];

#[test]
fn the_kernels_table_explains_packets_as_the_plan_does_and_drift_shows() {
    let ns = NetNs::new("explain-live");
    let snap = example();
    let cfg = ModeConfig::default();
    let mut dp = NftablesDataplane::new(
        cfg.clone(),
        backend::for_encoder(NftablesEncoder::default(), Some(&ns.name)),
        Drift::new(),
    );
    dp.sync(&snap, &changed(snap.ports.keys().cloned()), true)
        .expect("first sync");
    let planned = Planned::nftables(&snap, &cfg);
    let read = || {
        kernel::read_nftables(NftablesEncoder::default(), Some(&ns.name), Family::Ip)
            .expect("reads")
            .expect("our table is there")
    };
    let live = read();
    let Rules::Nftables(want) = planned.rules(IpFamily::V4) else {
        unreachable!()
    };
    assert!(kernel::drift(Some(&live), want).is_empty(), "just synced");
    for (to, from) in PACKETS {
        let request = Request::parse(to, *from, None).unwrap();
        let ask = |rules, from| explain(&snap, &cfg.node, rules, from, &request).unwrap();
        let a = ask(planned.rules(IpFamily::V4), RulesFrom::Planned);
        let b = ask(Rules::Nftables(&live), RulesFrom::Kernel);
        assert_eq!(
            a.outcome,
            b.outcome,
            "{to} from {from:?}:\n{}",
            render::text(&b)
        );
        assert_eq!(a.reasons, b.reasons, "{to} from {from:?}");
    }

    // Another program empties one of our sets: the ClusterIP of an undefined port is no longer
    // refused, and the drift says what a sync would put back.
    ns.output(
        "nft",
        &["flush", "set", "ip", "kube-proxy-rs", "cluster-ips"],
    );
    let live = read();
    let drift = kernel::drift(Some(&live), want);
    assert!(
        drift[0].contains("operations would bring the kernel to the plan"),
        "{drift:?}"
    );
    assert!(drift.iter().any(|l| l.contains("cluster-ips")), "{drift:?}");
    let request = Request::parse("10.96.1.10:81", None, None).unwrap();
    let before = explain(
        &snap,
        &cfg.node,
        planned.rules(IpFamily::V4),
        RulesFrom::Planned,
        &request,
    )
    .unwrap();
    let after = explain(
        &snap,
        &cfg.node,
        Rules::Nftables(&live),
        RulesFrom::Kernel,
        &request,
    )
    .unwrap();
    assert_ne!(before.outcome, after.outcome, "{}", render::text(&after));

    // Our table gone: explained as untouched, and the drift says so.
    ns.output("nft", &["delete", "table", "ip", "kube-proxy-rs"]);
    let gone = kernel::read_nftables(NftablesEncoder::default(), Some(&ns.name), Family::Ip)
        .expect("reads");
    assert!(gone.is_none());
    assert!(kernel::drift(None, want)[0].contains("not in the kernel"));
}
