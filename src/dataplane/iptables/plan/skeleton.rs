//! The fixed chains every family has, their fixed rules, and the jumps from built-in chains.
//!
//! Upstream's layout, in our words:
//! - nat: PREROUTING and OUTPUT jump to `KUBE-SERVICES`, whose last rule sends NodePort
//!   destinations to `KUBE-NODEPORTS`; POSTROUTING jumps to `KUBE-POSTROUTING`, which masquerades
//!   packets carrying the mark `KUBE-MARK-MASQ` sets, and clears the mark first so a packet that
//!   goes through the stack again is not masqueraded twice.
//! - filter: new connections from INPUT, FORWARD and OUTPUT pass `KUBE-PROXY-FIREWALL`
//!   (loadBalancerSourceRanges); FORWARD and OUTPUT pass `KUBE-SERVICES` and INPUT and FORWARD
//!   `KUBE-EXTERNAL-SERVICES` (frontends without endpoints); INPUT passes `KUBE-NODEPORTS`
//!   (health-check node ports accepted); FORWARD passes `KUBE-FORWARD` (INVALID dropped, marked
//!   and established Service traffic accepted).
//! - mangle, nat, filter: the empty `KUBE-PROXY-CANARY`.
//! - With localhost NodePorts (IPv4), `KUBE-FIREWALL` from INPUT and OUTPUT drops packets to
//!   127.0.0.0/8 from elsewhere that conntrack did not DNAT (CVE-2020-8558).

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use super::Builder;
use crate::cluster::IpFamily;
use crate::dataplane::iptables::names::{self as n, ChainName, comments};
use crate::dataplane::iptables::ruleset::{Builtin, Comment, Match, Rule, Table, Target};
use crate::dataplane::node::NodePortMatch;

const NEW: &str = "NEW";

fn comment(text: &str) -> Match {
    Match::Comment(Comment::sanitised(text))
}

fn new_conn() -> Match {
    Match::CtState {
        states: NEW,
        negate: false,
    }
}

fn jump(chain: &'static str) -> Target {
    Target::Jump(ChainName::fixed(chain))
}

