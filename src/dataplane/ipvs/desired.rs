//! The IPVS mode's desired kernel state for one family, as plain values: the virtual services
//! with their destinations, the service addresses for [`LINK`](super::names::LINK), and what
//! the helper rules must do where IPVS alone would not behave as kube-proxy does.
//!
//! Pure data, built by [`plan`](super::plan); the applier diffs it against what the kernel holds.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use ipnet::IpNet;

use super::backend::link::ServiceAddresses;
use super::backend::netlink::{Destination, Service, ServiceKey};
use crate::cluster::{IpFamily, Protocol, ServicePortName};

/// Which frontend of a Service a virtual service is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Frontend {
    ClusterIp,
    ExternalIp,
    LoadBalancer,
    /// A NodePort on one of the node's addresses (upstream's layout: one virtual service per
    /// node address and NodePort).
    NodePort,
}

/// What the helper rules must add to IPVS for one virtual service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Guard {
    /// Nothing: IPVS schedules among the destinations.
    None,
    /// No endpoint anywhere: refuse at once (TCP reset; ICMP port unreachable otherwise), as
    /// the other modes do. IPVS alone answers even TCP with an ICMP error, which the kernel
    /// rate-limits per host.
    Reject,
    /// A `Local` policy with no endpoint on this node while some exist elsewhere: drop, as
    /// upstream's iptables and nftables modes do.
    Drop,
    /// `externalTrafficPolicy: Local` with no endpoint on this node: traffic from outside the
    /// node is dropped (its replies would carry a pod's address, kubernetes#97081); pods and
    /// the node itself reach the cluster's endpoints, which are the destinations.
    DropFromOutside,
}

/// Which connections to a virtual service leave the node with the node's address as source,
/// so the endpoint's replies come back through this node (IPVS rewrites only the destination).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Masquerade {
    /// A ClusterIP: everything with `masqueradeAll`; else what does not come from this node's
    /// pods (detect-local); else what the node itself sends, whose source is a bound service
    /// address (upstream marks those by `src,dst`).
    ClusterIp,
    /// An external frontend with `externalTrafficPolicy: Cluster`: every connection.
    Always,
    /// An external frontend with `externalTrafficPolicy: Local`: what the node itself sends
    /// (clients outside keep their address; pods are routed back through this node anyway).
    FromNode,
}

/// One virtual service as the plan wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualService {
    pub service: Service,
    /// Sorted by address; each with weight 1. Draining (weight 0) is the applier's business.
    pub destinations: Vec<Destination>,
    /// The service port it serves, for logs, metrics and `explain`.
    pub owner: ServicePortName,
    pub frontend: Frontend,
    pub guard: Guard,
    pub masquerade: Masquerade,
    /// `loadBalancerSourceRanges` of a LoadBalancer frontend, with the Service's own VIPs when
    /// the node lies inside a range, folded to disjoint networks: only these sources may
    /// connect. `None`: no restriction.
    pub allowed_sources: Option<Vec<IpNet>>,
}

impl VirtualService {
    /// Kernel objects it is: the virtual service and its destinations.
    pub fn objects(&self) -> usize {
        1 + self.destinations.len()
    }
}

/// One family's desired IPVS state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub family: IpFamily,
    pub services: BTreeMap<ServiceKey, VirtualService>,
    /// The service addresses to make local on the dummy link, by kind; which of them are
    /// bound is upstream's rule, applied against the host's addresses of the same sync by
    /// [`address_changes`](super::backend::link::address_changes).
    pub addresses: ServiceAddresses,
    /// The endpoints on this node, by address, port and protocol: a pod sent to itself through
    /// a service must be masqueraded, or it would answer itself from its own address.
    pub hairpin: BTreeSet<(SocketAddr, Protocol)>,
}

impl Desired {
    pub fn new(family: IpFamily) -> Desired {
        Desired {
            family,
            services: BTreeMap::new(),
            addresses: ServiceAddresses::default(),
            hairpin: BTreeSet::new(),
        }
    }

    /// Kernel objects this state holds: virtual services, destinations and service addresses
    /// (those already on another interface are counted too).
    pub fn objects(&self) -> usize {
        self.services
            .values()
            .map(VirtualService::objects)
            .sum::<usize>()
            + self.addresses.cluster_ips.len()
            + self.addresses.external.len()
    }
}
