//! `kube-proxy-rs status` and `/debug/status`: every Service port of this node in one table,
//! from both halves the proxy knows: the model (frontends, policies, the endpoints chosen for
//! ClusterIP traffic) and the rules, planned and read back from the kernel, with the running
//! proxy's own state (its last sync, its health-check listeners).
//!
//! "Programmed" and "drift" come from the tracers, not from counting rules: every frontend of
//! a port is traced through the planned rules and through the kernel's, and the two outcomes
//! are compared, so a drift is reported as what a client would see ("kernel rejects, plan
//! forwards to 3 endpoints") in every mode alike, and the programmed count is the endpoints
//! the kernel's rules reach from this node for the ClusterIP.
//!
//! Pure: [`build`] takes the snapshot, the rules and the [`Runtime`], and returns a [`Status`],
//! a plain value rendered by [`render`]. Reading the kernel and asking the runner is the
//! caller's business (`/debug/status` in [`super::debug`]).

pub mod ask;
pub mod render;

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

use jiff::Timestamp;
use serde::Serialize;
use tokio::time::Instant;

use super::explain::{self, From, Outcome, Request, Rules, RulesFrom, Verdict};
use crate::cluster::{ServicePortState, Snapshot, TrafficPolicy};
use crate::dataplane::node::NodePolicy;
use crate::health::service::{Check, Serving, desired};

/// Endpoints named in one side of a drift line; the rest are counted.
const DRIFT_ENDPOINTS: usize = 3;

/// What only the running proxy knows: its syncs and its health-check listeners.
#[derive(Clone, Debug, Default)]
pub struct Runtime {
    pub sync: SyncSummary,
    pub health_checks: BTreeMap<crate::cluster::ServiceKey, Serving>,
}

/// The runner's syncs, as an operator asks about them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncSummary {
    /// The initial lists are in and syncs run.
    pub ready: bool,
    /// When the last successful sync ended (RFC 3339).
    pub last_success: Option<String>,
    pub seconds_since_success: Option<u64>,
    /// How long syncs have been failing; `None` after a success.
    pub failing_for_seconds: Option<u64>,
    /// How long the oldest change not yet programmed has waited.
    pub pending_for_seconds: Option<u64>,
    pub syncs_ok: u64,
    pub syncs_failed: u64,
}

impl SyncSummary {
    /// The summary of the runner's `status` at `now` (the runner's clock).
    pub fn of(status: &crate::sync::Status, now: Instant) -> SyncSummary {
        let since = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_secs());
        SyncSummary {
            ready: status.ready,
            // Whole seconds: the age beside it is in seconds too.
            last_success: status.last_success_at.map(|t: Timestamp| {
                Timestamp::from_second(t.as_second())
                    .map_or(t, |s| s)
                    .to_string()
            }),
            seconds_since_success: since(status.last_success),
            failing_for_seconds: since(status.failing_since),
            pending_for_seconds: since(status.oldest_pending_since),
            syncs_ok: status.syncs_ok,
            syncs_failed: status.syncs_failed,
        }
    }
}

/// The whole answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub node: String,
    pub mode: &'static str,
    /// What the mode's state is called in a sentence ("rules", or "maps"): the text's word,
    /// not part of the JSON.
    #[serde(skip)]
    pub noun: &'static str,
    /// Where the "programmed" side comes from: the kernel (a running proxy's node), or the
    /// plan (offline, from manifests).
    pub rules_from: RulesFrom,
    pub sync: SyncSummary,
    /// Where the kernel's objects differ from the plan, for the whole node.
    pub drift: Vec<String>,
    pub service_ports: Vec<PortStatus>,
}

/// One Service port.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortStatus {
    /// `namespace/name:port`.
    pub name: String,
    pub protocol: &'static str,
    pub internal_traffic_policy: TrafficPolicy,
    pub external_traffic_policy: TrafficPolicy,
    pub frontends: Vec<FrontendStatus>,
    /// Endpoints the model chose for ClusterIP traffic, over the port's families.
    pub endpoints: usize,
    /// Endpoints the rules send ClusterIP traffic from this node to; `None` when the kernel's
    /// rules were not read, or not traced (a whole iptables node).
    pub programmed: Option<usize>,
    pub health_check: Option<HealthCheckStatus>,
}

impl PortStatus {
    /// Frontends whose kernel outcome differs from the plan's.
    pub fn drifted(&self) -> usize {
        self.frontends.iter().filter(|f| f.drift.is_some()).count()
    }
}

