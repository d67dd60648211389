//! One service port in one family: capture rules in nat `KUBE-SERVICES` / `KUBE-NODEPORTS`, its
//! `KUBE-SVC/SVL/EXT/FW` chains, and filter rules for frontends that have no endpoint.
//!
//! Upstream's behaviour, in our words:
//! - No usable endpoint anywhere: every frontend (ClusterIP, externalIPs, LoadBalancer IPs,
//!   NodePort) is rejected in filter, and no nat chain exists for the port.
//! - ClusterIP traffic goes to the internal-policy chain (`KUBE-SVC-` for Cluster, `KUBE-SVL-`
//!   for Local); a Local policy without a local endpoint drops it in filter. That chain first
//!   marks for masquerade: every packet with `masqueradeAll`, else packets not from a local pod
//!   when local traffic can be recognised.
//! - External traffic (NodePort, externalIPs, LoadBalancer IPs) goes to `KUBE-EXT-`, through
//!   `KUBE-FW-` first for LoadBalancer IPs with source ranges. Under the Cluster policy EXT marks
//!   everything for masquerade and goes to `KUBE-SVC-`. Under Local, pod traffic and traffic from
//!   the node itself short-circuit to `KUBE-SVC-` (the latter masqueraded), the rest goes to
//!   `KUBE-SVL-`, and without a local endpoint the external frontends drop in filter.
//! - `KUBE-FW-` lets the source ranges (and the LoadBalancer IPs themselves when a node address
//!   is inside a range: traffic the node loops back) through to `KUBE-EXT-`; whatever else was
//!   not DNATed meets a DROP in filter `KUBE-PROXY-FIREWALL`.
//! - A health-check node port is accepted in filter `KUBE-NODEPORTS`.

use std::net::IpAddr;

use ipnet::IpNet;

use super::Builder;
use super::endpoints;
use crate::cluster::model::{Endpoint, FamilyView, ServicePort, TrafficPolicy};
use crate::cluster::{Protocol, topology};
use crate::dataplane::iptables::names::{self as n, ChainName, PortChain};
use crate::dataplane::iptables::ruleset::{Comment, Match, Rule, Table, Target};
use crate::dataplane::node::{Local, source_ranges};

pub(super) fn add(b: &mut Builder, port: &ServicePort, view: &FamilyView) {
    let s = Svc {
        port,
        view,
        name: port.name.to_string(),
    };
    if !view.selection.has_any_endpoints {
        s.reject_all(b);
        return;
    }
    let pick = |list: &Option<Vec<u32>>| -> Vec<&Endpoint> {
        list.as_deref()
            .unwrap_or(&[])
            .iter()
            .map(|&i| &view.endpoints[i as usize])
            .collect()
    };
    let cluster = pick(&view.selection.cluster);
    let local = pick(&view.selection.local);
    let svc = n::port_chain(PortChain::Cluster, &port.name);
    let svl = n::port_chain(PortChain::Local, &port.name);
    let accessible = view.externally_accessible(port);
    let uses_cluster = topology::uses_cluster_policy(port, accessible);
    let uses_local = topology::uses_local_policy(port, accessible);
    let (internal_chain, internal_eps) = match port.internal_policy {
        TrafficPolicy::Cluster => (&svc, &cluster),
        TrafficPolicy::Local => (&svl, &local),
    };

    // The ClusterIP.
    let cip = s.frontend(view.cluster_ip, "cluster IP");
    if internal_eps.is_empty() {
        s.drop_no_local(
            b,
            Table::Filter,
            n::SERVICES,
            s.frontend(view.cluster_ip, ""),
        );
    } else {
        b.push(
            Table::Nat,
            &ChainName::fixed(n::SERVICES),
            Rule::new(cip.clone(), Target::Jump(internal_chain.clone())),
        );
        let masq_matches = if b.cfg.node.masquerade_all {
            Some(cip)
        } else {
            not_local(&b.local).map(|m| [vec![m], cip].concat())
        };
        if let Some(m) = masq_matches {
            b.push(
                Table::Nat,
                internal_chain,
                Rule::new(m, Target::Jump(ChainName::fixed(n::MARK_MASQ))),
            );
        }
    }

    if uses_cluster {
        endpoints::add(b, port, &svc, &cluster);
    }
    if uses_local {
        endpoints::add(b, port, &svl, &local);
    }
    if accessible {
        s.external(b, &svc, &svl, &cluster, &local);
    }
}

