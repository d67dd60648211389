//! Walks one family's planned IPVS state with the first packet of a connection and says what
//! happens to it: the helper rules' hooks through the nftables tracer, and IPVS's own part in
//! between, where the kernel runs it.
//!
//! Pure. Backs the packet-flow tests here and `explain`. The kernel's order, which the helper
//! rules are placed around (see [`rules`](super::rules)):
//! - from an interface: `prerouting` (our treatment marks the connection); to a local address
//!   (a node address, or one bound on `kube-ipvs0`) then `input` (our guards, source ranges
//!   and the VIP port filter at priority 0), then IPVS at `LOCAL_IN` (99), which picks a
//!   destination and sends the packet on, rewritten, to `postrouting` (masquerade); to any
//!   other address `forward` and `postrouting`, without IPVS;
//! - from the node itself: `output` (our treatment at -100 and guards at -110), IPVS at
//!   `LOCAL_OUT` (-98), `postrouting`.
//!
//! IPVS's choice is not drawn but enumerated: one branch per destination (persistence is
//! taken as empty, the client's first connection). A virtual service without destinations
//! answers with an ICMP error (a [`Fate::Reject`]); the helper rules' guards act before it
//! does. A packet to a local address that no virtual service has is delivered to the node.
//! IPVS sends the packet it rewrote through `LOCAL_OUT` once more; our output chains match
//! only frontends, which it no longer carries, so that pass is not walked.

use std::net::{IpAddr, SocketAddr};

use super::backend::netlink::ServiceKey;
use super::desired::Desired;
use crate::nft::Ruleset;
use crate::nft::ruleset::Hook;
use crate::nft::trace::{Fate, Flight, Origin, Packet, Trace, through_hook};

/// Traces `packet` through `desired` (one family's plan) and its helper table `rules`.
/// `node` are the node's own addresses; the planned service addresses are local too.
pub fn trace(desired: &Desired, rules: &Ruleset, packet: &Packet, node: &[IpAddr]) -> Trace {
    // The service addresses bound on kube-ipvs0 are local too; of them only the packet's own
    // source and destination can be asked about (DNAT leads to endpoints, masquerade to the
    // node's addresses), so only those are added: a copy of every ClusterIP per trace would
    // make each trace grow with the number of Services.
    let bound = |ip: &IpAddr| {
        desired.addresses.cluster_ips.contains(ip) || desired.addresses.external.contains(ip)
    };
    let mut local: Vec<IpAddr> = node.to_vec();
    local.extend([packet.src, packet.dst].into_iter().filter(|ip| bound(ip)));
    let hook = |hook: Hook, flights: Flights| -> Flights {
        flights
            .into_iter()
            .flat_map(|(f, fate)| match fate {
                Fate::Accept => through_hook(rules, packet, &local, hook, f),
                other => vec![(f, other)],
            })
            .collect()
    };
    let start = vec![(Flight::start(packet), Fate::Accept)];
    let ended = match packet.origin {
        Origin::Host => {
            let out = hook(Hook::Output, start);
            hook(Hook::Postrouting, schedule(desired, packet, out).0)
        }
        Origin::Interface(_) => {
            let mut ended = Vec::new();
            for (f, fate) in hook(Hook::Prerouting, start) {
                let one = vec![(f.clone(), fate)];
                if fate != Fate::Accept {
                    ended.extend(one);
                } else if is_local(&local, &f.dst) {
                    let (sent, delivered) = schedule(desired, packet, hook(Hook::Input, one));
                    ended.extend(hook(Hook::Postrouting, sent));
                    ended.extend(delivered);
                } else {
                    ended.extend(hook(Hook::Postrouting, hook(Hook::Forward, one)));
                }
            }
            ended
        }
    };
    Trace {
        branches: ended.into_iter().map(|(f, fate)| f.branch(fate)).collect(),
    }
}

/// Packets in flight, each with how it fared so far.
type Flights = Vec<(Flight, Fate)>;

fn is_local(local: &[IpAddr], ip: &IpAddr) -> bool {
    ip.is_loopback() || local.contains(ip)
}

/// IPVS's part: each accepted packet to a virtual service goes to every one of its
/// destinations (first list: sent on); one to an address and port no virtual service has
/// stays the node's (second list: delivered, or sent on locally from the node).
fn schedule(desired: &Desired, packet: &Packet, flights: Flights) -> (Flights, Flights) {
    let mut sent = Vec::new();
    let mut delivered = Vec::new();
    for (f, fate) in flights {
        if fate != Fate::Accept {
            sent.push((f, fate));
            continue;
        }
        let key = ServiceKey::Address {
            protocol: packet.protocol.into(),
            address: SocketAddr::new(f.dst, f.dport),
        };
        let Some(vs) = desired.services.get(&key) else {
            match packet.origin {
                Origin::Host => sent.push((f, fate)),
                Origin::Interface(_) => delivered.push((f, fate)),
            }
            continue;
        };
        let usable: Vec<_> = vs.destinations.iter().filter(|d| d.weight > 0).collect();
        if usable.is_empty() {
            sent.push((f, Fate::Reject));
            continue;
        }
        for d in usable {
            let mut f = f.clone();
            f.dnat(d.address.ip(), d.address.port());
            sent.push((f, Fate::Accept));
        }
    }
    (sent, delivered)
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
