//! The library's diff over this mode's plans: a small model of how the kernel applies a batch
//! (including what it refuses: deleting a referenced set or chain, overwriting map data), and
//! the round trip `apply(a, diff(a, b)) == b` over planned rulesets of random snapshots.

use proptest::prelude::*;

use crate::cluster::IpFamily;
use crate::cluster::Protocol;
use crate::dataplane::nftables::mode_config::ModeConfig;
use crate::dataplane::nftables::plan::plan;
use crate::dataplane::node::{DetectLocal, NodePolicy};
use crate::nft::Name;
use crate::nft::diff::{Op, Transaction, diff, rebuild, referenced_sets};
use crate::nft::ruleset::{Chain, Data, Ruleset, Set, Statement, Verdict};
use crate::testing::snapshots::{Svc, node, snapshot, svc};

/// Applies a transaction as the kernel would, refusing what it would refuse.
fn apply(r: &mut Ruleset, t: &Transaction) -> Result<(), String> {
    for op in &t.ops {
        match op {
            Op::AddTable => {}
            Op::DeleteTable => *r = Ruleset::empty(r.family),
            Op::AddChain { name, base } => match r.chains.get(name) {
                Some(c) if c.base != *base => {
                    return Err(format!("chain {name} exists differently"));
                }
                Some(_) => {}
                None => {
                    r.chains.insert(
                        name.clone(),
                        Chain {
                            base: *base,
                            rules: vec![],
                        },
                    );
                }
            },
            Op::FlushChain(name) => r
                .chains
                .get_mut(name)
                .ok_or("flush of missing chain")?
                .rules
                .clear(),
            Op::DeleteChain(name) => {
                let c = r.chains.get(name).ok_or("delete of missing chain")?;
                if !c.rules.is_empty() || chain_referenced(r, name) {
                    return Err(format!("chain {name} busy"));
                }
                r.chains.remove(name);
            }
            Op::AddRule { chain, rule } => {
                for s in referenced_sets(rule) {
                    if !r.sets.contains_key(s) {
                        return Err(format!("rule names missing set {s}"));
                    }
                }
                r.chains
                    .get_mut(chain)
                    .ok_or("rule in missing chain")?
                    .rules
                    .push(rule.clone());
            }
            Op::AddSet { name, decl } => match r.sets.get(name) {
                Some(s) if s.decl != *decl => return Err(format!("set {name} exists differently")),
                Some(_) => {}
                None => {
                    r.sets.insert(name.clone(), Set::new(decl.clone()));
                }
            },
            Op::DeleteSet(name) => {
                if r.chains
                    .values()
                    .flat_map(|c| &c.rules)
                    .any(|x| referenced_sets(x).any(|s| s == name))
                {
                    return Err(format!("set {name} busy"));
                }
                r.sets.remove(name).ok_or("delete of missing set")?;
            }
            Op::AddElements { set, elements } => {
                for (k, e) in elements.iter() {
                    if let Data::Verdict(Verdict::Goto(c) | Verdict::Jump(c)) = &e.data
                        && !r.chains.contains_key(c)
                    {
                        return Err(format!("element names missing chain {c}"));
                    }
                    let s = r.sets.get_mut(set).ok_or("elements of missing set")?;
                    match s.elements.get(k) {
                        Some(old) if old.data != e.data => {
                            return Err(format!("{set} {k:?}: data differs"));
                        }
                        _ => {
                            s.elements_mut().insert(*k, e.clone());
                        }
                    }
                }
            }
            Op::DeleteElements { set, keys } => {
                let s = r
                    .sets
                    .get_mut(set)
                    .ok_or("delete elements of missing set")?;
                for k in keys {
                    s.elements_mut()
                        .remove(k)
                        .ok_or(format!("{set}: no element {k:?}"))?;
                }
            }
        }
    }
    Ok(())
}

fn chain_referenced(r: &Ruleset, name: &Name) -> bool {
    let by_rule = r.chains.values().flat_map(|c| &c.rules).any(|rule| {
        rule.statements.iter().any(
            |s| matches!(s, Statement::Verdict(Verdict::Jump(c) | Verdict::Goto(c)) if c == name),
        )
    });
    let by_element = r.sets.values().flat_map(|s| s.elements.values()).any(
        |e| matches!(&e.data, Data::Verdict(Verdict::Jump(c) | Verdict::Goto(c)) if c == name),
    );
    by_rule || by_element
}

fn round_trip(a: &Ruleset, b: &Ruleset) {
    let t = diff(a, b);
    let mut got = a.clone();
    apply(&mut got, &t).unwrap_or_else(|e| panic!("kernel model refused: {e}\n{t:#?}"));
    assert!(got == *b, "apply(a, diff(a, b)) != b");
    assert!(diff(b, b).is_empty());
}

