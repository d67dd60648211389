//! The tracer on a hand-built ruleset: hook order, jump versus goto, return, verdict maps.

use super::*;
use crate::nft::Name;
use crate::nft::ruleset::{BaseChain, ChainType, Family, Rule};

fn name(s: &str) -> Name {
    Name::parse(s).unwrap()
}

fn ruleset() -> Ruleset {
    let mut r = Ruleset::empty(Family::Ip);
    let rule = |s: Statement| Rule::new(vec![], vec![s]);
    r.chains.insert(
        name("pre"),
        Chain {
            base: Some(BaseChain {
                kind: ChainType::Nat,
                hook: Hook::Prerouting,
                priority: -100,
            }),
            rules: vec![
                rule(Statement::Verdict(Verdict::Jump(name("a")))),
                rule(Statement::Verdict(Verdict::Goto(name("b")))),
                rule(Statement::Verdict(Verdict::Drop)),
            ],
        },
    );
    r.chains.insert(
        name("a"),
        Chain {
            base: None,
            rules: vec![
                rule(Statement::Verdict(Verdict::Return)),
                rule(Statement::Verdict(Verdict::Drop)),
            ],
        },
    );
    r.chains.insert(
        name("b"),
        Chain {
            base: None,
            rules: vec![rule(Statement::MarkOr(1))],
        },
    );
    r
}

#[test]
fn jump_returns_and_goto_does_not() {
    let p = Packet {
        protocol: Protocol::Tcp,
        src: "10.0.0.1".parse().unwrap(),
        dst: "10.0.0.2".parse().unwrap(),
        dport: 80,
        origin: Origin::Interface("eth0".into()),
    };
    // `a` returns at once, so its drop never runs; `b` falls off its end, which ends `pre` (a
    // goto does not come back), so `pre`'s drop never runs either.
    let t = trace(&ruleset(), &p, &[]);
    assert_eq!(t.fate(), Some(Fate::Accept));
    assert_eq!(t.masquerade(), Some(false));
    assert!(t.endpoints().is_empty());
}
