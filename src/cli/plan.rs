//! `kube-proxy-rs plan`: what every service port means on this node, and why, with no root and no
//! cluster.
//!
//! Pure rendering of a [`Snapshot`] into a report: frontends, the endpoints chosen for cluster,
//! local and external traffic, and why each other endpoint was left out. The JSON form is stable
//! (golden-tested) so scripts can build on it; the table is for people.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;

use crate::cluster::model::{Endpoint, FamilyView, ServicePortState, ServiceType, TrafficPolicy};
use crate::cluster::service::Ignored;
use crate::cluster::topology::{self, TopologyMode};
use crate::cluster::{NodeContext, ServiceKey, Snapshot, Warning};

/// The whole report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub node: NodeReport,
    pub service_ports: Vec<PortReport>,
    pub ignored_services: Vec<IgnoredReport>,
    pub warnings: Vec<Warning>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    /// Whether a Node object of that name was found; without it there is no zone and no address.
    pub found: bool,
    pub zone: Option<String>,
    pub addresses: Vec<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortReport {
    /// `namespace/name:port`.
    pub name: String,
    pub protocol: &'static str,
    #[serde(rename = "type")]
    pub service_type: ServiceType,
    pub port: u16,
    pub node_port: Option<u16>,
    pub session_affinity_timeout_seconds: Option<u32>,
    pub internal_traffic_policy: TrafficPolicy,
    pub external_traffic_policy: TrafficPolicy,
    pub health_check_node_port: Option<u16>,
    pub traffic_distribution: Option<String>,
    pub families: Vec<FamilyReport>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FamilyReport {
    pub family: &'static str,
    pub cluster_ip: IpAddr,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_ips: Vec<IpAddr>,
    pub load_balancer_source_ranges: Vec<String>,
    /// Some endpoint anywhere is usable; without one, traffic is rejected.
    pub has_endpoints: bool,
    pub topology: TopologyMode,
    /// ClusterIP traffic: endpoints under the internal policy.
    pub internal: Option<Choice>,
    /// NodePort, externalIP and LoadBalancer traffic: endpoints under the external policy;
    /// `None` when the port has no external frontend in this family.
    pub external: Option<Choice>,
    pub excluded: Vec<Exclusion>,
}

/// The endpoints one kind of traffic may use.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Choice {
    pub policy: TrafficPolicy,
    pub endpoints: Vec<String>,
    /// These are serving-terminating endpoints, used because no ready one exists.
    pub terminating_fallback: bool,
}

/// An endpoint some traffic does not use, and why.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exclusion {
    pub endpoint: String,
    pub node: Option<String>,
    /// Why cluster-policy traffic does not use it (absent when it does, or no traffic is cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Why local-policy traffic does not use it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct IgnoredReport {
    pub service: String,
    pub reason: &'static str,
}

/// Builds the report for a snapshot, the Services the tracker ignored, and its warnings.
pub fn report(
    snapshot: &Snapshot,
    ignored: &[(ServiceKey, Ignored)],
    warnings: &[Warning],
) -> Report {
    Report {
        node: node_report(&snapshot.node),
        service_ports: snapshot
            .ports
            .values()
            .map(|s| port_report(s, &snapshot.node))
            .collect(),
        ignored_services: ignored
            .iter()
            .map(|(k, why)| IgnoredReport {
                service: k.to_string(),
                reason: why.as_str(),
            })
            .collect(),
        warnings: warnings.to_vec(),
    }
}

fn node_report(node: &NodeContext) -> NodeReport {
    NodeReport {
        name: node.name.to_string(),
        found: node.known,
        zone: node.zone.as_deref().map(str::to_string),
        addresses: node
            .addresses
            .iter()
            .map(|a| format!("{} {}", a.kind, a.ip))
            .collect(),
    }
}

fn port_report(state: &ServicePortState, node: &NodeContext) -> PortReport {
    let p = &state.port;
    PortReport {
        name: p.name.to_string(),
        protocol: p.name.protocol.as_str(),
        service_type: p.service_type,
        port: p.port,
        node_port: p.node_port,
        session_affinity_timeout_seconds: p.affinity_timeout_seconds,
        internal_traffic_policy: p.internal_policy,
        external_traffic_policy: p.external_policy,
        health_check_node_port: p.health_check_node_port,
        traffic_distribution: p.traffic_distribution.as_ref().map(|d| format!("{d:?}")),
        families: state
            .families
            .iter()
            .map(|v| family_report(state, v, node))
            .collect(),
    }
}

fn choice(view: &FamilyView, policy: TrafficPolicy) -> Option<Choice> {
    let (endpoints, fallback) = match policy {
        TrafficPolicy::Cluster => (
            view.cluster_endpoints()?.map(ToString::to_string).collect(),
            view.selection.cluster_uses_terminating,
        ),
        TrafficPolicy::Local => (
            view.local_endpoints()?.map(ToString::to_string).collect(),
            view.selection.local_uses_terminating,
        ),
    };
    Some(Choice {
        policy,
        endpoints,
        terminating_fallback: fallback,
    })
}