pub(super) fn begin(b: &mut Builder) {
    let mark = b.cfg.node.masquerade_mark;
    for table in Table::ALL {
        b.chain(table, &ChainName::fixed(n::CANARY));
    }

    // nat
    let nat = Table::Nat;
    for builtin in [Builtin::Prerouting, Builtin::Output] {
        b.rules.table_mut(nat).jumps.push((
            builtin,
            Rule::new(vec![comment(comments::SERVICE_PORTALS)], jump(n::SERVICES)),
        ));
    }
    b.rules.table_mut(nat).jumps.push((
        Builtin::Postrouting,
        Rule::new(vec![comment(comments::POSTROUTING)], jump(n::POSTROUTING)),
    ));
    b.chain(nat, &ChainName::fixed(n::SERVICES));
    b.chain(nat, &ChainName::fixed(n::NODEPORTS));
    let post = ChainName::fixed(n::POSTROUTING);
    b.push(
        nat,
        &post,
        Rule::new(vec![Match::Mark { mark, negate: true }], Target::Return),
    );
    b.push(nat, &post, Rule::new(vec![], Target::XorMark(mark)));
    b.push(
        nat,
        &post,
        Rule::new(vec![comment(comments::SNAT)], Target::Masquerade),
    );
    b.push(
        nat,
        &ChainName::fixed(n::MARK_MASQ),
        Rule::new(vec![], Target::OrMark(mark)),
    );

    // filter
    let filter = Table::Filter;
    let firewall = || {
        Rule::new(
            vec![new_conn(), comment(comments::LB_FIREWALL)],
            jump(n::PROXY_FIREWALL),
        )
    };
    let services = || {
        Rule::new(
            vec![new_conn(), comment(comments::SERVICE_PORTALS)],
            jump(n::SERVICES),
        )
    };
    let external = || {
        Rule::new(
            vec![new_conn(), comment(comments::EXTERNAL_PORTALS)],
            jump(n::EXTERNAL_SERVICES),
        )
    };
    let localnet = b.node_ports.loopback();
    let mut jumps = vec![
        (Builtin::Input, firewall()),
        (
            Builtin::Input,
            Rule::new(
                vec![comment(comments::HEALTH_CHECK_PORTS)],
                jump(n::NODEPORTS),
            ),
        ),
        (Builtin::Input, external()),
        (Builtin::Forward, firewall()),
        (
            Builtin::Forward,
            Rule::new(vec![comment(comments::FORWARDING)], jump(n::FORWARD)),
        ),
        (Builtin::Forward, services()),
        (Builtin::Forward, external()),
        (Builtin::Output, firewall()),
        (Builtin::Output, services()),
    ];
    if localnet {
        jumps.push((Builtin::Input, Rule::new(vec![], jump(n::FIREWALL))));
        jumps.push((Builtin::Output, Rule::new(vec![], jump(n::FIREWALL))));
    }
    b.rules.table_mut(filter).jumps = jumps;
    for chain in [
        n::SERVICES,
        n::EXTERNAL_SERVICES,
        n::NODEPORTS,
        n::PROXY_FIREWALL,
    ] {
        b.chain(filter, &ChainName::fixed(chain));
    }
    let forward = ChainName::fixed(n::FORWARD);
    if b.cfg.node.drop_invalid {
        b.push(
            filter,
            &forward,
            Rule::new(
                vec![Match::CtState {
                    states: "INVALID",
                    negate: false,
                }],
                Target::Drop,
            ),
        );
    }
    b.push(
        filter,
        &forward,
        Rule::new(
            vec![
                comment(comments::FORWARDING),
                Match::Mark {
                    mark,
                    negate: false,
                },
            ],
            Target::Accept,
        ),
    );
    b.push(
        filter,
        &forward,
        Rule::new(
            vec![
                comment(comments::FORWARDING_CONNTRACK),
                Match::CtState {
                    states: "RELATED,ESTABLISHED",
                    negate: false,
                },
            ],
            Target::Accept,
        ),
    );
    if localnet {
        let loopback = loopback_net(IpFamily::V4);
        b.push(
            filter,
            &ChainName::fixed(n::FIREWALL),
            Rule::new(
                vec![
                    Match::Destination {
                        net: loopback,
                        negate: false,
                    },
                    Match::Source {
                        net: loopback,
                        negate: true,
                    },
                    comment(comments::LOCALNET),
                    Match::CtState {
                        states: "RELATED,ESTABLISHED,DNAT",
                        negate: true,
                    },
                ],
                Target::Drop,
            ),
        );
    }
}

/// The last rules of nat `KUBE-SERVICES`: NodePort destinations to `KUBE-NODEPORTS`.
pub(super) fn finish(b: &mut Builder) {
    let services = ChainName::fixed(n::SERVICES);
    let last = || comment(comments::NODEPORTS_LAST);
    let loopback = loopback_net(b.family);
    let rules = match b.node_ports.clone() {
        NodePortMatch::All { loopback: allowed } => {
            let mut m = vec![
                last(),
                Match::AddrTypeLocal {
                    source: false,
                    negate: false,
                },
            ];
            if !allowed {
                m.push(Match::Destination {
                    net: loopback,
                    negate: true,
                });
            }
            vec![Rule::new(m, jump(n::NODEPORTS))]
        }
        NodePortMatch::Addresses {
            addrs,
            loopback: allowed,
        } => {
            let mut nets: Vec<IpNet> = addrs.into_iter().map(IpNet::from).collect();
            if allowed {
                nets.push(loopback);
            }
            nets.into_iter()
                .map(|net| {
                    Rule::new(
                        vec![Match::Destination { net, negate: false }, last()],
                        jump(n::NODEPORTS),
                    )
                })
                .collect()
        }
    };
    for r in rules {
        b.push(Table::Nat, &services, r);
    }
}

/// 127.0.0.0/8 or ::1/128.
fn loopback_net(family: IpFamily) -> IpNet {
    match family {
        IpFamily::V4 => IpNet::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
        IpFamily::V6 => IpNet::new(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST), 128),
    }
    .expect("valid prefix")
}
