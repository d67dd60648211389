//! The settings the IPVS planner reads, resolved once from [`Config`].
//!
//! Pure. The node traffic policy every mode shares ([`NodePolicy`]), and what only this mode
//! has: the scheduler with its flags, and the ranges whose virtual services are never ours.

use std::collections::BTreeSet;
use std::time::Duration;

use ipnet::IpNet;

use super::backend::netlink::{Flags, Scheduler, Timeouts};
use super::names;
use crate::config::{Config, ProxyMode};
use crate::dataplane::node::{self, NodePolicy};

/// Planner settings for the IPVS mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeConfig {
    pub node: NodePolicy,
    /// Every virtual service's scheduler (`ipvs.scheduler`, `rr` when empty).
    pub scheduler: Scheduler,
    /// The scheduler flags every virtual service gets. Upstream sets one: `mh-port` with `mh`
    /// (hash the source port too, so one client's connections spread), and so do we.
    pub scheduler_flags: Flags,
    /// Virtual services in these ranges belong to someone else (`ipvs.excludeCIDRs`): never
    /// changed or deleted.
    pub exclude_cidrs: Vec<IpNet>,
    /// How long a TCP destination that left the plan may keep its connections at weight 0
    /// before it is deleted anyway. Upstream has no bound, so one busy or stuck client keeps a
    /// dead pod's destination for ever (kubernetes#81775); a Pod's default grace period is
    /// 30 s, and its connections are gone once the pod is.
    pub drain_limit: Duration,
    /// The connection timeouts set at start-up (`ipvs.tcpTimeout`, `tcpFinTimeout`,
    /// `udpTimeout`), in seconds; 0 leaves the kernel's.
    pub timeouts: Timeouts,
    /// Schedulers a Service's annotation named that the kernel turned out not to have (the
    /// dataplane probes each named one once): such Services get [`scheduler`](Self::scheduler).
    pub unavailable_schedulers: BTreeSet<&'static str>,
}

/// [`ModeConfig::drain_limit`] unless configured otherwise.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(300);

impl ModeConfig {
    /// Resolves the planner settings from the effective configuration.
    pub fn new(cfg: &Config) -> Result<ModeConfig, node::Error> {
        let seconds = |d: Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
        Ok(ModeConfig {
            node: NodePolicy::new(cfg)?,
            timeouts: Timeouts {
                tcp: seconds(cfg.ipvs.tcp_timeout),
                tcp_fin: seconds(cfg.ipvs.tcp_fin_timeout),
                udp: seconds(cfg.ipvs.udp_timeout),
            },
            ..ModeConfig::with_scheduler(&cfg.ipvs.scheduler, cfg.ipvs.exclude_cidrs.clone())
        })
    }

    fn with_scheduler(name: &str, exclude_cidrs: Vec<IpNet>) -> ModeConfig {
        let name = if name.is_empty() {
            names::DEFAULT_SCHEDULER
        } else {
            name
        };
        ModeConfig {
            node: NodePolicy::defaults_for(ProxyMode::Ipvs),
            scheduler: Scheduler::new(name),
            scheduler_flags: if name == "mh" {
                Flags::MH_PORT
            } else {
                Flags::NONE
            },
            exclude_cidrs,
            drain_limit: DRAIN_LIMIT,
            timeouts: Timeouts::default(),
            unavailable_schedulers: BTreeSet::new(),
        }
    }

    /// The scheduler and flags of `port`'s virtual services: its annotation's when the kernel
    /// has that scheduler, the node's otherwise.
    pub fn scheduler_of(&self, port: &crate::cluster::ServicePort) -> (&str, Flags) {
        match port.ipvs_scheduler {
            Some(c) if !self.unavailable_schedulers.contains(c.name) => {
                let mut flags = Flags::NONE;
                if c.fallback {
                    flags = flags | Flags::SCHED1;
                }
                if c.port {
                    flags = flags | Flags::SCHED2;
                }
                (c.name, flags)
            }
            _ => (self.scheduler.as_str(), self.scheduler_flags),
        }
    }

    /// Whether a virtual service at `address` is in `excludeCIDRs`: someone else's.
    pub fn excluded(&self, address: &std::net::IpAddr) -> bool {
        self.exclude_cidrs.iter().any(|c| c.contains(address))
    }
}

impl Default for ModeConfig {
    /// Upstream's IPVS defaults: round robin, NodePorts on every local address.
    fn default() -> ModeConfig {
        ModeConfig::with_scheduler("", Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_defaults_to_round_robin_and_mh_hashes_the_source_port_too() {
        assert_eq!(ModeConfig::default().scheduler.as_str(), "rr");
        assert_eq!(ModeConfig::default().scheduler_flags, Flags::NONE);
        let mh = ModeConfig::with_scheduler("mh", vec![]);
        assert_eq!(mh.scheduler_flags, Flags::MH_PORT);
        assert_eq!(
            ModeConfig::with_scheduler("sh", vec![]).scheduler_flags,
            Flags::NONE
        );
    }

    #[test]
    fn exclude_cidrs_name_virtual_services_that_are_not_ours() {
        let c = ModeConfig::with_scheduler("", vec!["10.200.0.0/16".parse().unwrap()]);
        assert!(c.excluded(&"10.200.3.4".parse().unwrap()));
        assert!(!c.excluded(&"10.96.0.1".parse().unwrap()));
    }
}
