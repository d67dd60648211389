//! Hostile input: names an attacker controls go through planner and renderer. The restore
//! input must be accepted, and once applied in a fresh network namespace, `iptables-save` must
//! show exactly our chains and as many rules as we planned (no name added a rule or a chain);
//! and the input has the same words, outside comments and hashed chain names, as the same
//! snapshot with benign names.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::adopt;
use super::netns::Netns;
use super::render::from_scratch;
use super::ruleset::Table;
use super::{ModeConfig, plan_all};
use crate::cluster::model::ServiceKey;
use crate::testing::snapshots::{Svc, node, snapshot, svc};

/// Strings built to break out of quoting or add rules, plus arbitrary unicode.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("x\" -j ACCEPT\n-A INPUT -j DROP\n#".to_string()),
        Just("a\nCOMMIT\n*filter\n-F\n".to_string()),
        Just("\\\"\\n\u{0}\u{202e}'$(reboot)".to_string()),
        Just("é".repeat(300)),
        ".{0,120}",
    ]
}

fn services(names: &[String]) -> Vec<Svc> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut s = svc("ns/placeholder", &format!("10.96.0.{}", i + 1), 80)
                .node_port(30000 + i as u16)
                .lb(&format!("192.0.2.{}", i + 1))
                .range("198.51.100.0/24")
                .ep(&format!("10.244.1.{}", i + 2), 8080, "node-a")
                .ep(&format!("10.244.2.{}", i + 2), 8080, "node-b");
            if i % 2 == 0 {
                s = s.affinity(30).external_local();
            }
            s.port.name.service = ServiceKey::new(name, name);
            s.port.name.port = name.as_str().into();
            s
        })
        .collect()
}

/// The input's lines with comment contents blanked and hashed chain-name parts replaced by
/// `H`, sorted (hashes decide chain order): what must not depend on names.
fn shape(input: &str) -> Vec<String> {
    let mut lines: Vec<String> = input
        .lines()
        .map(|line| {
            let mut out = String::new();
            let mut rest = line;
            while let Some(at) = rest.find("--comment \"") {
                out.push_str(&rest[..at + 11]);
                let after = &rest[at + 11..];
                let end = after.find('"').expect("comments are closed on their line");
                out.push('"');
                rest = &after[end + 1..];
            }
            out.push_str(rest);
            unhash(&out)
        })
        .collect();
    lines.sort();
    lines
}

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
fn hostile_names_cannot_add_rules_or_chains() {
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let cfg = ModeConfig::default();
    runner
        .run(&proptest::collection::vec(hostile(), 1..4), |mut names| {
            // Equal names are one service port; the benign twin must have as many.
            names.sort();
            names.dedup();
            let hostile = plan_all(&snapshot(node(), services(&names)), &cfg);
            let benign_names: Vec<String> = (0..names.len()).map(|i| format!("svc{i}")).collect();
            let benign = plan_all(&snapshot(node(), services(&benign_names)), &cfg);
            let r = &hostile[0];
            let input = from_scratch(r);
            prop_assert_eq!(shape(&input), shape(&from_scratch(&benign[0])));

            let ns = Netns::new();
            let (ok, _, err) = ns.run("iptables-nft-restore", &["--noflush"], Some(&input));
            prop_assert!(ok, "restore refused: {}", err);
            let (ok, saved, err) = ns.run("iptables-nft-save", &[], None);
            prop_assert!(ok, "save failed: {}", err);
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
        })
        .unwrap();
}
