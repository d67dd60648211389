//! Userspace mode: the proxy carries each connection's bytes itself instead of
//! leaving them to NAT rules, so it can do what a rule cannot: try another endpoint when one
//! refuses or does not answer. Upstream removed its userspace proxier in 1.26; this is ours.
//!
//! ```text
//!   Snapshot ──plan──▶ Listeners (one per service port, family and endpoint list)
//!                          │ apply: open / update in place / close, ports from portRange
//!                          ▼
//!   Service address ──▶ redirect (DNAT map) ──▶ relay::Listener ──▶ endpoints
//!                                                  (round-robin, affinity, retries)
//! ```
//!
//! # Parts
//! - [`relay`]: the relay core on tokio. A TCP or UDP listener per service port and family;
//!   round-robin over the endpoints the model selected, ClientIP affinity with the Service's
//!   timeout (one table per service port and family, shared by its listeners), dials bounded by a timeout and retried on the next endpoint with backoff,
//!   relaying both ways with half-close, live endpoint changes (connections to endpoints that
//!   left the slices close, the others stay, terminating ones too), UDP flows with an idle
//!   timeout whose replies leave from the address the client sent to, connection limits per
//!   Service (shared by its listeners) and overall, and counters per listener.
//! - [`plan`]: the listeners a snapshot asks for: one over the cluster-wide endpoints and one
//!   over this node's, as the port's frontends need them (the ClusterIP follows the internal
//!   policy; external frontends the external one from outside, and the cluster-wide list from
//!   the node and its pods); loopback NodePorts get their own (`--nodeport-localhost`).
//! - [`ports`]: `portRange` (upstream's field for this mode) or kernel-chosen ports.
//! - [`render`]: the listeners as `plan` prints them, saying that the client's address is
//!   not preserved in this mode.
//! - [`redirect`]: the rules that send ClusterIPs, externalIPs, LoadBalancer IPs and
//!   NodePorts (from pods and outside at prerouting, from the node at output) to the
//!   listeners, in our nftables table through the nf_tables library's applier; a port without
//!   endpoints, or a ClusterIP port the Service does not define, is refused by a rule (TCP
//!   reset, ICMP), one whose `Local` policy selects none here is dropped; external frontends
//!   from this node's pods and the node go to the cluster-wide listener (the other modes'
//!   short-circuit); `loadBalancerSourceRanges`; a listener's own port is refused to any
//!   connection the rules did not send there.
//! - [`apply`]: [`UserspaceDataplane`], the `Dataplane` for `--proxy-mode userspace`:
//!   reconciles the listeners at each sync (they bind `--bind-address`), then the redirect
//!   rules to the ports they hold, both families in one transaction.
//! - [`trace`]: `explain` in this mode, through the redirect rules and on through the
//!   listener they lead to.
//! - [`loopback`]: `--nodeport-localhost`, the same relay beside nftables (or this) mode.
//!
//! # What is left
//! - Redirect rules are re-planned whole at each sync (a diff against the last tables, no
//!   incremental planner as the nftables and IPVS modes have).
//! - `plan` shows the listeners, not the redirect rules (their ports are known only once
//!   open).
//! - A restart drops the relayed connections and refuses new ones until the new process
//!   listens (lab scenario 19): the listening sockets could be handed over (`SCM_RIGHTS` to
//!   the successor) or kept by a small parent process; neither is built.

pub mod apply;
pub mod inspect;
pub mod listener_counters;
pub mod loopback;
pub mod mode;
pub mod plan;
pub mod ports;
pub mod redirect;
pub mod relay;
pub mod relay_ports;
pub mod render;
pub mod trace;

pub use apply::UserspaceDataplane;
pub use listener_counters::ListenerCounters;
pub use relay_ports::RelayPorts;