/// One address and port a client reaches the Service port on.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FrontendStatus {
    /// `ClusterIP`, `NodePort`, `externalIP` or `LoadBalancer`.
    pub kind: &'static str,
    pub address: SocketAddr,
    /// What a new connection meets here, through the kernel's rules (or the plan's); `None`
    /// when not traced (the whole node without the kernel's rules).
    pub outcome: Option<String>,
    /// How the kernel's outcome differs from the plan's; `None` when they agree.
    pub drift: Option<String>,
}

/// The Service's health check (LoadBalancer with `externalTrafficPolicy: Local`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    pub port: u16,
    /// Ready endpoints of the Service on this node, as the check reports them.
    pub local_endpoints: usize,
    /// `serving`, `bindFailing` or `notOpen`.
    pub state: &'static str,
    pub addresses: Vec<SocketAddr>,
}

/// What [`build`] reads.
pub struct Inputs<'a> {
    pub snapshot: &'a Snapshot,
    pub node: &'a NodePolicy,
    /// The plan's rules, per family (index [`IpFamily::index`](crate::cluster::IpFamily::index)).
    pub planned: [&'a dyn Rules; 2],
    /// The kernel's rules, per family; `None` when not read.
    pub kernel: Option<[&'a dyn Rules; 2]>,
    /// The kernel's drift from the plan, for the whole node.
    pub drift: Vec<String>,
    pub runtime: &'a Runtime,
    /// Only this Service (`namespace/name`), or this port (`namespace/name:port`).
    pub service: Option<&'a str>,
}

/// The status of every Service port in `inputs` (or of the one asked for).
pub fn build(inputs: Inputs<'_>) -> Status {
    let s = inputs.snapshot;
    let checks = desired(s);
    let wanted = |state: &ServicePortState| match inputs.service {
        None => true,
        Some(w) => {
            let name = state.port.name.to_string();
            name == w || state.port.name.service.to_string() == w
        }
    };
    let service_ports = s
        .ports
        .values()
        .filter(|state| wanted(state))
        .map(|state| PortStatus {
            health_check: health_check(state, &checks, inputs.runtime),
            ..port_status(&inputs, state)
        })
        .collect();
    Status {
        node: s.node.name.to_string(),
        mode: inputs.planned[0].mode(),
        noun: inputs.planned[0].noun(),
        rules_from: if inputs.kernel.is_some() {
            RulesFrom::Kernel
        } else {
            RulesFrom::Planned
        },
        sync: inputs.runtime.sync.clone(),
        drift: inputs.drift.clone(),
        service_ports,
    }
}

/// The port's Service health check, when it has one: what it reports and how it is served.
fn health_check(
    state: &ServicePortState,
    checks: &BTreeMap<crate::cluster::ServiceKey, Check>,
    runtime: &Runtime,
) -> Option<HealthCheckStatus> {
    let port = state.port.health_check_node_port?;
    let key = &state.port.name.service;
    let local_endpoints = checks.get(key).map_or(0, |c| {
        let counts = c.local_endpoints.families().values();
        counts.copied().max().unwrap_or(0)
    });
    let (state, addresses) = match runtime.health_checks.get(key) {
        Some(Serving::Listening(a)) => ("serving", a.clone()),
        Some(Serving::BindFailing) => ("bindFailing", Vec::new()),
        None => ("notOpen", Vec::new()),
    };
    Some(HealthCheckStatus {
        port,
        local_endpoints,
        state,
        addresses,
    })
}

fn port_status(inputs: &Inputs<'_>, state: &ServicePortState) -> PortStatus {
    let p = &state.port;
    // Without the kernel's rules there is no drift to find: the whole node's table is then
    // built without tracing; one Service asked for is traced through the plan. In iptables
    // mode the whole node's table is not traced either: its tracer walks KUBE-SERVICES rule by
    // rule, and every frontend of 10,000 Services traced twice takes about a minute
    // (benches/explain.rs); the kernel's drift is still told for the node, and one Service
    // asked for is traced through the kernel's rules.
    let whole_node = inputs.kernel.is_some() && inputs.planned[0].traces_whole_node();
    let traced = whole_node || inputs.service.is_some();
    // Socket load balancing (ebpf mode) acts for this node's own sockets only: its external
    // frontends are traced from the node, where they are programmed.
    let external_from = || {
        if inputs.planned[0].external_from_node() {
            From::Node
        } else {
            From::Outside
        }
    };
    let mut frontends = Vec::new();
    let mut endpoints = 0;
    let mut programmed: BTreeSet<SocketAddr> = BTreeSet::new();
    for view in &state.families {
        let family = view.family;
        let chosen = match p.internal_policy {
            TrafficPolicy::Cluster => view.cluster_endpoints().map(Iterator::count),
            TrafficPolicy::Local => view.local_endpoints().map(Iterator::count),
        };
        endpoints += chosen.unwrap_or(0);
        let planned = inputs.planned[family.index()];
        let kernel = inputs.kernel.map(|k| k[family.index()]);
        let mut trace = |kind: &'static str, ip: IpAddr, port: u16, from: From| {
            let request = Request {
                protocol: p.name.protocol,
                to: SocketAddr::new(ip, port),
                from,
                in_interface: None,
            };
            let mut status = FrontendStatus {
                kind,
                address: request.to,
                outcome: None,
                drift: None,
            };
            let mut read = None;
            if traced {
                let outcome = |rules| {
                    explain::outcome_only(inputs.snapshot, inputs.node, rules, &request).ok()
                };
                let want = outcome(planned);
                read = kernel.and_then(outcome);
                if let (Some(w), Some(r)) = (&want, &read)
                    && r != w
                {
                    // Masquerading is named only where it is (part of) the difference.
                    let masq = r.masquerade != w.masquerade;
                    status.drift = Some(format!(
                        "kernel {}; plan {}",
                        describe(r, masq),
                        describe(w, masq)
                    ));
                }
                status.outcome = read.as_ref().or(want.as_ref()).map(|o| describe(o, false));
            }
            frontends.push(status);
            read
        };
        if let Some(read) = trace("ClusterIP", view.cluster_ip, p.port, From::Node) {
            programmed.extend(read.endpoints.iter().map(|s| s.endpoint));
        }
        for ip in &view.external_ips {
            trace("externalIP", *ip, p.port, external_from());
        }
        for ip in &view.load_balancer_ips {
            trace("LoadBalancer", *ip, p.port, external_from());
        }
        if let (Some(node_port), Some(ip)) = (p.node_port, inputs.snapshot.node.primary_ip(family))
        {
            trace("NodePort", ip, node_port, external_from());
        }
    }
    PortStatus {
        name: p.name.to_string(),
        protocol: p.name.protocol.as_str(),
        internal_traffic_policy: p.internal_policy,
        external_traffic_policy: p.external_policy,
        frontends,
        endpoints,
        programmed: inputs.kernel.filter(|_| traced).map(|_| programmed.len()),
        health_check: None,
    }
}

