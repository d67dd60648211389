//! A packet walker over the typed [`Ruleset`]: where would the rules send a new connection?
//!
//! Pure; backs tests that state behaviour ("tcp 10.0.1.5 → 172.30.0.10:80 reaches one of
//! {10.244.1.2:8080}", "→ reject") without root and without parsing rule text. It follows the
//! path of a new connection: nat PREROUTING (or OUTPUT for the node's own traffic) through our
//! jumps, then, with the destination DNAT left, filter FORWARD/INPUT/OUTPUT through our jumps.
//! `statistic` rules are taken both ways, so every endpoint the rules can pick is collected; a
//! `recent --rcheck` never matches (no client history); conntrack state is `NEW`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::names::ChainName;
use super::ruleset::{Builtin, Match, Rule, Ruleset, Table, Target};
use crate::cluster::Protocol;

/// A new connection to trace.
#[derive(Clone, Debug)]
pub struct Packet {
    pub protocol: Protocol,
    pub source: IpAddr,
    pub destination: IpAddr,
    pub port: u16,
    /// Sent by the node itself (nat OUTPUT, `--src-type LOCAL`), not arriving from outside.
    pub from_node: bool,
    /// The interface it arrived on, for the interface detect-local modes.
    pub in_interface: Option<String>,
}

/// Where the rules send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// DNATed to one of these `ip:port` (`[ip]:port` for IPv6).
    Endpoints(BTreeSet<String>),
    Reject,
    Drop,
    /// No rule of ours acted on it.
    Untouched,
}

/// The outcome, and whether the masquerade mark was set on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub outcome: Outcome,
    pub masquerade: bool,
}

/// Traces `packet` through `rules`, with `node_ips` the node's local addresses.
pub fn trace(rules: &Ruleset, packet: &Packet, node_ips: &[IpAddr]) -> Trace {
    let mut w = Walk {
        rules,
        node_ips,
        mark: false,
        dnat: BTreeSet::new(),
        verdict: None,
    };
    let entry = if packet.from_node {
        Builtin::Output
    } else {
        Builtin::Prerouting
    };
    w.builtin(Table::Nat, entry, packet);
    let masquerade = w.mark;
    if !w.dnat.is_empty() {
        return Trace {
            outcome: Outcome::Endpoints(std::mem::take(&mut w.dnat)),
            masquerade,
        };
    }
    // Not DNATed: the filter table judges the original destination.
    let local = node_ips.contains(&packet.destination) || packet.destination.is_loopback();
    let entries: &[Builtin] = match (packet.from_node, local) {
        (true, _) => &[Builtin::Output],
        (false, true) => &[Builtin::Input],
        (false, false) => &[Builtin::Forward],
    };
    for &b in entries {
        w.builtin(Table::Filter, b, packet);
    }
    let outcome = match w.verdict {
        Some(Target::Reject | Target::RejectTcpReset) => Outcome::Reject,
        Some(Target::Drop) => Outcome::Drop,
        _ => Outcome::Untouched,
    };
    Trace {
        outcome,
        masquerade,
    }
}

struct Walk<'a> {
    rules: &'a Ruleset,
    node_ips: &'a [IpAddr],
    mark: bool,
    dnat: BTreeSet<String>,
    /// The first terminal filter verdict.
    verdict: Option<Target>,
}

/// What a chain walk ended with.
enum End {
    /// Fell off the end or returned: the caller goes on.
    Continue,
    /// A terminal target: nothing after it runs.
    Stop,
}

