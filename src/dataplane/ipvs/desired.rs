//! The IPVS mode's desired kernel state for one family, as plain values: the virtual services
//! with their destinations, the service addresses for [`LINK`](super::names::LINK), and what
//! the helper rules must do where IPVS alone would not behave as kube-proxy does.
//!
//! Pure data, built by [`plan`](super::plan); the applier diffs it against what the kernel holds.

use std::collections::BTreeMap;

use super::backend::link::ServiceAddresses;
use super::backend::netlink::{Destination, Service, ServiceKey};
use crate::cluster::{IpFamily, ServicePortName};

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
}

impl Desired {
    pub fn new(family: IpFamily) -> Desired {
        Desired {
            family,
            services: BTreeMap::new(),
            addresses: ServiceAddresses::default(),
        }
    }

    /// Kernel objects this state holds: virtual services, destinations and service addresses
    /// (those already on another interface are counted too).
    pub fn objects(&self) -> usize {
        self.services
            .values()
            .map(|s| 1 + s.destinations.len())
            .sum::<usize>()
            + self.addresses.cluster_ips.len()
            + self.addresses.external.len()
    }
}
