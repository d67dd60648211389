//! One service port in one family → its elements in the shared sets and maps.
//!
//! Pure. A service port never gets a chain of its own (except for ClientIP affinity, see
//! `affinity`): each frontend is an element of `service-ips` / `service-nodeports` naming its
//! treatment chain, an element of a dispatch map naming the pick chain for its endpoint count,
//! and one backends element per endpoint. Rules of upstream's documented behaviour, in our words:
//! - ClusterIP traffic uses the internal-policy endpoints; externalIP, LoadBalancer and NodePort
//!   traffic the external-policy ones (with `Local`, pods and the host short-circuit to the
//!   cluster endpoints).
//! - No usable endpoint anywhere: every frontend rejects. Endpoints exist but none for a
//!   frontend's policy (a `Local` policy without a local endpoint): that frontend drops.
//! - loadBalancerSourceRanges apply to LoadBalancer IPs only, not to NodePorts or externalIPs;
//!   when a node address is inside a range, the LoadBalancer IPs are allowed as sources too
//!   (traffic the node loops back to its own VIP).

use std::net::IpAddr;

use super::Builder;
use super::affinity;
use crate::cluster::model::{FamilyView, ServicePort, TrafficPolicy};
use crate::dataplane::nftables::names::{self as n, FrontendKind, ListKind};
use crate::dataplane::node::source_ranges;
use crate::nft::Name;
use crate::nft::ruleset::{Comment, Data, Tuple, Value, Verdict};

/// Where a frontend's traffic goes first.
#[derive(Clone, Copy)]
enum Treatment {
    ClusterIp,
    ExternalCluster,
    ExternalLocal,
}

/// An endpoint list of this service port: which list, and the endpoint indices in it.
struct List<'v> {
    kind: ListKind,
    indices: &'v [u32],
}

pub(super) fn add(b: &mut Builder, port: &ServicePort, view: &FamilyView) {
    let proto = port.name.protocol;
    let comment = Comment::sanitised(&port.name.to_string());
    let sel = &view.selection;
    let list = |policy: TrafficPolicy| {
        let (kind, indices) = match policy {
            TrafficPolicy::Cluster => (ListKind::Cluster, sel.cluster.as_deref()),
            TrafficPolicy::Local => (ListKind::Local, sel.local.as_deref()),
        };
        List {
            kind,
            indices: indices.unwrap_or(&[]),
        }
    };
    let svc = Svc {
        port,
        view,
        comment: &comment,
    };

    b.element(
        &Name::fixed(n::CLUSTER_IPS),
        Tuple::new(&[Value::Addr(view.cluster_ip)]),
        Data::None,
        None,
    );
    svc.frontend(
        b,
        Frontend::Ip(view.cluster_ip),
        Treatment::ClusterIp,
        list(port.internal_policy),
        None,
    );

    let (treatment, short) = match port.external_policy {
        TrafficPolicy::Cluster => (Treatment::ExternalCluster, None),
        TrafficPolicy::Local => (Treatment::ExternalLocal, Some(list(TrafficPolicy::Cluster))),
    };
    let external = || list(port.external_policy);
    let short = || {
        short.as_ref().map(|l| List {
            kind: l.kind,
            indices: l.indices,
        })
    };
    for &ip in view.external_ips.iter().chain(&view.load_balancer_ips) {
        svc.frontend(b, Frontend::Ip(ip), treatment, external(), short());
    }
    if let Some(node_port) = port.node_port {
        svc.frontend(
            b,
            Frontend::NodePort(node_port),
            treatment,
            external(),
            short(),
        );
    }
    if !view.load_balancer_source_ranges.is_empty() {
        firewall(b, port, view, &comment);
    }
    for ep in view.reachable_endpoints().filter(|e| e.is_local) {
        let key = [
            Value::Addr(ep.ip),
            Value::Addr(ep.ip),
            Value::Proto(proto),
            Value::Port(ep.port),
        ];
        b.element(&Name::fixed(n::HAIRPIN), Tuple::new(&key), Data::None, None);
    }
}

#[derive(Clone, Copy)]
enum Frontend {
    Ip(IpAddr),
    NodePort(u16),
}

struct Svc<'a> {
    port: &'a ServicePort,
    view: &'a FamilyView,
    comment: &'a Comment,
}

