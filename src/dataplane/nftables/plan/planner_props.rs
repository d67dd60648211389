//! Property test: after any sequence of cluster changes fed through the tracker, the
//! [`Planner`]'s rulesets equal a full `plan_all` of the same snapshot, and its transactions
//! equal `diff` of the previous plan and the new one.
//!
//! The changes are `testing::changes`', whose Services collide, which exercises the claims that
//! decide whose data a shared key carries.

use proptest::prelude::*;

use super::Planner;
use crate::cluster::{Features, Tracker};
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::plan_all;
use crate::nft::diff::diff;
use crate::testing::changes::{events, step};
use crate::testing::{applied_node, node};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn incremental_plans_equal_full_plans(
        batches in proptest::collection::vec(proptest::collection::vec(step(), 1..4), 1..12),
    ) {
        let cfg = ModeConfig::default();
        let mut tracker = Tracker::new("node-a", Features::default());
        tracker.apply(&applied_node(node("node-a", "10.0.0.11", None)));
        let mut planner = Planner::new(cfg.clone());
        let mut previous = planner.rulesets().clone();
        for batch in &batches {
            for s in batch {
                for e in events(s) {
                    tracker.apply(&e);
                }
            }
            let (snap, changes) = tracker.snapshot();
            let update = planner.update(&snap, &changes);
            let want = plan_all(&snap, &cfg);
            prop_assert_eq!(planner.rulesets(), &want);
            for i in 0..2 {
                prop_assert_eq!(&update.transactions[i], &diff(&previous[i], &want[i]));
            }
            previous = want;
        }
    }
}
