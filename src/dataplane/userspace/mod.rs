//! Userspace mode (issue 21): the proxy carries each connection's bytes itself instead of
//! leaving them to NAT rules, so it can do what a rule cannot: try another endpoint when one
//! refuses or does not answer. Upstream removed its userspace proxier in 1.26; this is ours.
//!
//! ```text
//!   Snapshot ──plan──▶ Listeners (one per service port, family, internal/external traffic)
//!                          │ apply: open / update in place / close, ports from portRange
//!                          ▼
//!   Service address ──▶ redirect (DNAT map) ──▶ relay::Listener ──▶ endpoints
//!                                                  (round-robin, affinity, retries)
//! ```
//!
//! # What this phase covers
//! - [`relay`]: the relay core on tokio. A TCP or UDP listener per service port and family;
//!   round-robin over the endpoints the model selected, ClientIP affinity with the Service's
//!   timeout, dials bounded by a timeout and retried on the next endpoint with backoff,
//!   relaying both ways with half-close, live endpoint changes (connections to removed
//!   endpoints close, the others stay), UDP flows with an idle timeout, connection limits per
//!   Service (shared by its listeners) and overall, and counters per listener.
//! - [`plan`]: the listeners a snapshot asks for. ClusterIP traffic and external traffic
//!   (NodePort, externalIPs, LoadBalancer IPs) get separate listeners, since their traffic
//!   policies may select different endpoints.
//! - [`ports`]: `portRange` (upstream's field for this mode) or kernel-chosen ports.
//! - [`render`]: the listeners as `plan` prints them, saying that the client's address is
//!   not preserved in this mode.
//! - [`redirect`]: the rules that send ClusterIPs, externalIPs, LoadBalancer IPs and
//!   NodePorts (from pods and outside at prerouting, from the node at output) to the
//!   listeners, in our nftables table through the nftables mode's applier; a port without
//!   endpoints is refused by a rule (TCP reset, ICMP); external `Local` traffic without a
//!   local endpoint is dropped from outside and sent to the internal listener from this
//!   node's pods and the node (the other modes' short-circuit).
//! - [`apply`]: [`UserspaceDataplane`], the `Dataplane` for `--proxy-mode userspace`:
//!   reconciles the listeners at each sync (they bind `--bind-address`), then the redirect
//!   rules to the ports they hold, both families in one transaction.
//!
//! # What is left
//! - Redirect rules are re-planned whole at each sync (a diff against the last tables, no
//!   incremental planner as the nftables and IPVS modes have); NodePorts on loopback are not
//!   served (that is the `--nodeport-localhost` item below).
//! - No conntrack clean-up: a UDP flow DNATed to a listener that closed (its Service port
//!   gone, or moved to another port) keeps its entry until the entry times out. `plan`
//!   shows the listeners, not the redirect rules (their ports are known only once open).
//! - Lab scenarios in this mode, and the operator docs (`docs/operations.md`), which must say
//!   what `plan` already says: the client's address is not preserved (the relay dials from
//!   the node).
//! - Flags for the connection limits and the UDP idle timeout (`--udp-timeout`);
//!   [`relay::Settings::default`] applies until then. (The relay's counters are exported as
//!   `kubeproxy_rs_userspace_*` through [`ListenerCounters`].)
//! - One task per listener waits in accept; the issue asks for none per idle listener.
//! - `--nodeport-localhost` for nftables mode (NodePorts on 127.0.0.1 through this relay).

pub mod apply;
pub mod listener_counters;
pub mod loopback;
pub mod plan;
pub mod ports;
pub mod redirect;
pub mod relay;
pub mod render;
pub mod trace;

pub use apply::UserspaceDataplane;
pub use listener_counters::ListenerCounters;
