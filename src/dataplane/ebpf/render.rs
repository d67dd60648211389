//! The eBPF mode's plan as `plan --proxy-mode ebpf` prints it: the map entries it would write,
//! and what phase 1 does not program.
//!
//! Pure. Slot set ids are the ones [`diff`](super::diff) gives on empty maps (the proxy keeps
//! the ids a node's maps already hold, so a live node's may differ).

use std::fmt::Write as _;

use super::diff::{self, Maps};
use super::layout::IPPROTO_TCP;
use super::names;
use super::plan::Plan;

pub fn render(plan: &Plan) -> String {
    let maps = diff::applied(Maps::default(), &diff::diff(&Maps::default(), plan));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# map {} (frontend -> slot set, count, generation)",
        names::MAP_SVC
    );
    for (k, v) in &maps.svc {
        let proto = if k.proto == IPPROTO_TCP { "tcp" } else { "udp" };
        let addr = std::net::SocketAddr::new(k.ip(), k.port());
        let what = if v.count == 0 {
            "  # no endpoints: connect() refused"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{proto} {addr} -> set {} count {} generation {}{what}",
            v.svc_id, v.count, v.generation
        );
    }
    let _ = writeln!(
        out,
        "# map {} (set, generation, slot -> backend)",
        names::MAP_SLOT
    );
    for (k, b) in &maps.slots {
        let _ = writeln!(
            out,
            "set {} generation {} slot {} -> {}",
            k.svc_id,
            k.generation,
            k.slot,
            b.socket_addr()
        );
    }
    let _ = writeln!(out, "# sets");
    let mut named = std::collections::BTreeMap::new();
    for (f, set) in &plan.frontends {
        let id = maps.svc[&diff::svc_key(f)].svc_id;
        named.insert(id, set);
    }
    for (id, set) in named {
        let _ = writeln!(
            out,
            "set {id}: {} {} {}",
            set.port,
            set.family,
            set.list.as_str()
        );
    }
    if !plan.not_programmed.is_empty() {
        let _ = writeln!(out, "# not programmed by ebpf mode (phase 1)");
        for (port, gap) in &plan.not_programmed {
            let _ = writeln!(out, "{port}: {}", gap.as_str());
        }
    }
    out
}