pub(crate) fn family_report(
    state: &ServicePortState,
    view: &FamilyView,
    node: &NodeContext,
) -> FamilyReport {
    let port = &state.port;
    let sel = &view.selection;
    let external = view
        .externally_accessible(port)
        .then(|| choice(view, port.external_policy))
        .flatten();
    let any_ready = view.endpoints.iter().any(|e| e.ready);
    let any_local_ready = view.endpoints.iter().any(|e| e.ready && e.is_local);
    let in_list = |list: &Option<Vec<u32>>, i: usize| {
        list.as_ref().map(|l| l.binary_search(&(i as u32)).is_ok())
    };
    let excluded = view
        .endpoints
        .iter()
        .enumerate()
        .filter_map(|(i, ep)| {
            let cluster = (in_list(&sel.cluster, i) == Some(false))
                .then(|| topology::why_excluded(ep, any_ready, false, sel.topology, node));
            let local = (in_list(&sel.local, i) == Some(false))
                .then(|| topology::why_excluded(ep, any_local_ready, true, sel.topology, node));
            (cluster.is_some() || local.is_some()).then(|| exclusion(ep, cluster, local))
        })
        .collect();
    FamilyReport {
        family: view.family.as_str(),
        cluster_ip: view.cluster_ip,
        external_ips: view.external_ips.clone(),
        load_balancer_ips: view.load_balancer_ips.clone(),
        load_balancer_source_ranges: view
            .load_balancer_source_ranges
            .iter()
            .map(ToString::to_string)
            .collect(),
        has_endpoints: sel.has_any_endpoints,
        topology: sel.topology,
        internal: choice(view, port.internal_policy),
        external,
        excluded,
    }
}

fn exclusion(ep: &Endpoint, cluster: Option<String>, local: Option<String>) -> Exclusion {
    Exclusion {
        endpoint: ep.to_string(),
        node: ep.placement.node_name.as_deref().map(str::to_string),
        cluster,
        local,
    }
}

/// The report as pretty JSON, with a final newline.
pub fn render_json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).expect("the report is plain data");
    s.push('\n');
    s
}

/// The report as a table for people.
pub fn render_table(report: &Report) -> String {
    let mut out = String::new();
    let n = &report.node;
    let _ = writeln!(
        out,
        "node {}{}{}{}",
        n.name,
        n.zone
            .as_deref()
            .map(|z| format!(" zone {z}"))
            .unwrap_or_default(),
        if n.addresses.is_empty() {
            String::new()
        } else {
            format!(" ({})", n.addresses.join(", "))
        },
        if n.found {
            ""
        } else {
            " (no Node object found)"
        }
    );
    for p in &report.service_ports {
        for f in &p.families {
            let _ = writeln!(
                out,
                "\n{} {} {} {:?}",
                p.name, p.protocol, f.family, p.service_type
            );
            let _ = writeln!(out, "  frontends  {}", frontends(p, f).join(", "));
            let mut notes = Vec::new();
            if let Some(t) = p.session_affinity_timeout_seconds {
                notes.push(format!("ClientIP affinity {t}s"));
            }
            if f.topology != TopologyMode::None {
                notes.push(format!("topology {:?}", f.topology));
            }
            if !f.load_balancer_source_ranges.is_empty() {
                notes.push(format!(
                    "source ranges {}",
                    f.load_balancer_source_ranges.join(",")
                ));
            }
            if let Some(h) = p.health_check_node_port {
                notes.push(format!("health check node port {h}"));
            }
            if !notes.is_empty() {
                let _ = writeln!(out, "  notes      {}", notes.join("; "));
            }
            write_choice(&mut out, "internal", f.internal.as_ref(), f.has_endpoints);
            if f.external.is_some() {
                write_choice(&mut out, "external", f.external.as_ref(), f.has_endpoints);
            }
            for x in &f.excluded {
                let why: Vec<String> = [("cluster", &x.cluster), ("local", &x.local)]
                    .into_iter()
                    .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}")))
                    .collect();
                let _ = writeln!(out, "  left out   {} ({})", x.endpoint, why.join("; "));
            }
        }
    }
    if !report.ignored_services.is_empty() {
        let _ = writeln!(out, "\nignored");
        for i in &report.ignored_services {
            let _ = writeln!(out, "  {} ({})", i.service, i.reason);
        }
    }
    if !report.warnings.is_empty() {
        let _ = writeln!(out, "\nwarnings");
        for w in &report.warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

fn frontends(p: &PortReport, f: &FamilyReport) -> Vec<String> {
    let at = |ip: &IpAddr| match ip {
        IpAddr::V4(_) => format!("{ip}:{}", p.port),
        IpAddr::V6(_) => format!("[{ip}]:{}", p.port),
    };
    let mut v = vec![format!("cluster {}", at(&f.cluster_ip))];
    v.extend(p.node_port.map(|n| format!("nodePort {n}")));
    v.extend(
        f.external_ips
            .iter()
            .map(|ip| format!("external {}", at(ip))),
    );
    v.extend(
        f.load_balancer_ips
            .iter()
            .map(|ip| format!("loadBalancer {}", at(ip))),
    );
    v
}

fn write_choice(out: &mut String, what: &str, choice: Option<&Choice>, has_endpoints: bool) {
    let Some(c) = choice else { return };
    let list = if c.endpoints.is_empty() {
        if has_endpoints {
            "none: traffic dropped".to_string()
        } else {
            "none: traffic rejected".to_string()
        }
    } else {
        c.endpoints.join(", ")
    };
    let fallback = if c.terminating_fallback {
        " [terminating fallback]"
    } else {
        ""
    };
    let _ = writeln!(out, "  {what:<10} {:?}: {list}{fallback}", c.policy);
}
