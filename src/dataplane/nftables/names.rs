//! Every kernel-visible name of the nftables mode, and how per-object names are derived: the
//! names only this mode uses are defined here, and the shared table's names
//! ([`nft_table::names`](crate::dataplane::nft_table::names)) are re-exported, so the planner
//! reads every name from one place.
//!
//! Pure. Names are interfaces: operators grep for them, dashboards and runbooks quote them, and
//! the applier recognises our objects by them. Upstream's chain names are reused where a chain
//! plays the same role (`services`, `service-endpoints-check`, `nodeport-endpoints-check`,
//! ...), so habits carry over.
//!
//! No text from an API object ever becomes part of a name: the few per-object names (affinity
//! chains and sets) are hashes, and [`Name`] can only hold `[a-z0-9-]`, so a name can never
//! close a quote or start a new statement in rendered text.

pub use crate::dataplane::nft_table::names::*;
use crate::nft::Name;

// Regular chains with one fixed role each.
/// Captures Service traffic: frontend lookup, then NodePorts (upstream's name).
pub const SERVICES: &str = "services";
/// Treatment of NodePort traffic under `externalTrafficPolicy: Cluster`.
pub const NODEPORT: &str = "nodeport";
/// Treatment of NodePort traffic under `externalTrafficPolicy: Local`.
pub const NODEPORT_LOCAL: &str = "nodeport-local";
/// REJECT / DROP for frontends without (local) endpoints (upstream's name).
pub const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
/// The same for NodePorts (upstream's name).
pub const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";

// Sets and maps with one fixed role each.
/// NodePort (proto . port) → treatment chain (upstream's name).
pub const SERVICE_NODEPORTS: &str = "service-nodeports";
/// Node addresses that accept NodePorts, when nodePortAddresses is not `all` (upstream's name).
pub const NODEPORT_IPS: &str = "nodeport-ips";
/// NodePort → `goto reject-chain` or `drop` (upstream's name).
pub const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
/// Frontend → the chain that picks from its policy's endpoints.
pub const DISPATCH: &str = "dispatch";
/// Frontend → the chain that picks from its cluster endpoints (externalTrafficPolicy Local
/// short-circuits only).
pub const DISPATCH_CLUSTER: &str = "dispatch-cluster";
/// NodePort → the chain that picks from its policy's endpoints.
pub const NODEPORT_DISPATCH: &str = "nodeport-dispatch";
/// NodePort → the chain that picks from its cluster endpoints (short-circuits only).
pub const NODEPORT_DISPATCH_CLUSTER: &str = "nodeport-dispatch-cluster";

/// Which endpoint list of a service port a backends map or pick chain serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListKind {
    Cluster,
    Local,
}

impl ListKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Cluster => "cluster",
            ListKind::Local => "local",
        }
    }
}

/// How a frontend is looked up: by destination address (ClusterIP, externalIP, LoadBalancer IP)
/// or by port alone (NodePort, on any accepted node address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FrontendKind {
    Ip,
    NodePort,
}

/// The backends map of the pick chain for `count` endpoints of a list kind: (frontend . index) →
/// endpoint (`cluster-endpoints-3`, `nodeport-local-endpoints-1`). One map per pick chain, created
/// and deleted with it, because nft 1.0.6 refuses a rule that reads a map made in an earlier
/// transaction when the map's data is declared with `th dport` ("conflicting protocols
/// specified: ip vs. th"): a new pick chain must always come with its own new map.
pub fn backends(frontend: FrontendKind, list: ListKind, count: u32) -> Name {
    let base = match (frontend, list) {
        (FrontendKind::Ip, ListKind::Cluster) => "cluster-endpoints",
        (FrontendKind::Ip, ListKind::Local) => "local-endpoints",
        (FrontendKind::NodePort, ListKind::Cluster) => "nodeport-cluster-endpoints",
        (FrontendKind::NodePort, ListKind::Local) => "nodeport-local-endpoints",
    };
    Name::derived(format!("{base}-{count}"))
}

/// The chain that picks one of `count` endpoints from a backends map: one chain per distinct
/// endpoint count, never one per Service (`pick-cluster-3`, `pick-nodeport-local-1`).
pub fn pick(frontend: FrontendKind, list: ListKind, count: u32) -> Name {
    let what = match frontend {
        FrontendKind::Ip => "",
        FrontendKind::NodePort => "nodeport-",
    };
    Name::derived(format!("pick-{what}{}-{count}", list.as_str()))
}

/// The chain of one endpoint list with ClientIP affinity: `affinity-<16 hex>`, the hash of
/// `seed` (service port, family, list kind; see the planner).
pub fn affinity_chain(seed: &str) -> Name {
    Name::derived(format!("affinity-{:016x}", fnv1a(seed.as_bytes())))
}

/// The dynamic set remembering the clients sent to one endpoint of an affinity chain:
/// `<chain>-<16 hex of the endpoint>`.
pub fn affinity_set(chain: &Name, endpoint: &str) -> Name {
    Name::derived(format!("{chain}-{:016x}", fnv1a(endpoint.as_bytes())))
}

/// 64-bit FNV-1a: stable across versions and platforms, which object names must be. It is not
/// collision resistant, so the planner checks derived names for collisions itself.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_are_valid_and_stable() {
        let chain = affinity_chain("default/web:http/TCP/IPv4/cluster");
        assert_eq!(chain.as_str(), "affinity-1a80a0eea7757362");
        // The published FNV-1a 64 test vector: names must not change between versions.
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let set = affinity_set(&chain, "10.0.0.1:80");
        assert!(Name::parse(set.as_str()).is_some());
        assert_eq!(
            pick(FrontendKind::NodePort, ListKind::Local, 3).as_str(),
            "pick-nodeport-local-3"
        );
    }
}
