//! The nftables mode: the kernel layout it programs, the pure code that plans it, and the
//! dataplane and cleanup around the kernel. Diffing, rendering, reading back and sending are
//! the nf_tables library's ([`crate::nft`]), which the ipvs and userspace modes use too.
//!
//! # Tables
//! `table ip kube-proxy-rs` and `table ip6 kube-proxy-rs` ([`crate::nft::TABLE`]): one per
//! family, ours alone, distinct from upstream's `kube-proxy` so either can be removed without
//! touching the other. Every chain and set name is in [`names`]: the names the ipvs and userspace
//! modes' rules share with ours are [`nft_table`](crate::dataplane::nft_table)'s, the rest
//! are this mode's own.
//!
//! # Hooks and chains
//! ```text
//!  prerouting ─ filter-prerouting-pre-dnat (filter, dstnat-10) ─ ct new → firewall-check
//!             └ nat-prerouting (nat, dstnat) ──────────────────────────→ services
//!  output ───── filter-output-pre-dnat (filter, -110) ─ ct new ─────────→ firewall-check
//!             └ nat-output (nat, -100) ────────────────────────────────→ services
//!  input ────── filter-input (filter) ─ ct new → nodeport-endpoints-check, service-endpoints-check
//!  forward ──── filter-forward (filter) ─ [ct invalid drop] ct new → service-endpoints-check,
//!                                                                    cluster-ips-check
//!  output ───── filter-output (filter) ─ ct new → service-endpoints-check, cluster-ips-check
//!  postrouting  nat-postrouting (nat, srcnat) ─────────────────────────→ masquerading
//!
//!  services: daddr.proto.dport vmap @service-ips ─┬→ cluster-ip     ─┐ mark for masquerade as
//!            nodeport-addr proto.dport             ├→ external       ─┤ policy says, then
//!              vmap @service-nodeports ───────────┼→ external-local ─┤ key vmap @dispatch(-cluster)
//!                                                  ├→ nodeport       ─┤ or @nodeport-dispatch(-cluster)
//!                                                  └→ nodeport-local ─┘        │
//!            pick-<list>-N: dnat to key . numgen random mod N map @<list>-endpoints  ◀┘
//!            affinity-<hash>: per-endpoint dynamic client sets (ClientIP affinity only)
//! ```
//! Priorities are upstream's: DNAT at `dstnat` (-100), source-range filtering just before it, the
//! no-endpoint checks at `filter` (after DNAT, so only traffic that was not DNATed is judged),
//! masquerading at `srcnat`. nft 1.0.6 accepts `dstnat` only on prerouting, so output chains use
//! the numbers.
//!
//! # Why this layout
//! `nft` slows down with the number of chains far more than with elements
//! (docs/benchmarks.md): a chain per Service is slow at scale. So there is no
//! chain per Service or per endpoint. Each frontend (ClusterIP, externalIP, LoadBalancer IP as
//! `addr . proto . port`; NodePort as `proto . port`) is an element of:
//! - `service-ips` / `service-nodeports`: its *treatment* chain, one of five shared chains that
//!   set the masquerade mark as its traffic policy requires and pick which endpoint list applies;
//! - `dispatch` / `nodeport-dispatch`: the pick chain of its policy's endpoint list, and for
//!   `externalTrafficPolicy: Local` also `dispatch-cluster` / `nodeport-dispatch-cluster` for the
//!   pod and host short-circuits, which use the cluster list;
//! - the backends maps `cluster-endpoints-N`, `local-endpoints-N`, `nodeport-cluster-endpoints-N`,
//!   `nodeport-local-endpoints-N`: `(frontend . index) → endpoint addr . port`, one per pick
//!   chain (N endpoints), created and deleted with it (nft 1.0.6 cannot add a rule reading a
//!   map made in an earlier transaction when its data is declared with `th dport`).
//!
//! Pick chains (`pick-cluster-3`, `pick-nodeport-local-1`) exist once per distinct endpoint count,
//! so the chain count follows the spread of endpoint counts, not the Service count. A packet costs
//! three map lookups. A one-endpoint change touches that service port's elements only.
//!
//! Other maps and sets: `no-endpoint-services` / `no-endpoint-nodeports` (frontend → `goto
//! reject-chain` when no endpoint exists anywhere, `drop` when its Local policy has no local
//! endpoint), `cluster-ips` (traffic to a ClusterIP on an undefined port is rejected; then
//! `cluster-ips-check` drops the rest of the cluster's Service CIDRs, the addresses no Service
//! holds, one rule per merged range),
//! `firewall-ips` + `firewall-allow` (loadBalancerSourceRanges: a LoadBalancer frontend's new
//! connections from sources outside its interval set are dropped), `hairpin-connections` (local
//! endpoint reaching itself: masqueraded), `nodeport-ips` (the accepted node addresses unless
//! nodePortAddresses is `all`, which uses `fib daddr type local`).
//!
//! ClientIP affinity is the exception: an `affinity-<hash>` chain per (service port, family,
//! endpoint list) with a dynamic client set per endpoint, because a rule must name the set it
//! updates (see `plan::affinity`).
//!
//! Masquerading is by mark: treatment chains `or` the configured bit into the packet mark;
//! `masquerading` clears it and applies `masquerade fully-random`.
//!
//! # Applying
//! [`plan::plan`] gives the desired [`Ruleset`] per family; [`nft::diff()`] (last applied,
//! desired) gives the [`nft::Transaction`]; the [`nft::apply::Applier`] sends it through a
//! [`nft::Backend`]: by default [`nft::backend::netlink`] encodes it as one nf_tables netlink
//! batch; with `--nftables-encoder=nft`, [`nft::NftCommand`] sends [`nft::render()`]'s text to
//! `nft -f -`.
//! [`NftablesDataplane`] is what the sync runner drives:
//! - Steady state: the [`Planner`] re-plans only the service ports the sync's changes name and
//!   yields the transactions from its previous plan, which the kernel holds; both families'
//!   transactions go as one batch (atomic). After a failure the kernel kept the
//!   previous rules while the planner moved on, so the next sync is full.
//! - Start-up and full resyncs: diff against the kernel's table read back (netlink `GET*`
//!   dumps read by [`nft::backend::netlink::dump`]; with the text encoder `nft -j list table`
//!   and [`nft::adopt::parse`]), so a restart changes only what differs (zero operations when nothing
//!   did). Listing through nft is slow at scale (docs/benchmarks.md); the netlink reader
//!   avoids it. Never
//!   `flush table`: it empties chains but keeps stale sets, and a non-atomic flush-then-fill
//!   drops traffic in between.
//! - A dump holding objects we cannot name: [`nft::rebuild`] sends `add table; delete table;`
//!   and the whole ruleset in one batch. Atomic, and established connections survive (their NAT
//!   lives in conntrack); only remembered affinity clients are lost.
//! - Outside changes: [`monitor::run`](crate::dataplane::monitor::run) watches nf_tables notifications (the multicast group
//!   `nft monitor` reads) and marks the next sync full through [`Drift`]; the runner awaits
//!   [`Drift::changed`] to start it at once.
//! - `--cleanup`: [`cleanup`] removes our tables and upstream's (with every other mode's
//!   leftovers, by `dataplane::cleanup`).
//! - Incremental: [`Planner`] keeps the last plan and, given the tracker's changes, re-plans
//!   only the changed service ports and returns the transactions from its previous plan (equal
//!   to `plan_all` + `diff`, at a cost proportional to the change). They apply while the kernel
//!   holds the planner's previous plan; otherwise (full syncs) the kernel read back is diffed
//!   against [`Planner::rulesets`] after [`Planner::replan`].
//!
//! # Parts (the mode contract of `dataplane`)
//! [`plan`](mod@plan) (pure, with the incremental [`Planner`]), [`names`], [`mode_config`],
//! [`apply`] (the [`NftablesDataplane`]), [`cleanup`], [`mode`]. From the library: the
//! [`nft::apply::Applier`] and its vocabulary ([`nft::diff`](mod@nft::diff),
//! [`nft::render`](mod@nft::render), [`nft::adopt`]), the backends ([`nft::backend`], and the
//! shared [`monitor`](crate::dataplane::monitor) of outside changes) and the tracer
//! ([`nft::trace`]).

use crate::nft;

pub mod apply;
pub mod cleanup;
pub mod inspect;
pub mod leftovers;
pub mod mode;
pub mod mode_config;
pub mod names;
pub mod plan;

#[cfg(test)]
mod diff_tests;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod hostile_props;

pub use crate::dataplane::monitor::Drift;
pub use apply::NftablesDataplane;
pub use mode_config::ModeConfig;
pub use plan::{Planner, Update, plan};

use nft::Ruleset;

/// The desired tables of both families, IPv4 first (a full plan; syncs use the [`Planner`]).
pub fn plan_all(snapshot: &crate::cluster::Snapshot, cfg: &ModeConfig) -> [Ruleset; 2] {
    crate::cluster::IpFamily::ALL.map(|f| plan(snapshot, cfg, f))
}
