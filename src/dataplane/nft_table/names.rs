//! The names of our table's chains and sets that more than one mode uses.
//!
//! Pure. Names are interfaces: operators grep for them, dashboards and runbooks quote them, and
//! the applier recognises our objects by them. Upstream's chain names are reused where a chain
//! plays the same role (`masquerading`, `firewall-check`, `reject-chain`, `service-ips`, ...),
//! so habits carry over. The table's name (`kube-proxy-rs`, not upstream's `kube-proxy`) is the
//! library's [`TABLE`](crate::nft::TABLE). A name only one mode uses is in that mode's
//! `names.rs`.

// Base chains: `<type>-<hook>[-<role>]`, as upstream names them; where each hooks is
// [`super::skeleton::BASE_CHAINS`].
pub const NAT_PREROUTING: &str = "nat-prerouting";
pub const NAT_OUTPUT: &str = "nat-output";
pub const NAT_POSTROUTING: &str = "nat-postrouting";
pub const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
pub const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";
pub const FILTER_INPUT: &str = "filter-input";
pub const FILTER_FORWARD: &str = "filter-forward";
pub const FILTER_OUTPUT: &str = "filter-output";

// Regular chains with one fixed role each.
/// Treatment of ClusterIP traffic: masquerade marking, then the internal-policy endpoints.
pub const CLUSTER_IP: &str = "cluster-ip";
/// Treatment of externalIP / LoadBalancer traffic under `externalTrafficPolicy: Cluster`.
pub const EXTERNAL: &str = "external";
/// Treatment of externalIP / LoadBalancer traffic under `externalTrafficPolicy: Local`.
pub const EXTERNAL_LOCAL: &str = "external-local";
/// SNAT of marked and hairpin traffic (upstream's name).
pub const MASQUERADING: &str = "masquerading";
/// loadBalancerSourceRanges enforcement, before DNAT (upstream's name).
pub const FIREWALL_CHECK: &str = "firewall-check";
/// Rejects ClusterIP traffic to a port no Service defines (upstream's name).
pub const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
/// A chain holding only `reject`, the target of "no endpoints" verdicts (upstream's name).
pub const REJECT_CHAIN: &str = "reject-chain";

// Sets and maps with one fixed role each.
/// Frontend (ip . proto . port) → treatment chain (upstream's name).
pub const SERVICE_IPS: &str = "service-ips";
/// Every ClusterIP (upstream's name).
pub const CLUSTER_IPS: &str = "cluster-ips";
/// Frontend → `goto reject-chain` or `drop` (upstream's name).
pub const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
/// LoadBalancer frontends that have source ranges.
pub const FIREWALL_IPS: &str = "firewall-ips";
/// (LoadBalancer frontend . allowed source range), interval set.
pub const FIREWALL_ALLOW: &str = "firewall-allow";
/// (endpoint . endpoint . proto . port) of local endpoints: pods reaching themselves
/// (upstream's name).
pub const HAIRPIN: &str = "hairpin-connections";
