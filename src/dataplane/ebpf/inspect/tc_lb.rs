//! The eBPF mode's part of an answer for a packet from outside the node: why the tc programs'
//! walk ends as it does, in their words (a flow rewritten per packet at tc ingress, the source
//! rewritten or kept, drops and ICMP refusals the client meets).
//!
//! Pure: reads the trace only. The Service's own reasons (policies, endpoints, source ranges
//! as the model has them) come from the shared reasons, after these.

use crate::dataplane::ebpf::trace::{Dropped, Fate, Trace};
use crate::dataplane::inspect::Packet;

/// Why `request` ends as `t` says, first among the reasons. `cluster_ip`: the
/// destination is a ClusterIP (reached from outside: the Service range routed to this node).
pub fn reasons(t: &Trace, request: &Packet, cluster_ip: bool) -> Vec<String> {
    let frontend = format!(
        "{} {}",
        request.protocol.as_str().to_uppercase(),
        request.to
    );
    let client = request.source;
    let mut out = Vec::new();
    let Some(e) = t.entry else {
        out.push(match t.fate {
            Fate::NotSeen(_) => format!(
                "the tc programs balance TCP and UDP only: {frontend} from outside is not \
                 translated in this mode"
            ),
            _ => format!(
                "tc ingress: no kp_svc entry of scope external for {frontend}: the packet goes \
                 on to the node's own stack unchanged"
            ),
        });
        return out;
    };
    out.push(format!(
        "tc ingress on the node's interfaces (kp_tc_ingress): kp_svc entry of scope external \
         for {frontend}: slot set {}, generation {}, {} slot{}",
        e.svc_id,
        e.generation,
        e.count,
        if e.count == 1 { "" } else { "s" }
    ));
    if let Some(ranges) = &t.source_ranges {
        let list: Vec<String> = ranges.iter().map(ToString::to_string).collect();
        let list = if list.is_empty() {
            "no range".to_string()
        } else {
            list.join(", ")
        };
        let verdict = if t.fate == Fate::Dropped(Dropped::SourceRange) {
            format!("{client} is in none of them: the packet is dropped")
        } else {
            format!("{client} is in one of them")
        };
        out.push(format!(
            "kp_src restricts {frontend} to its loadBalancerSourceRanges ({list}), checked \
             first: {verdict}"
        ));
    }
    match &t.fate {
        Fate::Refused if e.undefined_port => out.push(format!(
            "the entry is {}'s at port 0 (any port its Service does not define): the program \
             answers with an ICMP port unreachable, as kube-proxy rejects it",
            request.to.ip()
        )),
        Fate::Refused => out.push(
            "no backend: the program answers with an ICMP port unreachable, so the client's \
             connect() is refused (ECONNREFUSED) and a UDP sender sees an error"
                .to_string(),
        ),
        Fate::Dropped(Dropped::NoLocalEndpoint) => out.push(
            "no backend and the drop flag: endpoints exist but none on this node for \
             externalTrafficPolicy Local, so the packet is dropped (the client times out)"
                .to_string(),
        ),
        Fate::Translated { slots, .. } => {
            out.push(match e.affinity {
                Some(timeout) => format!(
                    "ClientIP affinity ({timeout} s) by client address: {client} is given the \
                     backend it got last within the timeout (kp_aff, keyed by a hash of its \
                     address), else a slot drawn at random"
                ),
                None => "a slot drawn at random per new flow; the flow's later packets and its \
                         replies follow kp_flow"
                    .to_string(),
            });
            for (i, _) in slots.iter().enumerate().filter(|(_, s)| s.is_none()) {
                out.push(format!(
                    "slot {i} is missing from kp_slot: a flow that draws it goes on to the \
                     node's stack untranslated (the maps are inconsistent: see the drift)"
                ));
            }
            // A remembered backend is told by the live reading's affinity line, which found it.
            out.push(if cluster_ip {
                "a ClusterIP reached from outside, by a client that is not a pod of this node: \
                 the source is rewritten to the node's address (the one the kernel routes from \
                 towards the backend) so replies return through this node, where kp_flow turns \
                 them back"
                    .to_string()
            } else if e.snat {
                "externalTrafficPolicy Cluster: the source is rewritten to the node's address \
                 (the one the kernel routes from towards the backend) so replies return through \
                 this node, where kp_flow turns them back"
                    .to_string()
            } else {
                "externalTrafficPolicy Local: the client's address is kept; the backend runs on \
                 this node, and its replies get the frontend back as their source from kp_flow"
                    .to_string()
            });
            out.push(
                "rewritten at tc ingress and sent on by the program itself (route lookup, then \
                 redirect): netfilter and conntrack do not see the translation"
                    .to_string(),
            );
        }
        Fate::Dropped(Dropped::SourceRange)
        | Fate::Untouched
        | Fate::NotSeen(_)
        | Fate::TimedOut => {}
    }
    out
}
