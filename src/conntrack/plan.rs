//! Which conntrack flows are stale, given the current model: the pure half of the conntrack
//! reconciler.
//!
//! Pure: no I/O, never fails. [`Frontends::from_snapshot`] indexes the UDP and SCTP frontends of
//! a snapshot with the endpoints a flow to them may still be using; [`Frontends::judge`] decides
//! one flow. The rules, in our words (upstream behaviour: kube-proxy's conntrack cleanup after a
//! sync, as upstream documents it, with the differences marked):
//!
//! - Only UDP and SCTP flows are ever judged; TCP and everything else is left alone. TCP has
//!   connection state of its own: a stale TCP flow is reset by the endpoint or times out, and
//!   a new SYN matching a closed entry makes the kernel drop that entry and translate anew.
//! - A flow belongs to a frontend when its original destination is a ClusterIP, externalIP or
//!   LoadBalancer IP *and port and protocol* of a UDP/SCTP service port (upstream matches the
//!   IP only, so two ports of one ClusterIP overwrite each other's endpoint set), or else when
//!   its original destination port is a NodePort of that protocol and family and the flow was
//!   DNATed or is addressed to one of the node's addresses (upstream matches the port alone, so
//!   a pod's un-NATed flow to some outside server on port 30053 would be deleted too).
//! - It is valid while its reply source (the endpoint the kernel DNATed it to) is the address
//!   *and port* of an endpoint that is **serving** (ready, or terminating and still serving).
//!   Serving, not [`crate::cluster::FamilyView::reachable_endpoints`], on purpose: once a ready
//!   replacement exists, a terminating-but-serving endpoint drops out of the reachable set, yet
//!   KEP-1669 lets it finish the flows it has; deleting those would move a live UDP session
//!   mid-way. Topology and traffic policies likewise only steer new flows. This matches
//!   upstream, which also uses serving endpoints and ignores policy and topology.
//! - Any other flow of a frontend is stale: DNATed to an endpoint that is gone or no longer
//!   serving, or never DNATed at all (replies from the frontend itself: it was rejected or
//!   blackholed before the frontend had endpoints).
//! - A frontend without serving endpoints is left alone: its new flows are rejected anyway, and
//!   keeping the old ones lets them resume on the same endpoint when it serves again.
//! - In userspace mode ([`Translation::ToRelay`]) a DNATed flow went to the relay on this node,
//!   not to an endpoint: it is valid while it is DNATed to a port the relay listens on now for
//!   its protocol, whatever the address; one DNATed to another port (a listener closed since,
//!   or one of a relay process that is gone) is stale, as is a flow never DNATed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::flow::Flow;
use crate::cluster::{IpFamily, Protocol, Snapshot};

/// Endpoint addresses and target ports a flow of a frontend may use.
pub type Backends = Arc<BTreeSet<(IpAddr, u16)>>;

/// The UDP and SCTP frontends of one snapshot, with their serving endpoints. Cheap to compare,
/// so a reconcile can be skipped when a sync changed nothing that matters here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontends {
    /// `(protocol, frontend address, service port)` → serving endpoints; an empty set marks a
    /// frontend without any (left alone, but still known, so its flows are never judged by
    /// a NodePort of the same number).
    addresses: BTreeMap<(Protocol, IpAddr, u16), Backends>,
    /// `(protocol, family, node port)` → serving endpoints of that family.
    node_ports: BTreeMap<(Protocol, IpFamily, u16), Backends>,
    /// The node's addresses: un-NATed flows to a NodePort count only when sent to one of them.
    node_ips: BTreeSet<IpAddr>,
}

/// Where a mode's NAT sends a flow to a frontend, which decides when a DNATed flow is valid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Translation {
    /// To the endpoint itself (nftables, iptables and ipvs modes): valid while that endpoint
    /// serves.
    #[default]
    ToEndpoint,
    /// To a relay on this node (userspace mode), which chooses the endpoint of each session
    /// itself, listening on `ports` (with the protocol of each): a flow DNATed to one of its
    /// protocol is valid. One DNATed to another port is stale: its listener closed, or a relay
    /// process before this one opened it, and a client that keeps sending on one socket would
    /// never reach a listener while the entry lives. So is a flow never DNATed to a frontend
    /// that has endpoints: no redirect rule applied to its first packet.
    ToRelay {
        ports: Arc<BTreeSet<(Protocol, u16)>>,
    },
}

/// Why a flow is kept or deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Not a UDP/SCTP flow to any frontend we program.
    NotOurs,
    /// The frontend has no serving endpoint; its flows are left alone.
    NoEndpoints,
    /// Replies come from a serving endpoint of the frontend.
    Valid,
    /// DNATed to an endpoint that is no longer serving, or to an old target port.
    StaleEndpoint,
    /// Never DNATed (the frontend itself replies), though the frontend now has endpoints.
    NotDnatted,
}

impl Judgement {
    pub fn stale(self) -> bool {
        matches!(self, Judgement::StaleEndpoint | Judgement::NotDnatted)
    }
}

