//! Property test: after any sequence of cluster changes fed through the tracker (Services that
//! collide on frontends, from `testing::changes`), the [`Planner`]'s states equal a full
//! [`plan`] of the same snapshot, its tables equal `rules_all`, its bound addresses upstream's
//! bind rule, an incremental update's transactions `diff` of the previous tables and the new
//! ones, and `diff_only` of the touched and draining virtual services the whole `diff` against
//! a kernel that holds the previous plan.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::Planner;
use crate::cluster::{Features, IpFamily, Tracker};
use crate::dataplane::ipvs::backend::link::addresses::wanted;
use crate::dataplane::ipvs::diff::{Kernel, diff, diff_only};
use crate::dataplane::ipvs::mode_config::ModeConfig;
use crate::dataplane::ipvs::plan::{HostAddresses, plan};
use crate::dataplane::ipvs::rules_all;
use crate::nft;
use crate::testing::changes::{events, step};
use crate::testing::snapshots::ip;
use crate::testing::{applied_node, node};

/// The host's addresses outside `kube-ipvs0`: unknown (the Node's stand in), or one of two
/// sets, one of which holds an external IP of `testing::changes` (so it is not bound).
fn host(choice: u8) -> HostAddresses {
    let list: &[&str] = match choice {
        0 => &[],
        1 => &["10.0.0.11", "fd00:1::11"],
        _ => &["10.0.0.11", "198.51.100.1"],
    };
    HostAddresses(list.iter().map(|a| ip(a)).collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn incremental_plans_equal_full_plans(
        batches in proptest::collection::vec(
            (proptest::collection::vec(step(), 1..4), prop_oneof![8 => Just(1u8), 1 => 0u8..3]),
            1..12,
        ),
    ) {
        let cfg = ModeConfig::default();
        let mut tracker = Tracker::new("node-a", Features::default());
        tracker.apply(&applied_node(node("node-a", "10.0.0.11", None)));
        let mut planner = Planner::new();
        let mut kernel: [Kernel; 2] = Default::default();
        let mut draining: [BTreeSet<_>; 2] = Default::default();
        let mut previous_tables = planner.tables().clone();
        let mut previous_bound = BTreeSet::new();
        for (batch, host_choice) in &batches {
            for s in batch {
                for e in events(s) {
                    tracker.apply(&e);
                }
            }
            let host = host(*host_choice);
            let (snap, changes) = tracker.snapshot();
            let update = planner.update(&snap, &changes, &cfg, &host);
            let want = IpFamily::ALL.map(|f| plan(&snap, &cfg, f, &host));
            prop_assert_eq!(planner.desired(), &want);
            prop_assert_eq!(planner.objects(), [want[0].objects(), want[1].objects()]);
            let bound = wanted(&planner.addresses(), &host.0);
            prop_assert_eq!(planner.bound(), &bound);
            if !update.full {
                let bind: BTreeSet<_> = bound.difference(&previous_bound).copied().collect();
                let unbind: BTreeSet<_> = previous_bound.difference(&bound).copied().collect();
                prop_assert_eq!((&update.bind, &update.unbind), (&bind, &unbind));
            }
            let tables = rules_all(&want, &cfg, &snap.node, &bound);
            prop_assert_eq!(&planner.tables()[..], &tables[..]);
            for i in 0..2 {
                let whole = diff(&kernel[i], &want[i], &cfg, &BTreeMap::new());
                if !update.full {
                    prop_assert_eq!(
                        &update.transactions[i],
                        &nft::diff(&previous_tables[i], &tables[i])
                    );
                    let keys: BTreeSet<_> =
                        update.touched[i].iter().chain(&draining[i]).copied().collect();
                    let only = diff_only(&kernel[i], &want[i], &keys, &cfg, &BTreeMap::new());
                    prop_assert_eq!(&only, &whole);
                }
                for r in &whole.requests {
                    kernel[i].apply(r);
                }
                draining[i] = whole.draining.iter().map(|(k, _)| *k).collect();
            }
            previous_tables = planner.tables().clone();
            previous_bound = bound;
        }
    }
}