/// Why `service` is not a Service or Service port name (`NS/NAME[:PORT]`), if it is not.
pub fn bad_service(service: &str) -> Option<BadService> {
    let ok = service.len() <= 512
        && service.split_once('/').is_some_and(|(ns, rest)| {
            !ns.is_empty()
                && !rest.is_empty()
                && service
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._/:".contains(c))
        });
    (!ok).then_some(BadService)
}

/// A `service` parameter that is not `NAMESPACE/NAME[:PORT]` of query-safe characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("service: expected NAMESPACE/NAME or NAMESPACE/NAME:PORT")]
pub struct BadService;

/// What a new connection meets, in a few words; with `masquerade`, whether its source is
/// rewritten.
fn describe(o: &Outcome, masquerade: bool) -> String {
    let endpoints = || {
        let mut named: Vec<String> = o
            .endpoints
            .iter()
            .take(DRIFT_ENDPOINTS)
            .map(|s| s.endpoint.to_string())
            .collect();
        if o.endpoints.len() > DRIFT_ENDPOINTS {
            named.push(format!("{} more", o.endpoints.len() - DRIFT_ENDPOINTS));
        }
        named.join(", ")
    };
    match o.verdict {
        Verdict::Forwarded => format!(
            "forwards to {} endpoint{} ({}){}",
            o.endpoints.len(),
            if o.endpoints.len() == 1 { "" } else { "s" },
            endpoints(),
            match (masquerade, o.masquerade) {
                (true, Some(true)) => ", masqueraded",
                (true, Some(false)) => ", source kept",
                _ => "",
            }
        ),
        Verdict::Untouched => "leaves it untouched".into(),
        Verdict::Rejected => "rejects it".into(),
        Verdict::Dropped => "drops it".into(),
        Verdict::Mixed => format!("ends differently by path ({})", endpoints()),
    }
}

#[cfg(test)]
mod tests;