impl Frontends {
    /// Indexes every UDP and SCTP service port of the snapshot.
    pub fn from_snapshot(snapshot: &Snapshot) -> Frontends {
        let mut frontends = Frontends {
            node_ips: snapshot.node.addresses.iter().map(|a| a.ip).collect(),
            ..Frontends::default()
        };
        for state in snapshot.ports.values() {
            let port = &state.port;
            let protocol = port.name.protocol;
            if protocol == Protocol::Tcp {
                continue;
            }
            for view in &state.families {
                let serving: BTreeSet<(IpAddr, u16)> = view
                    .endpoints
                    .iter()
                    .filter(|e| e.ready || e.serving)
                    .map(|e| (e.ip, e.port))
                    .collect();
                let backends = Arc::new(serving);
                let ips = std::iter::once(&view.cluster_ip)
                    .chain(&view.external_ips)
                    .chain(&view.load_balancer_ips);
                for ip in ips {
                    let entry = frontends.addresses.entry((protocol, *ip, port.port));
                    union_into(entry.or_default(), &backends);
                }
                if let Some(node_port) = port.node_port {
                    let entry = frontends
                        .node_ports
                        .entry((protocol, view.family, node_port));
                    union_into(entry.or_default(), &backends);
                }
            }
        }
        frontends
    }

    /// Whether no UDP or SCTP frontend exists: a reconcile has nothing to look for.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.node_ports.is_empty()
    }

    /// Decides one flow of a mode whose NAT goes to the endpoint.
    pub fn judge(&self, flow: &Flow) -> Judgement {
        self.judge_as(flow, &Translation::ToEndpoint)
    }

    /// Decides one flow of a mode whose NAT works as `translation` says.
    pub fn judge_as(&self, flow: &Flow, translation: &Translation) -> Judgement {
        let Some(protocol) = flow.service_protocol() else {
            return Judgement::NotOurs;
        };
        if protocol == Protocol::Tcp {
            return Judgement::NotOurs;
        }
        let o = &flow.original;
        let reply_from = (flow.reply.src, flow.reply.src_port);
        if let Some(backends) = self.addresses.get(&(protocol, o.dst, o.dst_port)) {
            return against(backends, reply_from, flow, translation);
        }
        let node_port = (protocol, flow.family(), o.dst_port);
        match self.node_ports.get(&node_port) {
            Some(backends) if flow.dnatted() || self.node_ips.contains(&o.dst) => {
                against(backends, reply_from, flow, translation)
            }
            _ => Judgement::NotOurs,
        }
    }

    /// Decides a connection that was translated from `frontend` to `backend` without
    /// conntrack (the eBPF mode's socket programs rewrite a connected socket's peer): the same
    /// rules as [`Frontends::judge`] for a DNATed flow whose reply comes from `backend`.
    pub fn judge_translated(
        &self,
        protocol: Protocol,
        frontend: SocketAddr,
        backend: SocketAddr,
    ) -> Judgement {
        if protocol == Protocol::Tcp {
            return Judgement::NotOurs;
        }
        let to = (backend.ip(), backend.port());
        let by_address = self
            .addresses
            .get(&(protocol, frontend.ip(), frontend.port()));
        let family = IpFamily::of(&frontend.ip());
        let Some(backends) =
            by_address.or_else(|| self.node_ports.get(&(protocol, family, frontend.port())))
        else {
            return Judgement::NotOurs;
        };
        if backends.is_empty() {
            Judgement::NoEndpoints
        } else if backends.contains(&to) {
            Judgement::Valid
        } else {
            Judgement::StaleEndpoint
        }
    }

    /// The stale flows among `flows`, in their order.
    pub fn stale<'a>(
        &self,
        flows: &'a [Flow],
        translation: &'a Translation,
    ) -> impl Iterator<Item = &'a Flow> {
        flows
            .iter()
            .filter(move |f| self.judge_as(f, translation).stale())
    }
}

/// Adds `more` to `into`, sharing the set when `into` is still empty.
fn union_into(into: &mut Backends, more: &Backends) {
    if into.is_empty() {
        *into = more.clone();
    } else if !more.is_subset(into) {
        Arc::make_mut(into).extend(more.iter().copied());
    }
}

fn against(
    backends: &Backends,
    reply_from: (IpAddr, u16),
    flow: &Flow,
    translation: &Translation,
) -> Judgement {
    let valid = match translation {
        Translation::ToEndpoint => backends.contains(&reply_from),
        Translation::ToRelay { ports } => {
            flow.dnatted()
                && flow
                    .service_protocol()
                    .is_some_and(|p| ports.contains(&(p, reply_from.1)))
        }
    };
    if backends.is_empty() {
        Judgement::NoEndpoints
    } else if valid {
        Judgement::Valid
    } else if flow.dnatted() {
        Judgement::StaleEndpoint
    } else {
        Judgement::NotDnatted
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
