//! Hostile input: names an attacker controls go through planner and renderer. The restore
//! input must be accepted, and once applied in a fresh network namespace, `iptables-save` must
//! show exactly our chains and as many rules as we planned (no name added a rule or a chain);
//! and the input has the same words, outside comments and hashed chain names, as the same
//! snapshot with benign names. A kernel test: `kernel_`-named and ignored by a plain
//! `cargo test --lib`; `cargo test --lib -- --ignored kernel_` runs it (root).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::adopt;
use super::render::from_scratch;
use super::ruleset::Table;
use super::{ModeConfig, plan_all};
use crate::testing::hostile::{self, services};
use crate::testing::netns::NetNs;
use crate::testing::snapshots::{node, snapshot};

/// Replaces the 16-character hash of upstream's per-service chain names with `H`.
fn unhash(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("KUBE-") {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let prefix = [
            "KUBE-SVC-",
            "KUBE-SVL-",
            "KUBE-EXT-",
            "KUBE-FW-",
            "KUBE-SEP-",
        ]
        .into_iter()
        .find(|p| tail.starts_with(p) && tail.len() >= p.len() + 16);
        match prefix {
            Some(p) => {
                out.push_str(p);
                out.push('H');
                rest = &tail[p.len() + 16..];
            }
            None => {
                out.push_str("KUBE-");
                rest = &tail[5..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[test]
#[ignore = "kernel: restores into network namespaces (root); cargo test --lib -- --ignored kernel_"]
fn kernel_hostile_names_cannot_add_rules_or_chains() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let cfg = ModeConfig::default();
    runner
        .run(
            &proptest::collection::vec(hostile::IPTABLES_RESTORE.names(), 1..4),
            |mut names| {
                // Equal names are one service port; the benign twin must have as many.
                names.sort();
                names.dedup();
                let hostile = plan_all(&snapshot(node(), services(&names)), &cfg);
                let benign_names: Vec<String> =
                    (0..names.len()).map(|i| format!("svc{i}")).collect();
                let benign = plan_all(&snapshot(node(), services(&benign_names)), &cfg);
                let r = &hostile[0];
                let input = from_scratch(r);
                prop_assert_eq!(
                    hostile::IPTABLES_RESTORE.shape(&input, unhash),
                    hostile::IPTABLES_RESTORE.shape(&from_scratch(&benign[0]), unhash)
                );

                let ns = NetNs::new("kprs-ipt");
                ns.try_output_fed("iptables-nft-restore", &["--noflush"], &input)
                    .map_err(|e| TestCaseError::fail(format!("restore refused: {e}")))?;
                let saved = ns
                    .try_output("iptables-nft-save", &[])
                    .map_err(|e| TestCaseError::fail(format!("save failed: {e}")))?;
                let tables = adopt::parse(&saved);
                for table in Table::ALL {
                    let planned = r.table(table);
                    let got = tables.get(&table).cloned().unwrap_or_default();
                    let builtin = |c: &str| c.chars().all(|ch| ch.is_ascii_uppercase());
                    let ours: Vec<&String> = got.chains.iter().filter(|c| !builtin(c)).collect();
                    let names: Vec<&str> = r.chains(table).map(|(n, _)| n.as_str()).collect();
                    prop_assert_eq!(ours.len(), names.len(), "chains in {:?}", table);
                    for c in ours {
                        prop_assert!(names.contains(&c.as_str()), "unplanned chain {}", c);
                    }
                    let want = r.rule_count(table) + planned.jumps.len();
                    prop_assert_eq!(got.rules.len(), want, "rules in {:?}", table);
                }
                Ok(())
            },
        )
        .unwrap();
}
