//! What happens to a packet, in one form for every mode: what `explain` renders and `status`
//! compares, plan against kernel.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use serde::Serialize;

use crate::nft;

/// What happens to the packet.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub verdict: Verdict,
    /// The endpoints a new connection may reach, each with its share of new connections.
    pub endpoints: Vec<Share>,
    /// Whether the source is rewritten to the node's address; `None` when paths differ.
    pub masquerade: Option<bool>,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Sent on to one of the endpoints.
    Forwarded,
    /// No rule of ours changed it: delivered to the node (or routed on) as it is.
    Untouched,
    /// Refused at once (ICMP error or TCP reset).
    Rejected,
    /// Dropped silently: the client times out.
    Dropped,
    /// Some paths end one way, some another.
    Mixed,
}

#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Share {
    pub endpoint: SocketAddr,
    /// Of new connections, 0 to 1.
    pub share: f64,
}

/// The outcome of the nftables tracer's branches (the modes whose rules live in nf_tables).
pub fn from_branches(t: &nft::trace::Trace) -> Outcome {
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

/// Equal shares of new connections over `endpoints`: every tracer enumerates the paths a
/// random pick or a scheduler can take, each of equal weight.
pub fn shares(endpoints: BTreeSet<SocketAddr>) -> Vec<Share> {
    let n = endpoints.len() as f64;
    endpoints
        .into_iter()
        .map(|endpoint| Share {
            endpoint,
            share: 1.0 / n,
        })
        .collect()
}