struct Svc<'a> {
    port: &'a ServicePort,
    view: &'a FamilyView,
    /// `namespace/name[:port]`.
    name: String,
}

impl Svc<'_> {
    fn comment(&self, what: &str) -> Match {
        if what.is_empty() {
            Match::Comment(Comment::sanitised(&self.name))
        } else {
            Match::Comment(Comment::sanitised(&format!("{} {what}", self.name)))
        }
    }

    /// `-d ip -p proto -m comment -m proto --dport port`.
    fn frontend(&self, ip: IpAddr, what: &str) -> Vec<Match> {
        let proto = self.port.name.protocol;
        vec![
            Match::Destination {
                net: IpNet::from(ip),
                negate: false,
            },
            Match::Protocol(proto),
            self.comment(what),
            Match::DestinationPort(proto, self.port.port),
        ]
    }

    /// `-p proto -m comment -m addrtype --dst-type LOCAL -m proto --dport nodePort`.
    fn node_port_local(&self, node_port: u16, what: &str) -> Vec<Match> {
        let proto = self.port.name.protocol;
        vec![
            Match::Protocol(proto),
            self.comment(what),
            Match::AddrTypeLocal {
                source: false,
                negate: false,
            },
            Match::DestinationPort(proto, node_port),
        ]
    }

    /// Replaces the comment of `matches` with "has no local endpoints" and drops in `chain`.
    fn drop_no_local(&self, b: &mut Builder, table: Table, chain: &'static str, m: Vec<Match>) {
        let m = self.with_comment(m, "has no local endpoints");
        b.push(table, &ChainName::fixed(chain), Rule::new(m, Target::Drop));
    }

    fn with_comment(&self, m: Vec<Match>, what: &str) -> Vec<Match> {
        m.into_iter()
            .map(|x| match x {
                Match::Comment(_) => self.comment(what),
                other => other,
            })
            .collect()
    }

    /// No endpoint anywhere: every frontend is rejected.
    fn reject_all(&self, b: &mut Builder) {
        let what = "has no endpoints";
        // TCP gets a reset: ICMP errors are rate-limited per host, so a burst would hang.
        let target = match self.port.name.protocol {
            Protocol::Tcp => Target::RejectTcpReset,
            _ => Target::Reject,
        };
        let reject = |b: &mut Builder, chain: &'static str, m: Vec<Match>| {
            b.push(
                Table::Filter,
                &ChainName::fixed(chain),
                Rule::new(m, target.clone()),
            );
        };
        reject(b, n::SERVICES, self.frontend(self.view.cluster_ip, what));
        for &ip in self
            .view
            .external_ips
            .iter()
            .chain(&self.view.load_balancer_ips)
        {
            reject(b, n::EXTERNAL_SERVICES, self.frontend(ip, what));
        }
        if let Some(np) = self.port.node_port {
            reject(b, n::EXTERNAL_SERVICES, self.node_port_local(np, what));
        }
    }

    /// The `KUBE-EXT-` chain, the external frontends' capture rules, `KUBE-FW-`, and the
    /// health-check node port.
    fn external(
        &self,
        b: &mut Builder,
        svc: &ChainName,
        svl: &ChainName,
        cluster: &[&Endpoint],
        local: &[&Endpoint],
    ) {
        let name = &self.port.name;
        let ext = n::port_chain(PortChain::External, name);
        let mark_masq = || Target::Jump(ChainName::fixed(n::MARK_MASQ));
        let (target, has_external) = match self.port.external_policy {
            TrafficPolicy::Cluster => {
                let c = self.comment_text("masquerade traffic for", "external destinations");
                b.push(Table::Nat, &ext, Rule::new(vec![c], mark_masq()));
                (svc, !cluster.is_empty())
            }
            TrafficPolicy::Local => {
                if let Some(m) = is_local(&b.local) {
                    let c = self.comment_text("pod traffic for", "external destinations");
                    b.push(
                        Table::Nat,
                        &ext,
                        Rule::new(vec![m, c], Target::Jump(svc.clone())),
                    );
                }
                let local_src = Match::AddrTypeLocal {
                    source: true,
                    negate: false,
                };
                let c = self.comment_text("masquerade LOCAL traffic for", "external destinations");
                b.push(
                    Table::Nat,
                    &ext,
                    Rule::new(vec![c, local_src.clone()], mark_masq()),
                );
                let c = self.comment_text("route LOCAL traffic for", "external destinations");
                b.push(
                    Table::Nat,
                    &ext,
                    Rule::new(vec![c, local_src], Target::Jump(svc.clone())),
                );
                (svl, !local.is_empty())
            }
        };
        if has_external {
            b.push(
                Table::Nat,
                &ext,
                Rule::new(vec![], Target::Jump(target.clone())),
            );
        }

        let services = ChainName::fixed(n::SERVICES);
        for &ip in &self.view.external_ips {
            let m = self.frontend(ip, "external IP");
            b.push(
                Table::Nat,
                &services,
                Rule::new(m.clone(), Target::Jump(ext.clone())),
            );
            if !has_external {
                self.drop_no_local(b, Table::Filter, n::EXTERNAL_SERVICES, m);
            }
        }
        let ranges = &self.view.load_balancer_source_ranges;
        let fw = n::port_chain(PortChain::Firewall, name);
        for &ip in &self.view.load_balancer_ips {
            let m = self.frontend(ip, "loadbalancer IP");
            let to = if ranges.is_empty() { &ext } else { &fw };
            b.push(
                Table::Nat,
                &services,
                Rule::new(m.clone(), Target::Jump(to.clone())),
            );
            if !ranges.is_empty() {
                let what = format!("traffic not accepted by {fw}");
                b.push(
                    Table::Filter,
                    &ChainName::fixed(n::PROXY_FIREWALL),
                    Rule::new(self.with_comment(m.clone(), &what), Target::Drop),
                );
            }
            if !has_external {
                self.drop_no_local(b, Table::Filter, n::EXTERNAL_SERVICES, m);
            }
        }
        if !ranges.is_empty() && !self.view.load_balancer_ips.is_empty() {
            self.firewall_chain(b, &fw, &ext);
        }
        if let Some(np) = self.port.node_port {
            let proto = name.protocol;
            let m = vec![
                Match::Protocol(proto),
                self.comment(""),
                Match::DestinationPort(proto, np),
            ];
            b.push(
                Table::Nat,
                &ChainName::fixed(n::NODEPORTS),
                Rule::new(m, Target::Jump(ext.clone())),
            );
            if !has_external {
                let m = self.node_port_local(np, "");
                self.drop_no_local(b, Table::Filter, n::EXTERNAL_SERVICES, m);
            }
        }
        if let Some(hc) = self.port.health_check_node_port {
            let proto = crate::cluster::Protocol::Tcp;
            b.push(
                Table::Filter,
                &ChainName::fixed(n::NODEPORTS),
                Rule::new(
                    vec![
                        Match::Protocol(proto),
                        self.comment("health check node port"),
                        Match::DestinationPort(proto, hc),
                    ],
                    Target::Accept,
                ),
            );
        }
    }

    fn comment_text(&self, before: &str, after: &str) -> Match {
        Match::Comment(Comment::sanitised(&format!(
            "{before} {} {after}",
            self.name
        )))
    }

    fn firewall_chain(&self, b: &mut Builder, fw: &ChainName, ext: &ChainName) {
        let view = self.view;
        let sources = source_ranges::allowed_sources(view, b.node);
        for net in sources {
            b.push(
                Table::Nat,
                fw,
                Rule::new(
                    vec![
                        Match::Source { net, negate: false },
                        self.comment("loadbalancer IP"),
                    ],
                    Target::Jump(ext.clone()),
                ),
            );
        }
        let c = self.comment_text("other traffic to", "will be dropped by KUBE-PROXY-FIREWALL");
        b.push(Table::Nat, fw, Rule::new(vec![c], Target::None));
    }
}

/// The match for "from a local pod", if local traffic can be recognised.
fn is_local(local: &Local) -> Option<Match> {
    match local {
        Local::None => None,
        Local::Cidr(net) => Some(Match::Source {
            net: *net,
            negate: false,
        }),
        Local::Interface(name) => Some(Match::InInterface {
            name: name.clone(),
            negate: false,
        }),
    }
}

/// The match for "not from a local pod", if local traffic can be recognised.
fn not_local(local: &Local) -> Option<Match> {
    is_local(local).map(|m| match m {
        Match::Source { net, .. } => Match::Source { net, negate: true },
        Match::InInterface { name, .. } => Match::InInterface { name, negate: true },
        other => other,
    })
}
