//! Targets for what the kernel answers on netlink sockets to shared code: nf_tables dumps and
//! notifications, rtnetlink addresses (with each mode's part: the IPVS mode's links and
//! addresses) and conntrack dumps; the IPVS and sock_diag targets are their modes' own. The
//! input is what the socket receives, one or more messages; each is read by every decoder the
//! proxy applies to a message of its protocol, past the dump state machine that picks a
//! request's answers (its sequence number is the first message's, as a captured answer's is).

use std::collections::BTreeMap;

use crate::cluster::IpFamily;
use crate::cluster::source::interfaces;
use crate::conntrack;
use crate::dataplane::modes;
use crate::dataplane::monitor::Events;
use crate::netlink::ack::Ack;
use crate::netlink::attr::find_str;
use crate::netlink::dump::Dump;
use crate::netlink::message::{Message, messages};
use crate::netlink::nfnetlink;
use crate::nft::backend::netlink::dump::{self, SetElements};
use crate::nft::backend::netlink::uapi;
use crate::nft::{Family, Ruleset, diff, rebuild, render};

/// The sequence number the answer in `datagram` is read for.
fn first_seq(datagram: &[u8]) -> u32 {
    messages(datagram).next().map_or(0, |m| m.seq)
}

/// The messages of `datagram` that a dump's state machine hands on as objects; every message
/// is read as an acknowledgement too.
pub(crate) fn answers(datagram: &[u8]) -> Vec<Message<'_>> {
    let mut answer = Dump::new(first_seq(datagram));
    messages(datagram)
        .filter(|m| {
            let _ = Ack::of(m);
            answer.receive(m)
        })
        .collect()
}

/// The bodies of the nf_tables messages of `datagram`, by message type.
#[derive(Default)]
struct NftMessages<'a> {
    tables: Vec<&'a [u8]>,
    chains: Vec<Vec<u8>>,
    sets: Vec<Vec<u8>>,
    rules: Vec<Vec<u8>>,
    /// `GETSETELEM` answers, by the set they name.
    elements: BTreeMap<&'a str, Vec<Vec<u8>>>,
}

impl<'a> NftMessages<'a> {
    fn of(datagram: &'a [u8]) -> NftMessages<'a> {
        let mut out = NftMessages::default();
        for m in messages(datagram) {
            if nfnetlink::subsystem(m.kind) != uapi::SUBSYS {
                continue;
            }
            match nfnetlink::message(m.kind) {
                uapi::msg::NEWTABLE => out.tables.push(m.body),
                uapi::msg::NEWCHAIN => out.chains.push(m.body.to_vec()),
                uapi::msg::NEWSET => out.sets.push(m.body.to_vec()),
                uapi::msg::NEWRULE => out.rules.push(m.body.to_vec()),
                uapi::msg::NEWSETELEM => {
                    let set = find_str(nfnetlink::attributes(m.body), uapi::elem::LIST_SET);
                    let bodies = out.elements.entry(set.unwrap_or("")).or_default();
                    bodies.push(m.body.to_vec());
                }
                _ => {}
            }
        }
        out
    }
}

/// nf_tables dump answers (tables, chains, sets, elements, rules in any order, as one
/// datagram), read into our ruleset for each family as adoption and verification read them,
/// the result diffed and rendered as a sync would; and the same bytes as monitor
/// notifications.
pub fn nftables(datagram: &[u8]) {
    let _ = answers(datagram);
    let found = NftMessages::of(datagram);
    for body in &found.tables {
        let _ = dump::table_summary(body);
    }
    for body in &found.chains {
        let _ = dump::base_chain_summary(body);
    }
    for family in [Family::Ip, Family::Ip6] {
        let lookup =
            |name: &str| SetElements::Answers(found.elements.get(name).map_or(&[][..], |b| &b[..]));
        let parsed = dump::read(family, &found.chains, &found.rules, &found.sets, &lookup);
        for body in &found.sets {
            let _ = dump::wants_elements(body);
            if let Some((name, decl, _count)) = dump::set_summary(family, body)
                && let Some(bodies) = found.elements.get(name)
            {
                let _ = dump::keys(family, &decl, bodies);
            }
        }
        let _ = render(&diff(&parsed.ruleset, &Ruleset::empty(family)));
        let _ = render(&rebuild(&parsed.ruleset));
    }
    for watch in modes::ALL.into_iter().filter_map(|m| modes::of(m).watch()) {
        let _ = Events::new(watch).datagram(datagram);
    }
}

/// rtnetlink address answers and notifications, as the host's addresses are read.
pub fn rtnetlink(datagram: &[u8]) {
    for m in messages(datagram) {
        let _ = interfaces::address(&m);
    }
    let _ = interfaces::addresses_in(datagram, &mut Dump::new(first_seq(datagram)), None);
}

/// A conntrack table dump, for each family.
pub fn conntrack(datagram: &[u8]) {
    for family in IpFamily::ALL {
        let (mut dump, _request) = conntrack::exchange::Dump::start(family, first_seq(datagram));
        let _ = dump.receive(datagram);
        let _ = dump.finish();
    }
}
