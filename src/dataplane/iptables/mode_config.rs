//! The settings the iptables planner reads, resolved once from [`Config`].
//!
//! Pure. The node traffic policy every mode shares ([`NodePolicy`]), and what only this mode
//! has: localhost NodePorts.

use crate::cluster::IpFamily;
use crate::config::{Config, ProxyMode};
use crate::dataplane::node::{self, NodePolicy, node_ports};

/// Planner settings for the iptables mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeConfig {
    pub node: NodePolicy,
    /// Serve IPv4 NodePorts on 127.0.0.0/8 (`iptables.localhostNodePorts`), where the NodePort
    /// addresses include loopback. Needs `route_localnet`, which the mode's host set-up sets.
    pub localhost_node_ports: bool,
}

impl ModeConfig {
    /// Resolves the planner settings from the effective configuration.
    pub fn new(cfg: &Config) -> Result<ModeConfig, node::Error> {
        Ok(ModeConfig {
            node: NodePolicy::new(cfg)?,
            localhost_node_ports: cfg.localhost_node_ports,
        })
    }

    /// Whether IPv4 NodePorts are served on 127.0.0.0/8, which needs `route_localnet`.
    pub fn localhost_node_ports_active(&self) -> bool {
        self.localhost_node_ports
            && node_ports::selects_loopback(&self.node.node_ports, IpFamily::V4)
    }
}

impl Default for ModeConfig {
    /// Upstream's iptables defaults: NodePorts on every local address including localhost.
    fn default() -> ModeConfig {
        ModeConfig {
            node: NodePolicy::defaults_for(ProxyMode::Iptables),
            localhost_node_ports: true,
        }
    }
}
