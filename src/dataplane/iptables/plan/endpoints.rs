//! Endpoint choice inside a `KUBE-SVC-` / `KUBE-SVL-` chain, and the `KUBE-SEP-` chains.
//!
//! Upstream's scheme, in our words: with ClientIP affinity, one rule per endpoint first sends a
//! client seen within the timeout back to the endpoint it had (the `recent` list named after the
//! endpoint's chain, keyed on the source address only). Then rule `i` of `n` jumps to endpoint
//! `i` with probability `1/(n-i)` (the last one always), which picks each endpoint with equal
//! chance. An endpoint's chain marks traffic from the endpoint itself for masquerade (hairpin),
//! records the client for affinity, and DNATs. Large-cluster mode leaves out the per-endpoint
//! comments.

use ipnet::IpNet;

use super::Builder;
use crate::cluster::model::{Endpoint, ServicePort};
use crate::dataplane::iptables::names::{self as n, ChainName};
use crate::dataplane::iptables::ruleset::{Comment, Match, Rule, Table, Target};

/// Fills `chain` with the choice among `endpoints` and makes sure each endpoint's chain exists.
pub(super) fn add(b: &mut Builder, port: &ServicePort, chain: &ChainName, endpoints: &[&Endpoint]) {
    b.chain(Table::Nat, chain);
    let name = port.name.to_string();
    let seps: Vec<ChainName> = endpoints
        .iter()
        .map(|ep| n::endpoint_chain(&port.name, ep))
        .collect();
    let comment = |ep: &Endpoint| -> Vec<Match> {
        if b.large {
            vec![]
        } else {
            vec![Match::Comment(Comment::sanitised(&format!(
                "{name} -> {ep}"
            )))]
        }
    };
    let mut rules = Vec::new();
    if let Some(seconds) = port.affinity_timeout_seconds {
        for (ep, sep) in endpoints.iter().zip(&seps) {
            let mut m = comment(ep);
            m.push(Match::RecentCheck {
                name: sep.clone(),
                seconds,
            });
            rules.push(Rule::new(m, Target::Jump(sep.clone())));
        }
    }
    let count = endpoints.len() as u32;
    for (i, (ep, sep)) in endpoints.iter().zip(&seps).enumerate() {
        let mut m = comment(ep);
        let remaining = count - i as u32;
        if remaining > 1 {
            m.push(Match::Probability { remaining });
        }
        rules.push(Rule::new(m, Target::Jump(sep.clone())));
    }
    b.chain(Table::Nat, chain).extend(rules);

    let large = b.large;
    let port_comment = Match::Comment(Comment::sanitised(&name));
    let tag = || {
        if large {
            vec![]
        } else {
            vec![port_comment.clone()]
        }
    };
    for (ep, sep) in endpoints.iter().zip(seps) {
        let chain = b.chain(Table::Nat, &sep);
        if !chain.is_empty() {
            // Already made for the other endpoint list of this service port.
            continue;
        }
        let proto = port.name.protocol;
        let mut hairpin = vec![Match::Source {
            net: IpNet::from(ep.ip),
            negate: false,
        }];
        hairpin.extend(tag());
        let mut dnat = vec![Match::Protocol(proto)];
        dnat.extend(tag());
        if port.affinity_timeout_seconds.is_some() {
            dnat.push(Match::RecentSet { name: sep.clone() });
        }
        let rules = vec![
            Rule::new(hairpin, Target::Jump(ChainName::fixed(n::MARK_MASQ))),
            Rule::new(
                dnat,
                Target::Dnat {
                    ip: ep.ip,
                    port: ep.port,
                },
            ),
        ];
        chain.extend(rules);
    }
}
