//! Every rule our types can say reads back from its expressions as itself (the kernel-side
//! round trip in `tests/nftables_netlink.rs` checks the shapes against nft).

use std::net::IpAddr;

use ipnet::IpNet;
use proptest::prelude::*;

use super::{decode, encode};
use crate::cluster::Protocol;
use crate::nft::Name;
use crate::nft::ruleset::{CtState, Family, Field, IfName, Match, Rule, Statement, Verdict};

fn family() -> impl Strategy<Value = Family> {
    prop_oneof![Just(Family::Ip), Just(Family::Ip6)]
}

fn addr(f: Family) -> BoxedStrategy<IpAddr> {
    match f {
        Family::Ip => any::<[u8; 4]>().prop_map(IpAddr::from).boxed(),
        Family::Ip6 => any::<[u8; 16]>().prop_map(IpAddr::from).boxed(),
    }
}

fn net(f: Family) -> impl Strategy<Value = IpNet> {
    let max: u8 = match f {
        Family::Ip => 32,
        Family::Ip6 => 128,
    };
    (addr(f), 0..=max).prop_map(|(a, len)| IpNet::new(a, len).unwrap().trunc())
}

fn name() -> impl Strategy<Value = Name> {
    "[a-z][a-z0-9-]{0,20}".prop_map(|s| Name::parse(&s).unwrap())
}

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::Saddr),
        Just(Field::Daddr),
        Just(Field::L4Proto),
        Just(Field::Dport),
        (1u32..100).prop_map(Field::Random),
    ]
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop_oneof![
        Just(Protocol::Tcp),
        Just(Protocol::Udp),
        Just(Protocol::Sctp)
    ]
}

fn a_match(f: Family) -> impl Strategy<Value = Match> {
    prop_oneof![
        prop_oneof![Just(CtState::New), Just(CtState::Invalid)].prop_map(Match::CtState),
        Just(Match::CtStatusDnat),
        any::<bool>().prop_map(|source| Match::FibLocal { source }),
        (
            prop_oneof![Just(Field::Saddr), Just(Field::Daddr)],
            net(f),
            any::<bool>()
        )
            .prop_map(|(field, net, negate)| Match::Net { field, net, negate }),
        ("[a-z0-9._-]{1,15}", any::<bool>(), any::<bool>()).prop_map(|(n, prefix, negate)| {
            Match::Iifname {
                name: IfName::new(&n, prefix).unwrap(),
                negate,
            }
        }),
        (prop::collection::vec(field(), 1..=4), name(), any::<bool>())
            .prop_map(|(key, set, negate)| Match::InSet { key, set, negate }),
        any::<u32>().prop_map(Match::MarkSet),
        protocol().prop_map(Match::L4Proto),
        (1u32..100).prop_map(Match::OneIn),
    ]
}

fn verdict() -> impl Strategy<Value = Verdict> {
    prop_oneof![
        Just(Verdict::Accept),
        Just(Verdict::Drop),
        Just(Verdict::Reject),
        Just(Verdict::RejectTcpReset),
        Just(Verdict::Return),
        name().prop_map(Verdict::Jump),
        name().prop_map(Verdict::Goto),
    ]
}

fn statement(f: Family) -> impl Strategy<Value = Statement> {
    prop_oneof![
        // `or 0` reads back as `xor 0`: the same no-op; the planner never sets either.
        (1u32..).prop_map(Statement::MarkOr),
        any::<u32>().prop_map(Statement::MarkXor),
        name().prop_map(Statement::RememberSource),
        (protocol(), addr(f), any::<u16>()).prop_map(|(protocol, addr, port)| {
            Statement::DnatTo {
                protocol,
                addr,
                port,
            }
        }),
        (prop::collection::vec(field(), 1..=4), name())
            .prop_map(|(key, map)| Statement::DnatMap { key, map }),
        Just(Statement::Masquerade),
        verdict().prop_map(Statement::Verdict),
        (prop::collection::vec(field(), 1..=4), name())
            .prop_map(|(key, map)| Statement::VerdictMap { key, map }),
    ]
}

fn rule() -> impl Strategy<Value = (Family, Rule, bool)> {
    family().prop_flat_map(|f| {
        (
            Just(f),
            prop::collection::vec(a_match(f), 0..4),
            prop::collection::vec(statement(f), 0..3),
            any::<bool>(),
        )
            .prop_filter("a rule says something", |(_, m, s, _)| {
                !m.is_empty() || !s.is_empty()
            })
            .prop_map(|(f, m, s, interval)| (f, Rule::new(m, s), interval))
    })
}

proptest! {
    #[test]
    fn rules_read_back_from_their_expressions((family, rule, interval) in rule()) {
        let exprs = encode(family, &rule, &|_| interval);
        prop_assert_eq!(decode(family, &exprs), Ok(rule));
    }
}

#[test]
fn why_an_expression_list_is_not_ours_is_named() {
    use super::DecodeError;
    use crate::nft::backend::netlink::expr::Expr;
    let family = Family::Ip;
    assert_eq!(decode(family, &[]), Err(DecodeError::Empty));
    let never = Expr::Masq { flags: 0 };
    let unknown = decode(family, std::slice::from_ref(&never)).unwrap_err();
    assert_eq!(unknown, DecodeError::Unknown(never.clone()));
    assert_eq!(unknown.to_string(), format!("{never:?}"));
    let accept = Rule::new(Vec::new(), vec![Statement::Verdict(Verdict::Accept)]);
    let new = Rule::new(vec![Match::CtState(CtState::New)], Vec::new());
    let mut exprs = encode(family, &accept, &|_| false);
    exprs.extend(encode(family, &new, &|_| false));
    assert_eq!(
        decode(family, &exprs),
        Err(DecodeError::MatchAfterStatement)
    );
}