fn base() -> Vec<Svc> {
    vec![
        svc("default/web", "10.96.0.10", 80)
            .ep("10.244.1.2", 80, "node-a")
            .ep("10.244.2.2", 80, "node-b"),
        svc("default/np", "10.96.0.11", 80)
            .node_port(30011)
            .ep("10.244.2.3", 80, "node-b"),
    ]
}

#[test]
fn one_endpoint_added_touches_only_that_services_elements() {
    let cfg = ModeConfig::default();
    let a = plan(&snapshot(node(), base()), &cfg, IpFamily::V4);
    let mut more = base();
    more[0] = more[0].clone().ep("10.244.3.2", 80, "node-c");
    let b = plan(&snapshot(node(), more), &cfg, IpFamily::V4);
    let t = diff(&a, &b);
    round_trip(&a, &b);
    // The service moves from the two-endpoint pick chain to a new three-endpoint one: the new
    // chain, its rule and its own backends map (see `names::backends`), the dispatch element
    // replaced (delete + add), its two old backends elements deleted and three new ones added.
    // Bounded by the service's endpoints, not by the cluster.
    assert!(
        t.operations() <= 12,
        "{} operations: {t:#?}",
        t.operations()
    );
}

#[test]
fn rebuild_replaces_any_table_atomically() {
    let b = plan(
        &snapshot(node(), base()),
        &ModeConfig::default(),
        IpFamily::V4,
    );
    let t = rebuild(&b);
    assert_eq!(t.ops[..2], [Op::AddTable, Op::DeleteTable]);
    let mut junk = plan(
        &snapshot(node(), vec![]),
        &ModeConfig::default(),
        IpFamily::V4,
    );
    junk.chains
        .insert(Name::parse("stale").unwrap(), Chain::default());
    apply(&mut junk, &t).unwrap();
    assert_eq!(junk, b);
}

#[test]
fn changed_set_declarations_are_recreated_with_their_rules() {
    let a = plan(
        &snapshot(node(), base()),
        &ModeConfig::default(),
        IpFamily::V4,
    );
    let mut b = a.clone();
    let set = b
        .sets
        .get_mut(&Name::fixed(super::names::CLUSTER_IPS))
        .unwrap();
    set.decl.comment = None;
    round_trip(&a, &b);
}

fn arb_service(i: usize) -> impl Strategy<Value = Svc> {
    (
        prop::collection::vec((0u8..6, 0u8..3, any::<bool>()), 0..5),
        0u8..4,
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1u32..100),
        prop::sample::select(vec![Protocol::Tcp, Protocol::Udp, Protocol::Sctp]),
    )
        .prop_map(move |(eps, shape, etp_local, itp_local, affinity, proto)| {
            let mut s = svc(&format!("ns/s{i}"), &format!("10.96.0.{}", i + 1), 80).proto(proto);
            if shape >= 1 {
                s = s.node_port(30000 + i as u16);
            }
            if shape >= 2 {
                s = s.lb(&format!("192.0.2.{}", i + 1)).range("198.51.100.0/24");
            }
            if shape == 3 {
                s = s.external(&format!("192.0.2.{}", i + 101));
            }
            if etp_local {
                s = s.external_local();
            }
            if itp_local {
                s = s.internal_local();
            }
            if let Some(t) = affinity {
                s = s.affinity(t);
            }
            for (host, node_ix, ready) in eps {
                let node = ["node-a", "node-b", "node-c"][node_ix as usize];
                s = s.ep_state(
                    &format!("10.244.{}.{}", node_ix + 1, host + 2),
                    8080,
                    node,
                    ready,
                    !ready,
                );
            }
            s
        })
}

fn arb_snapshot() -> impl Strategy<Value = Vec<Svc>> {
    (0usize..6).prop_flat_map(|n| (0..n).map(arb_service).collect::<Vec<_>>())
}

fn arb_config() -> impl Strategy<Value = ModeConfig> {
    (any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(all, cidr, invalid)| ModeConfig {
        node: NodePolicy {
            masquerade_all: all,
            detect_local: if cidr {
                DetectLocal::ClusterCidrs(vec!["10.244.0.0/16".parse().unwrap()])
            } else {
                DetectLocal::None
            },
            drop_invalid: invalid,
            ..ModeConfig::default().node
        },
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn applying_the_diff_of_two_plans_gives_the_second(
        a in arb_snapshot(), b in arb_snapshot(), ca in arb_config(), cb in arb_config()
    ) {
        let ra = plan(&snapshot(node(), a), &ca, IpFamily::V4);
        let rb = plan(&snapshot(node(), b), &cb, IpFamily::V4);
        round_trip(&ra, &rb);
        round_trip(&Ruleset::empty(rb.family), &rb);
        round_trip(&rb, &Ruleset::empty(rb.family));
    }
}
