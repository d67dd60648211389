//! The IPVS dataplane mode (issue 19): Services as IPVS virtual services whose destinations are
//! the endpoints, as upstream's `--proxy-mode=ipvs` programs them.
//!
//! What exists so far is the foundation, the kernel I/O:
//! - [`backend::netlink`]: a generic netlink IPVS client on our netlink core: typed services
//!   (address or fwmark; scheduler; persistence; sh/mh flags) and destinations (NAT, weight,
//!   thresholds), their encoders, the dump decoders with counters and connection counts, the
//!   timeouts, and a blocking client that works in a chosen network namespace. It is tested
//!   byte by byte without a kernel and against a real IPVS kernel in User-mode Linux
//!   (`tests/ipvs_netlink.rs`);
//! - [`backend::link`]: the `kube-ipvs0` dummy link (created down, as upstream leaves it) and
//!   the service addresses bound to it, with upstream's bind rule as a pure function and the
//!   host's other addresses for NodePorts, over rtnetlink (`tests/ipvs_link.rs` in UML);
//! - [`names`]: the kernel-visible names (`kube-ipvs0`).
//!
//! What is to come, as every mode has (`docs/architecture.md`):
//! - `mode_config.rs`: the scheduler and timeouts flags;
//! - `plan/`: (Snapshot, ModeConfig, family) → desired virtual services and destinations,
//!   bound addresses on `kube-ipvs0`, and the nftables rules for masquerade and the VIP filter;
//! - `apply`: diff against the last programmed (or adopted) state and send the difference,
//!   pipelined, graceful termination by weight 0;
//! - `adopt`: the service and destination dumps read back into desired-state values;
//! - `trace`: a packet walked through the planned services;
//! - `cleanup`: what `--cleanup` removes (our services, `kube-ipvs0`).

pub mod backend;
pub mod names;