impl Svc<'_> {
    fn key(&self, frontend: Frontend, extra: Option<Value>) -> Tuple {
        let proto = Value::Proto(self.port.name.protocol);
        let (parts, len) = match frontend {
            Frontend::Ip(ip) => (
                [
                    Value::Addr(ip),
                    proto,
                    Value::Port(self.port.port),
                    Value::Index(0),
                ],
                3,
            ),
            Frontend::NodePort(p) => ([proto, Value::Port(p), Value::Index(0), Value::Index(0)], 2),
        };
        let mut parts = parts;
        match extra {
            Some(v) => {
                parts[len] = v;
                Tuple::new(&parts[..=len])
            }
            None => Tuple::new(&parts[..len]),
        }
    }

    /// Programs one frontend: its no-endpoint verdict, its treatment, its dispatch to the
    /// primary list and, for `Local` external policy, to the cluster list for short-circuits.
    fn frontend(
        &self,
        b: &mut Builder,
        frontend: Frontend,
        treatment: Treatment,
        primary: List,
        short: Option<List>,
    ) {
        let (kind, treatments, no_endpoints, dispatch, dispatch_cluster) = match frontend {
            Frontend::Ip(_) => (
                FrontendKind::Ip,
                n::SERVICE_IPS,
                n::NO_ENDPOINT_SERVICES,
                n::DISPATCH,
                n::DISPATCH_CLUSTER,
            ),
            Frontend::NodePort(_) => (
                FrontendKind::NodePort,
                n::SERVICE_NODEPORTS,
                n::NO_ENDPOINT_NODEPORTS,
                n::NODEPORT_DISPATCH,
                n::NODEPORT_DISPATCH_CLUSTER,
            ),
        };
        let key = self.key(frontend, None);
        let comment = Some(self.comment);
        if !self.view.selection.has_any_endpoints {
            let reject = Verdict::Goto(Name::fixed(n::REJECT_CHAIN));
            b.element(
                &Name::fixed(no_endpoints),
                key,
                Data::Verdict(reject),
                comment,
            );
            return;
        }
        if primary.indices.is_empty() {
            b.element(
                &Name::fixed(no_endpoints),
                key,
                Data::Verdict(Verdict::Drop),
                comment,
            );
        }
        let short = short.filter(|l| !l.indices.is_empty());
        if primary.indices.is_empty() && short.is_none() {
            return;
        }
        let chain = match (frontend, treatment) {
            (Frontend::Ip(_), Treatment::ClusterIp) => n::CLUSTER_IP,
            (Frontend::Ip(_), Treatment::ExternalCluster) => n::EXTERNAL,
            (Frontend::Ip(_), Treatment::ExternalLocal) => n::EXTERNAL_LOCAL,
            (Frontend::NodePort(_), Treatment::ExternalLocal) => n::NODEPORT_LOCAL,
            (Frontend::NodePort(_), _) => n::NODEPORT,
        };
        let goto = Verdict::Goto(Name::fixed(chain));
        b.element(&Name::fixed(treatments), key, Data::Verdict(goto), comment);
        for (list, map) in [(Some(primary), dispatch), (short, dispatch_cluster)] {
            let Some(list) = list.filter(|l| !l.indices.is_empty()) else {
                continue;
            };
            let target = self.target(b, frontend, kind, &list);
            b.element(
                &Name::fixed(map),
                key,
                Data::Verdict(Verdict::Goto(target)),
                comment,
            );
        }
    }

    /// The chain that picks from `list` for this frontend, adding the backends elements it
    /// reads (or the affinity chain, which carries its endpoints itself).
    fn target(&self, b: &mut Builder, frontend: Frontend, kind: FrontendKind, list: &List) -> Name {
        if let Some(timeout) = self.port.affinity_timeout_seconds {
            return affinity::chain(b, self.port, self.view, list.kind, list.indices, timeout);
        }
        let count = list.indices.len() as u32;
        let pick = b.pick_chain(kind, list.kind, count);
        let backends = n::backends(kind, list.kind, count);
        for (i, &ix) in list.indices.iter().enumerate() {
            let ep = &self.view.endpoints[ix as usize];
            let key = self.key(frontend, Some(Value::Index(i as u32)));
            let data = Tuple::new(&[Value::Addr(ep.ip), Value::Port(ep.port)]);
            b.element(&backends, key, Data::Values(data), None);
        }
        pick
    }
}

fn firewall(b: &mut Builder, port: &ServicePort, view: &FamilyView, comment: &Comment) {
    let proto = Value::Proto(port.name.protocol);
    let outermost = source_ranges::allowed_disjoint(view, b.node);
    for &lb in &view.load_balancer_ips {
        let frontend = [Value::Addr(lb), proto, Value::Port(port.port)];
        b.element(
            &Name::fixed(n::FIREWALL_IPS),
            Tuple::new(&frontend),
            Data::None,
            Some(comment),
        );
        for &net in &outermost {
            let key = [
                Value::Addr(lb),
                proto,
                Value::Port(port.port),
                Value::Net(net),
            ];
            b.element(
                &Name::fixed(n::FIREWALL_ALLOW),
                Tuple::new(&key),
                Data::None,
                None,
            );
        }
    }
}
