//! The kernel pushing back in nftables mode (root, a fresh network namespace): another program
//! holds one of our chains with a rule that jumps to it, so the kernel refuses our batch that
//! deletes that chain (`EBUSY`). The transaction is atomic: the sync fails and leaves every
//! rule as it was; the retry (a full sync, as the runner's retry after a failure is) reads the
//! table back, deletes the other program's chain with ours and converges to the plan.
//!
//! A busy nf_tables commit has no on-demand trigger from another process: nf_tables
//! serialises transactions in the kernel, and nft takes no lock another program could hold.
//! `ENOBUFS`, notifications the kernel drops for the monitor, is in `nftables_apply.rs`.

#![allow(clippy::disallowed_methods, reason = "a kernel test: it runs nft")]

use support::example_cluster;
use support::host;

use std::sync::Arc;

use example_cluster::{changed, example};
use host::NetNs;
use kube_proxy_rs::cluster::{Changes, Snapshot};
use kube_proxy_rs::config::NftablesEncoder;
use kube_proxy_rs::dataplane::Dataplane;
use kube_proxy_rs::dataplane::nftables::{Drift, ModeConfig, NftablesDataplane, plan_all};
use kube_proxy_rs::nft::TABLE;
use kube_proxy_rs::nft::{Ruleset, backend};

fn planned(snap: &Snapshot) -> Vec<Ruleset> {
    plan_all(snap, &ModeConfig::default()).into()
}

/// `nft list table ip OURS` in the namespace.
fn listed(ns: &NetNs) -> String {
    ns.output("nft", &["list", "table", "ip", TABLE])
}

#[test]
fn a_chain_another_program_jumps_to_is_refused_busy_and_the_retry_converges() {
    for encoder in [NftablesEncoder::Netlink, NftablesEncoder::Nft] {
        let ns = NetNs::new("nfa-busy");
        let mut dp = NftablesDataplane::new(
            ModeConfig::default(),
            backend::for_encoder(encoder, Some(&ns.name)),
            Drift::new(),
        );
        let before = example();
        // The example without `default/web-sticky`: its Service chains go.
        let mut ports = (*before.ports).clone();
        let gone_port = ports
            .keys()
            .find(|n| n.to_string().starts_with("default/web-sticky"))
            .cloned()
            .expect("in the example");
        ports.remove(&gone_port);
        let after = Snapshot::new(before.node.clone(), Arc::new(ports));
        let changes = changed([gone_port]);
        dp.sync(&before, &Changes::default(), true)
            .expect("first sync");
        let old = &planned(&before)[0];
        let new = &planned(&after)[0];
        let gone: Vec<String> = old
            .chains
            .keys()
            .filter(|c| !new.chains.contains_key(*c))
            .map(|c| c.to_string())
            .collect();
        assert!(!gone.is_empty(), "the change deletes a chain");

        // Another program's chain in our table, jumping to the one the change deletes.
        ns.output("nft", &["add", "chain", "ip", TABLE, "outside-holder"]);
        ns.output(
            "nft",
            &[
                "add",
                "rule",
                "ip",
                TABLE,
                "outside-holder",
                "jump",
                &gone[0],
            ],
        );
        let held = listed(&ns);

        let error = dp
            .sync(&after, &changes, false)
            .expect_err("the kernel refuses to delete a chain in use");
        let text = kube_proxy_rs::causes::one_line(&error);
        assert!(
            text.contains("busy") || text.contains("EBUSY") || text.contains("in use"),
            "{encoder:?}: {text}"
        );
        assert_eq!(listed(&ns), held, "{encoder:?}: the old rules stay");

        eprintln!("{encoder:?}: {text}");
        // Our table is ours: the full retry reads it back, deletes the other program's chain
        // with the one it held, and programs the change in one transaction.
        let retry = dp
            .sync(&after, &Changes::default(), true)
            .expect("the full retry");
        assert!(retry.full);
        let now = listed(&ns);
        assert!(
            !now.contains(&format!("chain {} {{", gone[0])) && !now.contains("outside-holder"),
            "{now}"
        );
        let again = dp
            .sync(&after, &Changes::default(), true)
            .expect("a full sync");
        assert_eq!(
            again.families.iter().map(|f| f.operations).sum::<usize>(),
            0,
            "{encoder:?}: converged to the plan"
        );
    }
}
