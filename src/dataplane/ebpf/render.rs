//! The eBPF mode's plan as `plan --proxy-mode ebpf` prints it: the map entries it would write,
//! and what this mode does not program.
//!
//! Pure. Also a test of the plan: rendering writes it into empty maps through
//! [`diff`](super::diff), as the proxy does on a fresh node. Slot set ids are the ones [`diff`](super::diff) gives on empty maps (the proxy keeps
//! the ids a node's maps already hold, so a live node's may differ).

use std::fmt::Write as _;

use super::diff::{self, Maps};
use super::layout::{SVC_F_AFFINITY, SVC_F_DROP, SVC_F_RESTRICTED, SVC_F_SNAT};
use super::names;
use super::plan::{Plan, Scope, UNDEFINED_PORT};

pub fn render(plan: &Plan) -> String {
    let maps = diff::applied(Maps::default(), &diff::diff(&Maps::default(), plan));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# map {} ([external] frontend -> slot set, count, generation)",
        names::MAP_SVC
    );
    // In the plan's order (address, port, transport), not the map keys' byte order.
    for f in plan.frontends.keys() {
        let v = maps.svc[&diff::svc_key(f)];
        let proto = f.transport.as_str();
        let addr = if f.port == UNDEFINED_PORT {
            match f.ip {
                std::net::IpAddr::V4(ip) => format!("{ip}:*"),
                std::net::IpAddr::V6(ip) => format!("[{ip}]:*"),
            }
        } else {
            std::net::SocketAddr::new(f.ip, f.port).to_string()
        };
        let external = f.scope == Scope::External;
        let undefined = f.port == UNDEFINED_PORT;
        let what = match (v.count, v.flags & SVC_F_DROP != 0, external) {
            (0, _, false) if undefined => {
                "  # any port the Service does not define: connect() refused"
            }
            (0, _, true) if undefined => {
                "  # any port the Service does not define: ICMP port unreachable"
            }
            (0, true, false) => "  # no endpoint for this traffic: connect() times out at once",
            (0, false, false) => "  # no endpoints: connect() refused",
            (0, true, true) => "  # no endpoint for this traffic: dropped",
            (0, false, true) => "  # no endpoints: ICMP port unreachable",
            _ => "",
        };
        let scope = if external { "external " } else { "" };
        let snat = if v.flags & SVC_F_SNAT != 0 {
            " snat"
        } else if v.flags & SVC_F_RESTRICTED != 0 {
            " source-ranges"
        } else {
            ""
        };
        let affinity = if v.flags & SVC_F_AFFINITY != 0 {
            format!(" affinity {}s", v.affinity_timeout)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{scope}{proto} {addr} -> set {} count {} generation {}{affinity}{snat}{what}",
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
            "set {id}: {} {} {} {}",
            set.port,
            set.family,
            set.scope.as_str(),
            set.list.as_str()
        );
    }
    if !plan.source_ranges.is_empty() {
        let _ = writeln!(
            out,
            "# map {} (external frontend <- allowed sources; others dropped)",
            names::MAP_SRC
        );
        for (f, ranges) in &plan.source_ranges {
            let list: Vec<String> = ranges.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                out,
                "{} {} <- {}",
                f.transport.as_str(),
                std::net::SocketAddr::new(f.ip, f.port),
                list.join(", ")
            );
        }
    }
    if !plan.not_programmed.is_empty() {
        let _ = writeln!(out, "# not programmed by ebpf mode (phase 1)");
        for (port, gap) in &plan.not_programmed {
            let _ = writeln!(out, "{port}: {}", gap.as_str());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ebpf::plan::{node_ports, plan};
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn prints_frontends_slots_source_ranges_and_gaps() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80).node_port(30080).ep(
                    "10.244.1.5",
                    8080,
                    "node-a",
                ),
                svc("default/none", "10.96.0.9", 80),
                svc("default/lb", "10.96.0.8", 443)
                    .lb("198.51.100.7")
                    .range("203.0.113.0/24")
                    .external_local()
                    .ep("10.244.2.5", 8443, "node-b"),
            ],
        );
        let primary = crate::config::NodePortAddresses {
            primary: true,
            ..Default::default()
        };
        let text = render(&plan(&snap, &node_ports(&primary, &snap.node)));
        let want = "\
# map kp_svc ([external] frontend -> slot set, count, generation)
tcp 10.0.0.11:30080 -> set 10 count 1 generation 0
external tcp 10.0.0.11:30080 -> set 11 count 1 generation 0 snat
tcp 10.96.0.8:* -> set 4 count 0 generation 0  # any port the Service does not define: connect() refused
external tcp 10.96.0.8:* -> set 5 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
udp 10.96.0.8:* -> set 4 count 0 generation 0  # any port the Service does not define: connect() refused
external udp 10.96.0.8:* -> set 5 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
tcp 10.96.0.8:443 -> set 1 count 1 generation 0
external tcp 10.96.0.8:443 -> set 2 count 1 generation 0 snat
tcp 10.96.0.9:* -> set 8 count 0 generation 0  # any port the Service does not define: connect() refused
external tcp 10.96.0.9:* -> set 9 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
udp 10.96.0.9:* -> set 8 count 0 generation 0  # any port the Service does not define: connect() refused
external udp 10.96.0.9:* -> set 9 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
tcp 10.96.0.9:80 -> set 6 count 0 generation 0  # no endpoints: connect() refused
external tcp 10.96.0.9:80 -> set 7 count 0 generation 0 snat  # no endpoints: ICMP port unreachable
tcp 10.96.0.10:* -> set 12 count 0 generation 0  # any port the Service does not define: connect() refused
external tcp 10.96.0.10:* -> set 13 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
udp 10.96.0.10:* -> set 12 count 0 generation 0  # any port the Service does not define: connect() refused
external udp 10.96.0.10:* -> set 13 count 0 generation 0  # any port the Service does not define: ICMP port unreachable
tcp 10.96.0.10:80 -> set 10 count 1 generation 0
external tcp 10.96.0.10:80 -> set 11 count 1 generation 0 snat
tcp 198.51.100.7:443 -> set 1 count 1 generation 0 source-ranges
external tcp 198.51.100.7:443 -> set 3 count 0 generation 0  # no endpoint for this traffic: dropped
# map kp_slot (set, generation, slot -> backend)
set 1 generation 0 slot 0 -> 10.244.2.5:8443
set 2 generation 0 slot 0 -> 10.244.2.5:8443
set 10 generation 0 slot 0 -> 10.244.1.5:8080
set 11 generation 0 slot 0 -> 10.244.1.5:8080
# sets
set 1: default/lb IPv4 socket cluster
set 2: default/lb IPv4 external cluster
set 3: default/lb IPv4 external local
set 4: default/lb IPv4 socket undefined-port
set 5: default/lb IPv4 external undefined-port
set 6: default/none IPv4 socket cluster
set 7: default/none IPv4 external cluster
set 8: default/none IPv4 socket undefined-port
set 9: default/none IPv4 external undefined-port
set 10: default/web IPv4 socket cluster
set 11: default/web IPv4 external cluster
set 12: default/web IPv4 socket undefined-port
set 13: default/web IPv4 external undefined-port
# map kp_src (external frontend <- allowed sources; others dropped)
tcp 198.51.100.7:443 <- 203.0.113.0/24
";
        assert_eq!(text, want);
    }
}
