//! The eBPF mode's part of an answer: the request walked through the maps by the mode's
//! tracer, and why it ends so, in the words of socket load balancing (a backend given once,
//! when the socket connects; errors a client sees at once). A packet from outside the node
//! takes the tc programs' path instead, told by [`super::tc_lb`].

use std::net::SocketAddr;

use crate::dataplane::ebpf::diff::Maps;
use crate::dataplane::ebpf::trace::{self, Dropped, Fate, Remembered, Trace, Unseen};
use crate::dataplane::inspect::{Frontend, Origin, Packet};

/// The tracer's walk of `packet` over `maps`. `remembered` is the tc programs'
/// `kp_aff` entry for a client from outside, when the live reading found one; a socket's
/// entry is a network namespace's, not known here (the live reading lists the Service's).
pub fn trace(maps: &Maps, remembered: Option<&Remembered>, packet: &Packet) -> Trace {
    let outside = packet.origin == Origin::Outside;
    let walked = trace::Packet {
        protocol: packet.protocol,
        to: packet.to,
        outside,
        source: packet.source,
    };
    trace::trace(maps, &walked, remembered.filter(|_| outside))
}

/// Why the call ends as `t` says, first among the reasons.
pub fn reasons(t: &Trace, request: &Packet, frontend_kind: Option<Frontend>) -> Vec<String> {
    let frontend = format!(
        "{} {}",
        request.protocol.as_str().to_uppercase(),
        request.to
    );
    let mut out = Vec::new();
    let entry = t.entry.map(|e| {
        format!(
            "kp_svc entry for {frontend}: slot set {}, generation {}, {} slot{}",
            e.svc_id,
            e.generation,
            e.count,
            if e.count == 1 { "" } else { "s" }
        )
    });
    let when: Vec<&str> = t.hooks.iter().map(|h| h.when()).collect();
    match &t.fate {
        Fate::NotSeen(Unseen::Protocol) => out.push(format!(
            "the socket programs balance TCP and UDP only: {frontend} is not translated in this \
             mode"
        )),
        Fate::Untouched => out.push(format!(
            "no kp_svc entry for {frontend}: the socket keeps the address it asked for"
        )),
        Fate::Refused if t.entry.is_some_and(|e| e.undefined_port) => out.push(format!(
            "kp_svc entry for {} at port 0 (any port its Service does not define): {} fails at \
             once with ECONNREFUSED, as kube-proxy rejects it",
            request.to.ip(),
            when.join(" and ")
        )),
        Fate::Refused => out.push(format!(
            "{}: no backend, so {} fails at once with ECONNREFUSED",
            entry.unwrap_or_default(),
            when.join(" and ")
        )),
        Fate::Dropped(Dropped::SourceRange) if request.origin != Origin::Outside => out.push(format!(
            "{}, restricted to its loadBalancerSourceRanges: {} connects the socket to a backend \
             and marks it (kp_restrict), and kp_restrict_egress drops every packet it sends from \
             {}, outside those ranges (where kube-proxy drops it before the DNAT, the client \
             times out)",
            entry.unwrap_or_default(),
            when.join(" or "),
            request.source
        )),
        // The tc programs' fates: told by `tc_lb`.
        Fate::Dropped(_) => {}
        Fate::TimedOut => out.push(format!(
            "{} and the drop flag: endpoints exist but none for this traffic, so {} fails at \
             once with ETIMEDOUT (where kube-proxy drops, a client times out)",
            entry.unwrap_or_default(),
            when.join(" and ")
        )),
        Fate::Translated { slots, remembered } => {
            let choice = match t.entry.and_then(|e| e.affinity) {
                Some(timeout) => format!(
                    "ClientIP affinity ({timeout} s) per network namespace: a namespace (a pod, \
                     or the node's processes together) is given the backend it got last within \
                     the timeout (kp_aff), else a slot drawn at random"
                ),
                None => "a slot drawn at random per connect(); an unconnected UDP socket keeps \
                         one slot for all its datagrams (drawn by its cookie)"
                    .to_string(),
            };
            out.push(format!("{}: {choice}", entry.unwrap_or_default()));
            for (i, _) in slots.iter().enumerate().filter(|(_, s)| s.is_none()) {
                out.push(format!(
                    "slot {i} is missing from kp_slot: a call that draws it is not translated \
                     (the maps are inconsistent: see the drift)"
                ));
            }
            if let Some(b) = remembered {
                out.push(format!("kp_aff remembers {b} for this client"));
            }
            out.push(format!(
                "translated at {}: the socket is connected to the backend, so its packets \
                 go from the client's own address to the backend's: no per-packet NAT, no \
                 conntrack entry",
                when.join(" or ")
            ));
        }
    }
    let external = frontend_kind.is_some_and(Frontend::is_external);
    if external && matches!(t.fate, Fate::Translated { .. }) {
        out.push(
            "from this node or its pods every endpoint of the cluster is used, whatever the \
             externalTrafficPolicy, as the other modes short-circuit such traffic"
                .to_string(),
        );
    }
    out
}

/// One `kp_aff` entry of the Service, as a reason line: which backend a network namespace
/// was given, and whether that still holds.
pub fn remembered_line(backend: SocketAddr, age_seconds: u64, timeout: u32) -> String {
    if age_seconds > u64::from(timeout) {
        format!(
            "kp_aff: a network namespace was given {backend} {age_seconds} s ago, past the \
             {timeout} s timeout: its next connect() draws again"
        )
    } else {
        format!(
            "kp_aff: a network namespace was given {backend} {age_seconds} s ago: its \
             connect() calls within {timeout} s of the last reach it again"
        )
    }
}
