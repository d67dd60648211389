//! The IPVS dataplane mode: Services as IPVS virtual services whose destinations are
//! the endpoints, as upstream's `--proxy-mode=ipvs` programs them.
//!
//! # Parts
//! - [`backend::netlink`]: a generic netlink IPVS client on our netlink core: typed services
//!   (address or fwmark; scheduler; persistence; sh/mh flags) and destinations (NAT, weight,
//!   thresholds), their encoders, the dump decoders with counters and connection counts, the
//!   timeouts, and a blocking client that works in a chosen network namespace. It is tested
//!   byte by byte without a kernel and against a real IPVS kernel in User-mode Linux
//!   (`tests/ipvs_netlink.rs`);
//! - [`backend::link`]: the `kube-ipvs0` dummy link (created down, as upstream leaves it) and
//!   the service addresses bound to it, with upstream's bind rule as a pure function and the
//!   host's other addresses for NodePorts, over rtnetlink (`tests/ipvs_link.rs` in UML);
//! - [`names`], [`mode_config`] (the scheduler, its flags, `excludeCIDRs`), [`desired`] (one
//!   family's virtual services, destinations, bound addresses and the [`Guard`] each needs)
//!   and [`plan`](mod@plan), the pure planner with its tests, and its incremental
//!   [`Planner`](plan::Planner), which re-plans only the changed service ports;
//! - [`diff`]: the requests that take the kernel to the plan, with graceful termination
//!   (weight 0, deleted once idle or after [`ModeConfig::drain_limit`]; UDP/SCTP at once);
//! - [`adopt`](mod@adopt): the kernel's dumps into the state the diff starts from;
//! - [`render`](mod@render): the plan as `ipvsadm -Sn` lines, for `plan --proxy-mode ipvs`;
//! - [`apply`](mod@apply): the [`IpvsDataplane`](apply::IpvsDataplane): reads the link's
//!   addresses and the kernel's services on full syncs, binds the service addresses, sends
//!   [`diff`]'s requests many per datagram, keeps "last programmed" (an idle sync sends
//!   nothing) and the draining destinations' clocks; tested on a real IPVS kernel
//!   (`tests/ipvs_apply.rs`).
//!
//! The mode runs (`cli::run`). Done and still to come:
//! - at start-up (`cli::run`): [`apply::check_scheduler`], [`sysctls`], the timeouts; done;
//! - requests pipelined many per datagram (`Client::send_all`, the core's batch state
//!   machine); done;
//! - planning only the changed service ports ([`plan::Planner`]), with the helper tables'
//!   transaction and [`diff::diff_only`] of the touched virtual services; done;
//! - [`rules`](mod@rules): the helper rules in our nftables table (masquerade, hairpin, the
//!   VIP port filter, the guards, source ranges), applied before the virtual services by the
//!   nf_tables library's applier ([`crate::nft`]); done;
//! - [`traffic`](mod@traffic): per-Service STATS64 counters, read at scrape time; done;
//! - the per-Service scheduler annotation (`cluster::scheduler_annotation`, probed by the
//!   applier once per name); done;
//! - [`trace`](mod@trace): a packet walked through the planned services and helper rules,
//!   checked against the nftables mode's plan traced the same way; done;
//! - [`cleanup`](mod@cleanup): what `--cleanup` removes (every virtual service, as upstream,
//!   and `kube-ipvs0`); done.

pub mod adopt;
pub mod apply;
pub mod backend;
pub mod cleanup;
pub mod desired;
pub mod diff;
mod fuzz;
pub mod inspect;
pub mod leftovers;
pub mod mode;
pub mod mode_config;
pub mod names;
pub mod plan;
pub mod render;
pub mod rules;
pub mod sysctls;
pub mod trace;
pub mod traffic;
pub mod watch;

pub use desired::{Desired, Frontend, Guard, Masquerade, VirtualService};
pub use mode_config::ModeConfig;
pub use plan::{HostAddresses, plan};
pub use render::render_all;

/// The addresses `kube-ipvs0` holds for `states`: every ClusterIP, and every external address
/// not already on another interface (`elsewhere`).
pub fn bound_addresses(
    states: &[Desired],
    elsewhere: &std::collections::BTreeSet<std::net::IpAddr>,
) -> std::collections::BTreeSet<std::net::IpAddr> {
    let mut all = backend::link::ServiceAddresses::default();
    for d in states {
        all.cluster_ips.extend(&d.addresses.cluster_ips);
        all.external.extend(&d.addresses.external);
    }
    backend::link::addresses::wanted(&all, elsewhere)
}

/// The helper tables of `states`, one per family in the same order, with `bound` on
/// `kube-ipvs0` ([`bound_addresses`]).
pub fn rules_all(
    states: &[Desired],
    cfg: &ModeConfig,
    node: &crate::cluster::NodeContext,
    bound: &std::collections::BTreeSet<std::net::IpAddr>,
) -> Vec<crate::nft::Ruleset> {
    states
        .iter()
        .map(|d| rules::plan(d, cfg, node, bound))
        .collect()
}

/// The desired state of both families, IPv4 first, over the host's addresses `host`.
pub fn plan_all(
    snapshot: &crate::cluster::Snapshot,
    cfg: &ModeConfig,
    host: &HostAddresses,
) -> [Desired; 2] {
    crate::cluster::IpFamily::ALL.map(|f| plan(snapshot, cfg, f, host))
}
