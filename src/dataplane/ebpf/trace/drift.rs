//! How the pinned maps differ from a plan, told as a program would meet the difference.
//!
//! Pure: no I/O, never fails. Both sides are resolved to what a program reads (flags and the
//! backends of each slot in order), so slot set ids and generations, the kernel's business,
//! are never compared; `kp_src` is compared entry by entry, per frontend.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use super::{Entry, Maps, planned_maps};
use crate::dataplane::ebpf::diff;
use crate::dataplane::ebpf::layout::{IPPROTO_TCP, IPPROTO_UDP, SCOPE_EXTERNAL, SvcKey};
use crate::dataplane::ebpf::plan::Plan;

/// One frontend as a program resolves it: flags and the backends of its slots in order
/// (`None`: a slot missing), without the ids the maps happen to use.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resolved {
    affinity: Option<u32>,
    drop: bool,
    snat: bool,
    slots: Vec<Option<SocketAddr>>,
}

fn resolve(maps: &Maps) -> BTreeMap<SvcKey, Resolved> {
    maps.svc
        .iter()
        .map(|(k, v)| {
            let e = Entry::of(v);
            let r = Resolved {
                affinity: e.affinity,
                drop: e.drop,
                snat: e.snat,
                slots: e.slots(maps),
            };
            (*k, r)
        })
        .collect()
}

/// How `kernel` differs from what `plan` fills, told per frontend as a program would meet
/// it (missing, extra, other backends, a slot missing, other flags), per NodePort and per
/// source range; empty when a program would meet the plan everywhere. Slot set ids and generations are the
/// kernel's business and are not compared.
pub fn drift(kernel: &Maps, plan: &Plan) -> Vec<String> {
    let planned = planned_maps(plan);
    let owner: BTreeMap<SvcKey, String> = plan
        .frontends
        .iter()
        .map(|(f, set)| (diff::svc_key(f), set.port.to_string()))
        .collect();
    let (have, want) = (resolve(kernel), resolve(&planned));
    let name = |k: &SvcKey| {
        let proto = proto_name(k.proto);
        let at = SocketAddr::new(k.ip(), k.port());
        let whence = if outside(k) { " from outside" } else { "" };
        match owner.get(k) {
            Some(o) => format!("{proto} {at}{whence} ({o})"),
            None => format!("{proto} {at}{whence}"),
        }
    };
    let mut out = Vec::new();
    for (k, w) in &want {
        let Some(h) = have.get(k) else {
            let unbalanced = if outside(k) {
                "packets from outside to it go to the node's stack untranslated"
            } else {
                "connect() to it is not balanced"
            };
            out.push(format!("kp_svc has no entry for {}: {unbalanced}", name(k)));
            continue;
        };
        let backends =
            |r: &Resolved| -> BTreeSet<SocketAddr> { r.slots.iter().flatten().copied().collect() };
        let (hb, wb) = (backends(h), backends(w));
        for b in wb.difference(&hb) {
            out.push(format!("{}: backend {b} is not in the kernel", name(k)));
        }
        for b in hb.difference(&wb) {
            out.push(format!("{}: backend {b} is not in the plan", name(k)));
        }
        let missing = h.slots.iter().filter(|s| s.is_none()).count();
        // A missing slot's backend is named above when no other slot holds it.
        if missing > 0 && wb.difference(&hb).next().is_none() {
            out.push(format!(
                "{}: {missing} of its {} slots are missing from kp_slot",
                name(k),
                h.slots.len()
            ));
        }
        if h.affinity != w.affinity {
            let t = |a: Option<u32>| a.map_or_else(|| "none".to_string(), |t| format!("{t} s"));
            out.push(format!(
                "{}: ClientIP affinity {} in the kernel, {} in the plan",
                name(k),
                t(h.affinity),
                t(w.affinity)
            ));
        }
        if h.snat != w.snat {
            let source = |snat: bool| {
                if snat {
                    "rewrites the source to the node's address"
                } else {
                    "keeps the client's address"
                }
            };
            out.push(format!(
                "{}: the kernel {}, the plan {}",
                name(k),
                source(h.snat),
                source(w.snat)
            ));
        }
        if h.drop != w.drop && h.slots.is_empty() && w.slots.is_empty() {
            let verdict = |drop: bool| match (drop, outside(k)) {
                (true, false) => "ETIMEDOUT",
                (false, false) => "ECONNREFUSED",
                (true, true) => "a drop",
                (false, true) => "ICMP port unreachable",
            };
            out.push(format!(
                "{}: the kernel answers {}, the plan {}",
                name(k),
                verdict(h.drop),
                verdict(w.drop)
            ));
        }
    }
    for k in have.keys().filter(|k| !want.contains_key(k)) {
        out.push(format!("kp_svc entry {} is not in the plan", name(k)));
    }
    for k in planned.node_ports.difference(&kernel.node_ports) {
        out.push(format!(
            "kp_nodeport has no entry for NodePort {}/{}: a bind() to it is not refused",
            k.port,
            proto_name(k.proto)
        ));
    }
    for k in kernel.node_ports.difference(&planned.node_ports) {
        out.push(format!(
            "kp_nodeport entry {}/{} is not in the plan",
            k.port,
            proto_name(k.proto)
        ));
    }
    for k in planned.src.difference(&kernel.src) {
        let fe = k.frontend();
        out.push(match k.source() {
            Some(range) => format!(
                "kp_src has no range {range} for {}: its clients there are dropped",
                name(&fe)
            ),
            None => format!(
                "kp_src does not restrict {}: its loadBalancerSourceRanges are not enforced",
                name(&fe)
            ),
        });
    }
    for k in kernel.src.difference(&planned.src) {
        let fe = k.frontend();
        out.push(match k.source() {
            Some(range) => format!("kp_src range {range} for {} is not in the plan", name(&fe)),
            None => format!(
                "kp_src restricts {}, which the plan does not restrict",
                name(&fe)
            ),
        });
    }
    out
}

/// Whether `k` is the tc programs' (traffic from outside the node).
fn outside(k: &SvcKey) -> bool {
    k.scope == SCOPE_EXTERNAL
}

fn proto_name(proto: u8) -> String {
    match proto {
        IPPROTO_TCP => "TCP".to_string(),
        IPPROTO_UDP => "UDP".to_string(),
        p => format!("protocol {p}"),
    }
}
