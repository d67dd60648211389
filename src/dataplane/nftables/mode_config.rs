//! The settings the nftables planner reads, resolved once from [`Config`].
//!
//! Pure. The node traffic policy every mode shares ([`NodePolicy`]: masquerade mark, local
//! traffic, NodePort addresses, INVALID drop) is all the nftables mode needs besides the
//! snapshot; it is checked at start-up so the planner cannot fail.

use crate::config::{Config, ProxyMode};
use crate::dataplane::node::{self, NodePolicy};

/// Planner settings for the nftables mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeConfig {
    pub node: NodePolicy,
}

impl ModeConfig {
    /// Resolves the planner settings from the effective configuration.
    pub fn new(cfg: &Config) -> Result<ModeConfig, node::Error> {
        Ok(ModeConfig {
            node: NodePolicy::new(cfg)?,
        })
    }
}

impl Default for ModeConfig {
    /// Upstream's nftables defaults: NodePorts on the primary addresses.
    fn default() -> ModeConfig {
        ModeConfig {
            node: NodePolicy::defaults_for(ProxyMode::Nftables),
        }
    }
}
