//! The fixed parts of our table that more than one mode programs: the base chains, where they
//! hook and at what priority, and the rules of the chains the modes share (`firewall-check`,
//! `cluster-ips-check`, `reject-chain`).
//!
//! Pure. Each mode hooks the base chains it needs, under these names and at these priorities,
//! so a packet meets our rules at the same points whichever mode programmed them; a mode's own
//! chains and the rules in its base chains stay in its planner.

use super::names as n;
use crate::cluster::Protocol;
use crate::nft::Name;
use crate::nft::ruleset::{ChainType, Field, Hook, Match, Statement, Verdict, priority};

/// The key of an address-based frontend (ClusterIP, externalIP, LoadBalancer IP): destination
/// . protocol . port.
pub const IP_KEY: [Field; 3] = [Field::Daddr, Field::L4Proto, Field::Dport];

/// The table's base chains: name, type, hook and priority. Priorities are upstream's: DNAT at
/// `dstnat`, source-range filtering just before it, the no-endpoint checks at `filter` (after
/// DNAT), masquerading at `srcnat`. nft 1.0.6 accepts `dstnat` only on prerouting, so output
/// chains use the numbers.
pub const BASE_CHAINS: [(&str, ChainType, Hook, i32); 8] = [
    (
        n::NAT_PREROUTING,
        ChainType::Nat,
        Hook::Prerouting,
        priority::DSTNAT,
    ),
    (
        n::NAT_OUTPUT,
        ChainType::Nat,
        Hook::Output,
        priority::DSTNAT,
    ),
    (
        n::NAT_POSTROUTING,
        ChainType::Nat,
        Hook::Postrouting,
        priority::SRCNAT,
    ),
    (
        n::FILTER_PREROUTING_PRE_DNAT,
        ChainType::Filter,
        Hook::Prerouting,
        priority::DSTNAT - 10,
    ),
    (
        n::FILTER_OUTPUT_PRE_DNAT,
        ChainType::Filter,
        Hook::Output,
        priority::DSTNAT - 10,
    ),
    (
        n::FILTER_INPUT,
        ChainType::Filter,
        Hook::Input,
        priority::FILTER,
    ),
    (
        n::FILTER_FORWARD,
        ChainType::Filter,
        Hook::Forward,
        priority::FILTER,
    ),
    (
        n::FILTER_OUTPUT,
        ChainType::Filter,
        Hook::Output,
        priority::FILTER,
    ),
];

/// A match of `key` in the fixed set or map named `set`.
pub fn set_match(key: &[Field], set: &'static str) -> Match {
    Match::InSet {
        key: key.to_vec(),
        set: Name::fixed(set),
        negate: false,
    }
}

/// `firewall-check`'s rule: a packet to a frontend with source ranges from a source outside
/// them is dropped.
pub fn firewall_check_rule() -> (Vec<Match>, Vec<Statement>) {
    (
        vec![
            set_match(&IP_KEY, n::FIREWALL_IPS),
            Match::InSet {
                key: vec![Field::Daddr, Field::L4Proto, Field::Dport, Field::Saddr],
                set: Name::fixed(n::FIREWALL_ALLOW),
                negate: true,
            },
        ],
        vec![Statement::Verdict(Verdict::Drop)],
    )
}

/// `cluster-ips-check`'s rules: a ClusterIP at a port no Service defines (nothing DNATed it)
/// is refused. TCP with a reset, everything else with ICMP port unreachable: the kernel
/// rate-limits ICMP errors per host, so a burst of connects would hang on the lost ones.
pub fn cluster_ips_check_rules() -> [(Vec<Match>, Vec<Statement>); 2] {
    let to_cluster_ip = || set_match(&[Field::Daddr], n::CLUSTER_IPS);
    [
        (
            vec![to_cluster_ip(), Match::L4Proto(Protocol::Tcp)],
            vec![Statement::Verdict(Verdict::RejectTcpReset)],
        ),
        (
            vec![to_cluster_ip()],
            vec![Statement::Verdict(Verdict::Reject)],
        ),
    ]
}

/// `reject-chain`'s rules: TCP is refused with a reset, everything else with ICMP port
/// unreachable (as `cluster-ips-check` refuses).
pub fn reject_rules() -> [(Vec<Match>, Vec<Statement>); 2] {
    [
        (
            vec![Match::L4Proto(Protocol::Tcp)],
            vec![Statement::Verdict(Verdict::RejectTcpReset)],
        ),
        (vec![], vec![Statement::Verdict(Verdict::Reject)]),
    ]
}
