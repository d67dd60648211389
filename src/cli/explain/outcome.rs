//! The packet walked through the mode's rules by that mode's tracer, and what came out, in
//! one form for every mode.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use super::source::Source;
use super::{Outcome, Request, Rules, Share, Verdict};
use crate::dataplane::ebpf::trace::{Fate, Hook};
use crate::dataplane::{iptables, ipvs, userspace};
use crate::nft;

/// Walks the packet through the rules with the mode's tracer.
pub(super) fn walk(rules: Rules<'_>, request: &Request, source: &Source) -> Outcome {
    let nft_packet = || nft::trace::Packet {
        protocol: request.protocol,
        src: source.address,
        dst: request.to.ip(),
        dport: request.to.port(),
        origin: match &source.interface {
            None => nft::trace::Origin::Host,
            Some(i) => nft::trace::Origin::Interface(i.clone()),
        },
    };
    match rules {
        Rules::Ebpf { maps, remembered } => {
            let t = super::socket_lb::trace(maps, remembered, request, source);
            let verdict = match &t.fate {
                Fate::Translated { .. } if t.has_missing_slots() => Verdict::Mixed,
                Fate::Translated { .. } => Verdict::Forwarded,
                Fate::Refused => Verdict::Rejected,
                Fate::TimedOut | Fate::Dropped(_) => Verdict::Dropped,
                Fate::Untouched | Fate::NotSeen(_) => Verdict::Untouched,
            };
            // A socket is the backend's: no packet is rewritten. From outside the tc
            // program rewrites the source to the node's when the entry says so.
            let snat = t.hooks.contains(&Hook::TcIngress) && t.entry.is_some_and(|e| e.snat);
            Outcome {
                verdict,
                endpoints: t
                    .backends()
                    .into_iter()
                    .map(|(endpoint, share)| Share { endpoint, share })
                    .collect(),
                masquerade: Some(snat),
            }
        }
        Rules::Nftables(r) => from_branches(&nft::trace::trace(r, &nft_packet(), &source.local)),
        Rules::Ipvs { desired, tables } => from_branches(&ipvs::trace::trace(
            desired,
            tables,
            &nft_packet(),
            &source.local,
        )),
        Rules::Userspace { tables, relay } => from_branches(&userspace::trace::trace(
            tables,
            relay,
            &nft_packet(),
            &source.local,
        )),
        Rules::Iptables(r) => {
            let p = iptables::trace::Packet {
                protocol: request.protocol,
                source: source.address,
                destination: request.to.ip(),
                port: request.to.port(),
                from_node: source.interface.is_none(),
                in_interface: source.interface.clone(),
            };
            let t = iptables::trace::trace(r, &p, &source.local);
            let (verdict, endpoints) = match t.outcome {
                iptables::trace::Outcome::Endpoints(set) => {
                    let eps: BTreeSet<SocketAddr> =
                        set.iter().filter_map(|e| e.parse().ok()).collect();
                    (Verdict::Forwarded, eps)
                }
                iptables::trace::Outcome::Reject => (Verdict::Rejected, BTreeSet::new()),
                iptables::trace::Outcome::Drop => (Verdict::Dropped, BTreeSet::new()),
                iptables::trace::Outcome::Untouched => (Verdict::Untouched, BTreeSet::new()),
            };
            Outcome {
                verdict,
                endpoints: shares(endpoints),
                masquerade: Some(t.masquerade),
            }
        }
    }
}

fn from_branches(t: &nft::trace::Trace) -> Outcome {
    use nft::trace::Fate;
    let endpoints: BTreeSet<SocketAddr> = t
        .endpoints()
        .into_iter()
        .map(|(ip, port)| SocketAddr::new(ip, port))
        .collect();
    let verdict = match t.fate() {
        Some(Fate::Accept) if endpoints.is_empty() => Verdict::Untouched,
        Some(Fate::Accept) if t.branches.iter().all(|b| b.dnat.is_some()) => Verdict::Forwarded,
        Some(Fate::Reject) => Verdict::Rejected,
        Some(Fate::Drop) => Verdict::Dropped,
        _ => Verdict::Mixed,
    };
    Outcome {
        verdict,
        endpoints: shares(endpoints),
        masquerade: t.masquerade(),
    }
}

fn shares(endpoints: BTreeSet<SocketAddr>) -> Vec<Share> {
    let n = endpoints.len() as f64;
    endpoints
        .into_iter()
        .map(|endpoint| Share {
            endpoint,
            share: 1.0 / n,
        })
        .collect()
}
