//! The fixed part of every redirect table: base chains, the sets and maps the planner fills,
//! and the rules that read them. It depends on the settings and the node only, never on
//! Services, so a diff between two syncs never touches it.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{RELAY_CHECK, RELAY_PORTS, SERVICE_LISTENERS, SHORT_CIRCUIT};
use crate::cluster::IpFamily;
use crate::dataplane::nft_table::names as n;
use crate::dataplane::nft_table::skeleton;
use crate::nft::Name;
use crate::nft::ruleset::{
    CtState, DataKind, Field, Kind, Match, Ruleset, Set, SetDecl, Statement, Verdict,
};

/// The chains and the (empty) maps every table has. `from_local_pod`: how this family's pods
/// are recognised, if they are; `bind`: `--bind-address` when it is of this family and
/// specific (the only address the listeners accept on).
pub(super) fn add(rules: &mut Ruleset, from_local_pod: Option<Match>, bind: Option<IpAddr>) {
    use Kind::{Addr, Port, Proto};
    let decl = |data, comment: &str| SetDecl::plain(&[Addr, Proto, Port], data, comment);
    rules.sets.insert(
        Name::fixed(SERVICE_LISTENERS),
        Set::new(decl(
            DataKind::Values(vec![Addr, Port]),
            "frontend to relay listener",
        )),
    );
    rules.sets.insert(
        Name::fixed(SHORT_CIRCUIT),
        Set::new(decl(
            DataKind::Values(vec![Addr, Port]),
            "external frontend to the cluster-wide listener, from inside the node",
        )),
    );
    rules.sets.insert(
        Name::fixed(n::NO_ENDPOINT_SERVICES),
        Set::new(decl(DataKind::Verdict, "frontends without endpoints")),
    );
    rules.sets.insert(
        Name::fixed(n::CLUSTER_IPS),
        Set::new(SetDecl {
            key: vec![Addr],
            ..decl(DataKind::None, "every ClusterIP")
        }),
    );
    rules.sets.insert(
        Name::fixed(RELAY_PORTS),
        Set::new(SetDecl {
            key: vec![Proto, Port],
            ..decl(DataKind::None, "relay listener ports")
        }),
    );
    rules.sets.insert(
        Name::fixed(n::FIREWALL_IPS),
        Set::new(decl(DataKind::None, "frontends with source ranges")),
    );
    rules.sets.insert(
        Name::fixed(n::FIREWALL_ALLOW),
        Set::new(SetDecl {
            key: vec![Addr, Proto, Port, Addr],
            interval: true,
            ..decl(DataKind::None, "allowed sources per frontend")
        }),
    );
    // The shared base chains but the masquerading one: the relay dials from the node.
    let chains: Vec<_> = skeleton::BASE_CHAINS
        .into_iter()
        .filter(|(name, ..)| *name != n::NAT_POSTROUTING)
        .collect();
    rules.add_base_chains(&chains);
    let dnat = |map| {
        vec![Statement::DnatMap {
            key: skeleton::IP_KEY.to_vec(),
            map: Name::fixed(map),
        }]
    };
    if let Some(m) = from_local_pod {
        rules.push(n::NAT_PREROUTING, vec![m], dnat(SHORT_CIRCUIT));
    }
    rules.push(n::NAT_PREROUTING, vec![], dnat(SERVICE_LISTENERS));
    for chain in [n::FILTER_PREROUTING_PRE_DNAT, n::FILTER_OUTPUT_PRE_DNAT] {
        rules.push(
            chain,
            vec![Match::CtState(CtState::New)],
            vec![Statement::Verdict(Verdict::Jump(Name::fixed(
                n::FIREWALL_CHECK,
            )))],
        );
    }
    let (matches, statements) = skeleton::firewall_check_rule();
    rules.push(n::FIREWALL_CHECK, matches, statements);
    rules.push(n::NAT_OUTPUT, vec![], dnat(SHORT_CIRCUIT));
    rules.push(n::NAT_OUTPUT, vec![], dnat(SERVICE_LISTENERS));
    // The node's own traffic to one of its own addresses (a NodePort, a local externalIP) is
    // refused where it arrives, in the input hook: refused in the output hook, a UDP send
    // would fail with EPERM rather than find the port unreachable.
    rules.push(
        n::FILTER_OUTPUT,
        vec![Match::FibLocal { source: false }],
        vec![Statement::Verdict(Verdict::Return)],
    );
    let new = || vec![Match::CtState(CtState::New)];
    for chain in [n::FILTER_INPUT, n::FILTER_FORWARD, n::FILTER_OUTPUT] {
        rules.push(
            chain,
            new(),
            vec![Statement::VerdictMap {
                key: skeleton::IP_KEY.to_vec(),
                map: Name::fixed(n::NO_ENDPOINT_SERVICES),
            }],
        );
    }
    // A ClusterIP that nothing above sent to a listener (a port the Service does not define)
    // is refused at once, as the nftables mode refuses it, rather than routed on.
    for chain in [n::FILTER_FORWARD, n::FILTER_OUTPUT] {
        rules.push(
            chain,
            new(),
            vec![Statement::Verdict(Verdict::Jump(Name::fixed(
                n::CLUSTER_IPS_CHECK,
            )))],
        );
    }
    for (matches, statements) in skeleton::cluster_ips_check_rules() {
        rules.push(n::CLUSTER_IPS_CHECK, matches, statements);
    }
    relay_check(rules, bind);
    for (matches, statements) in skeleton::reject_rules() {
        rules.push(n::REJECT_CHAIN, matches, statements);
    }
}

/// A relay listener is reached only through the redirect: a new connection to a listener's
/// port that no DNAT sent there (a client dialling the node's address at that port, from
/// outside, a pod or the node itself, loopback included) is refused as if nothing listened.
/// Without this, a listener bound to the unspecified address would serve anyone who found its
/// port, past `loadBalancerSourceRanges` and whatever frontends the Service has. The check
/// runs in the input hook, after the DNAT, where a redirected connection's conntrack entry
/// says it was destination-NATed. With a specific `bind` the listeners accept on that address
/// only, so the check holds to it and leaves other programs' sockets on the same port number
/// at other addresses (`--nodeport-localhost`'s on 127.0.0.1) alone.
fn relay_check(rules: &mut Ruleset, bind: Option<IpAddr>) {
    let mut matches = vec![Match::CtState(CtState::New)];
    if let Some(ip) = bind {
        let full = match IpFamily::of(&ip) {
            IpFamily::V4 => 32,
            IpFamily::V6 => 128,
        };
        matches.push(Match::Net {
            field: Field::Daddr,
            net: IpNet::new(ip, full).expect("a full-length prefix"),
            negate: false,
        });
    }
    matches.push(Match::InSet {
        key: vec![Field::L4Proto, Field::Dport],
        set: Name::fixed(RELAY_PORTS),
        negate: false,
    });
    rules.push(
        n::FILTER_INPUT,
        matches,
        vec![Statement::Verdict(Verdict::Jump(Name::fixed(RELAY_CHECK)))],
    );
    rules.push(
        RELAY_CHECK,
        vec![Match::CtStatusDnat],
        vec![Statement::Verdict(Verdict::Return)],
    );
    rules.push(
        RELAY_CHECK,
        vec![],
        vec![Statement::Verdict(Verdict::Goto(Name::fixed(
            n::REJECT_CHAIN,
        )))],
    );
}
