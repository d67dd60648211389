use std::path::{Path, PathBuf};

use super::*;
use crate::cli::load_manifests;
use crate::cluster::Features;
use crate::dataplane::iptables::adopt;
use crate::dataplane::iptables::golden_tests::settings;
use crate::dataplane::iptables::{ModeConfig, plan_all};

fn testdata(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/dataplane/iptables/testdata")
        .join(name);
    std::fs::read_to_string(path).expect("captured output")
}

fn planned(cfg: &ModeConfig) -> [Ruleset; 2] {
    let loaded = load_manifests(Path::new("examples/cluster"), "node-a", Features::default())
        .expect("example loads");
    plan_all(&loaded.snapshot, cfg)
}

fn has_firewall(plan: &Ruleset) -> bool {
    plan.chain(Table::Filter, &ChainName::fixed(names::FIREWALL))
        .is_some()
}

/// What `parse` reads from `save` equals the plan that was restored, in save's match order.
fn reads_back(plan: &Ruleset, save: &str) {
    let mut parsed = parse(plan.family, &adopt::parse(save), has_firewall(plan));
    assert_eq!(parsed.unknown, Vec::<String>::new());
    parsed.ruleset.context = plan.context.clone();
    let want = canonical(plan);
    for table in Table::ALL {
        assert_eq!(
            parsed.ruleset.table(table).jumps,
            want.table(table).jumps,
            "{table:?} jumps"
        );
        for (name, rules) in &want.table(table).chains {
            assert_eq!(
                parsed.ruleset.table(table).chains.get(name),
                Some(rules),
                "{table:?} {name}"
            );
        }
    }
    assert_eq!(parsed.ruleset, want);
}

#[test]
fn captured_iptables_nft_and_legacy_save_read_back_as_the_plan_restored() {
    // Captured from iptables 1.8.9 after restoring `example.node-a.prefix-cidr.iptables`: it
    // has negated interfaces, affinity, source ranges, tcp-reset rejects and the localnet rule.
    let [v4, v6] = planned(&settings("prefix-cidr"));
    reads_back(
        &v4,
        &testdata("example.node-a.prefix-cidr.iptables-nft-save"),
    );
    reads_back(
        &v4,
        &testdata("example.node-a.prefix-cidr.iptables-legacy-save"),
    );
    reads_back(
        &v6,
        &testdata("example.node-a.prefix-cidr.ip6tables-nft-save"),
    );
}

#[test]
#[ignore = "kernel: restores into network namespaces (root); cargo test --lib -- --ignored kernel_"]
fn kernel_rules_restored_in_a_fresh_namespace_read_back_in_both_flavours() {
    use crate::testing::netns::NetNs;
    for cfg in [ModeConfig::default(), settings("masquerade-all")] {
        for plan in planned(&cfg) {
            for flavour in ["nft", "legacy"] {
                let base = match plan.family {
                    IpFamily::V4 => "iptables",
                    IpFamily::V6 => "ip6tables",
                };
                let ns = NetNs::new("kprs-iptparse");
                let input = super::super::render::from_scratch(&plan);
                ns.try_output_fed(&format!("{base}-{flavour}-restore"), &["--noflush"], &input)
                    .expect("restore");
                let save = ns
                    .try_output_fed(&format!("{base}-{flavour}-save"), &[], "")
                    .expect("save");
                reads_back(&plan, &save);
            }
        }
    }
}

#[test]
fn upstream_spellings_of_our_targets_read_as_ours() {
    let r = |text: &str| rule(text, IpFamily::V4);
    assert_eq!(
        r(" -j MARK --set-xmark 0x4000/0x4000").unwrap().target,
        Target::OrMark(0x4000)
    );
    assert_eq!(
        r(" -j MARK --set-xmark 0x4000/0x0").unwrap().target,
        Target::XorMark(0x4000)
    );
    assert_eq!(
        r(" -p tcp -j REJECT --reject-with icmp-port-unreachable")
            .unwrap()
            .target,
        Target::Reject
    );
    assert_eq!(r(" -j REJECT").unwrap().target, Target::Reject);
    assert_eq!(
        rule(" -j DNAT --to-destination [fd00::2]:8080", IpFamily::V6)
            .unwrap()
            .target,
        Target::Dnat {
            ip: "fd00::2".parse().unwrap(),
            port: 8080
        }
    );
    assert_eq!(
        r(" -m statistic --mode random --probability 0.33333333349 -j KUBE-SEP-X")
            .unwrap()
            .matches,
        vec![Match::Probability { remaining: 3 }]
    );
}

#[test]
fn words_outside_our_vocabulary_leave_the_line_out_and_name_it() {
    let save = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-AAAA - [0:0]\n\
        :OTHER - [0:0]\n\
        -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
        -A PREROUTING -j OTHER\n\
        -A OTHER -j KUBE-SVC-AAAA\n\
        -A KUBE-SERVICES -d 10.96.0.10/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-AAAA\n\
        -A KUBE-SERVICES -m set --match-set blocked src -j DROP\n\
        -A KUBE-SVC-AAAA -p tcp -m comment --comment \"a \\\"quoted\\\" -j ACCEPT\" -j DNAT --to-destination 10.244.1.2:8080\n\
        -A KUBE-SVC-AAAA -j DNAT --to-destination 10.244.1.3:8080 --persistent\n\
        COMMIT\n";
    let parsed = parse(IpFamily::V4, &adopt::parse(save), false);
    // Wide spaces before the owner are no word boundary to cut inside.
    let odd = "*nat\n:KUBE-SVC-AAAA - [0:0]\n-A \u{3000}\u{3000}KUBE-SVC-AAAA -j DROP\nCOMMIT\n";
    let rules = parse(IpFamily::V4, &adopt::parse(odd), false).ruleset;
    assert_eq!(
        rules.table(Table::Nat).chains[&ChainName::parse("KUBE-SVC-AAAA").unwrap()],
        vec![Rule::new(vec![], Target::Drop)]
    );
    assert_eq!(
        parsed.unknown,
        vec![
            "-A KUBE-SERVICES -m set --match-set blocked src -j DROP".to_string(),
            "-A KUBE-SVC-AAAA -j DNAT --to-destination 10.244.1.3:8080 --persistent".to_string(),
        ]
    );
    let nat = parsed.ruleset.table(Table::Nat);
    // Only jumps from built-in chains into ours; another program's chain is not read.
    assert_eq!(nat.jumps.len(), 1);
    assert!(!nat.chains.keys().any(|c| c.as_str() == "OTHER"));
    let svc = &nat.chains[&ChainName::parse("KUBE-SVC-AAAA").unwrap()];
    assert_eq!(svc.len(), 1);
    // A hostile comment is one word, re-sanitised.
    assert!(
        matches!(&svc[0].matches[1], Match::Comment(c) if c.as_str() == "a _quoted_ -j ACCEPT")
    );
}