impl Walk<'_> {
    fn builtin(&mut self, table: Table, chain: Builtin, p: &Packet) {
        let jumps: Vec<&Rule> = self
            .rules
            .table(table)
            .jumps
            .iter()
            .filter(|(b, _)| *b == chain)
            .map(|(_, r)| r)
            .collect();
        for r in jumps {
            if let End::Stop = self.rule(table, r, p) {
                return;
            }
        }
    }

    fn chain(&mut self, table: Table, name: &ChainName, p: &Packet) -> End {
        let Some(rules) = self.rules.chain(table, name) else {
            return End::Continue;
        };
        for r in rules {
            if let End::Stop = self.rule(table, r, p) {
                return End::Stop;
            }
        }
        End::Continue
    }

    fn rule(&mut self, table: Table, r: &Rule, p: &Packet) -> End {
        let mut random = false;
        for m in &r.matches {
            match self.matches(m, p) {
                Some(true) => {}
                Some(false) => return End::Continue,
                None => random = true,
            }
        }
        let end = match &r.target {
            Target::Jump(c) => self.chain(table, c, p),
            Target::None | Target::Masquerade | Target::XorMark(_) => End::Continue,
            Target::Return => End::Stop,
            Target::OrMark(_) => {
                self.mark = true;
                End::Continue
            }
            Target::Dnat { ip, port } => {
                self.dnat.insert(match ip {
                    IpAddr::V4(a) => format!("{a}:{port}"),
                    IpAddr::V6(a) => format!("[{a}]:{port}"),
                });
                End::Stop
            }
            t @ (Target::Accept | Target::Drop | Target::Reject | Target::RejectTcpReset) => {
                if table == Table::Filter && self.verdict.is_none() {
                    self.verdict = Some(t.clone());
                }
                End::Stop
            }
        };
        // A random rule may not have been taken: the chain goes on either way.
        if random { End::Continue } else { end }
    }

    /// Whether `m` matches; `None` for a random match (both ways are explored).
    fn matches(&self, m: &Match, p: &Packet) -> Option<bool> {
        Some(match m {
            Match::Source { net, negate } => net.contains(&p.source) != *negate,
            Match::Destination { net, negate } => net.contains(&p.destination) != *negate,
            Match::InInterface { name, negate } => {
                p.in_interface.as_deref().is_some_and(|i| name.matches(i)) != *negate
            }
            Match::Protocol(proto) => *proto == p.protocol,
            Match::DestinationPort(proto, port) => *proto == p.protocol && *port == p.port,
            Match::Comment(_) | Match::RecentSet { .. } => true,
            Match::AddrTypeLocal { source, negate } => {
                let local = if *source {
                    p.from_node
                } else {
                    self.node_ips.contains(&p.destination) || p.destination.is_loopback()
                };
                local != *negate
            }
            Match::CtState { states, negate } => states.split(',').any(|s| s == "NEW") != *negate,
            Match::Mark { negate, .. } => self.mark != *negate,
            Match::Probability { .. } => return None,
            Match::RecentCheck { .. } => false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::IpFamily;
    use crate::dataplane::iptables::golden_tests::settings;
    use crate::dataplane::iptables::plan::plan;
    use crate::testing::snapshots::{Svc, ip, node, snapshot, svc};

    const NODE: &str = "10.0.0.11";
    const POD: &str = "10.244.1.7";
    const OUTSIDE: &str = "203.0.113.9";

    fn rules(services: Vec<Svc>) -> Ruleset {
        plan(
            &snapshot(node(), services),
            &settings("cluster-cidr"),
            IpFamily::V4,
        )
    }

    fn tcp(from: &str, to: &str, port: u16) -> Packet {
        Packet {
            protocol: Protocol::Tcp,
            source: ip(from),
            destination: ip(to),
            port,
            from_node: from == NODE,
            in_interface: None,
        }
    }

    fn go(r: &Ruleset, p: Packet) -> Trace {
        trace(r, &p, &[ip(NODE)])
    }

    fn reaches(list: &[&str]) -> Outcome {
        Outcome::Endpoints(list.iter().map(|s| s.to_string()).collect())
    }

    fn web() -> Svc {
        svc("ns/web", "10.96.0.10", 80)
            .node_port(30080)
            .ep("10.244.1.2", 8080, "node-a")
            .ep("10.244.2.2", 8080, "node-b")
    }

    #[test]
    fn cluster_ip_traffic_reaches_every_endpoint_and_only_non_pod_sources_are_masqueraded() {
        let r = rules(vec![web()]);
        let both = reaches(&["10.244.1.2:8080", "10.244.2.2:8080"]);
        let from_pod = go(&r, tcp(POD, "10.96.0.10", 80));
        assert_eq!(
            (from_pod.outcome, from_pod.masquerade),
            (both.clone(), false)
        );
        let from_node = go(&r, tcp(NODE, "10.96.0.10", 80));
        assert_eq!((from_node.outcome, from_node.masquerade), (both, true));
        assert_eq!(
            go(&r, tcp(POD, "10.96.0.10", 81)).outcome,
            Outcome::Untouched
        );
    }

    #[test]
    fn node_ports_from_outside_are_masqueraded_under_the_cluster_policy() {
        let r = rules(vec![web()]);
        let t = go(&r, tcp(OUTSIDE, NODE, 30080));
        assert_eq!(
            (t.outcome, t.masquerade),
            (reaches(&["10.244.1.2:8080", "10.244.2.2:8080"]), true)
        );
    }

    #[test]
    fn the_local_external_policy_keeps_the_source_and_uses_local_endpoints_only() {
        let r = rules(vec![web().external_local()]);
        let t = go(&r, tcp(OUTSIDE, NODE, 30080));
        assert_eq!(
            (t.outcome, t.masquerade),
            (reaches(&["10.244.1.2:8080"]), false)
        );
        // A pod short-circuits to every endpoint.
        let t = go(&r, tcp(POD, NODE, 30080));
        assert_eq!(t.outcome, reaches(&["10.244.1.2:8080", "10.244.2.2:8080"]));
        let remote_only = svc("ns/web", "10.96.0.10", 80)
            .node_port(30080)
            .external_local()
            .ep("10.244.2.2", 8080, "node-b");
        let r = rules(vec![remote_only]);
        assert_eq!(go(&r, tcp(OUTSIDE, NODE, 30080)).outcome, Outcome::Drop);
    }

    #[test]
    fn no_endpoints_rejects_and_no_local_endpoint_under_internal_local_drops() {
        let r = rules(vec![svc("ns/empty", "10.96.0.20", 80).node_port(30020)]);
        assert_eq!(go(&r, tcp(POD, "10.96.0.20", 80)).outcome, Outcome::Reject);
        assert_eq!(go(&r, tcp(OUTSIDE, NODE, 30020)).outcome, Outcome::Reject);
        let r = rules(vec![svc("ns/itp", "10.96.0.21", 80).internal_local().ep(
            "10.244.2.2",
            8080,
            "node-b",
        )]);
        assert_eq!(go(&r, tcp(POD, "10.96.0.21", 80)).outcome, Outcome::Drop);
    }

    #[test]
    fn source_ranges_let_listed_clients_in_and_drop_the_rest() {
        let lb = svc("ns/lb", "10.96.0.30", 443)
            .lb("192.0.2.30")
            .range("198.51.100.0/24")
            .ep("10.244.2.2", 8443, "node-b");
        let r = rules(vec![lb]);
        assert_eq!(
            go(&r, tcp("198.51.100.7", "192.0.2.30", 443)).outcome,
            reaches(&["10.244.2.2:8443"])
        );
        assert_eq!(
            go(&r, tcp(OUTSIDE, "192.0.2.30", 443)).outcome,
            Outcome::Drop
        );
    }

    #[test]
    fn a_pod_reaching_itself_is_masqueraded() {
        let one = svc("ns/self", "10.96.0.40", 80).ep("10.244.1.2", 8080, "node-a");
        let r = rules(vec![one]);
        let t = go(&r, tcp("10.244.1.2", "10.96.0.40", 80));
        assert_eq!(
            (t.outcome, t.masquerade),
            (reaches(&["10.244.1.2:8080"]), true)
        );
    }
}
