//! Userspace mode (issue 21): the proxy carries each connection's bytes itself instead of
//! leaving them to NAT rules, so it can do what a rule cannot: try another endpoint when one
//! refuses or does not answer. Upstream removed its userspace proxier in 1.26; this is ours.
//!
//! # What this phase covers
//! - [`relay`]: the relay core on tokio. A TCP or UDP listener per service port and family;
//!   round-robin over the endpoints the model selected, ClientIP affinity with the Service's
//!   timeout, dials bounded by a timeout and retried on the next endpoint with backoff,
//!   relaying both ways with half-close, live endpoint changes (connections to removed
//!   endpoints close, the others stay), UDP flows with an idle timeout, connection limits per
//!   service and overall, and counters per service.
//!
//! # What is left
//! - The mode wiring: `--proxy-mode userspace`, the `Dataplane` that reconciles one relay
//!   listener per service port and family from the snapshot's endpoint selection, on ports
//!   from `--proxy-port-range` and `--bind-address`.
//! - The redirect rules: our own nftables table sending ClusterIPs, externalIPs, LoadBalancer
//!   IPs and NodePorts (from pods and from the node) to the listeners.
//! - Lab scenarios in this mode, metrics export of the relay's counters under our prefix, and
//!   `--nodeport-localhost` for nftables mode (NodePorts on 127.0.0.1 through this relay).

pub mod apply;
pub mod plan;
pub mod ports;
pub mod relay;

pub use apply::UserspaceDataplane;
