//! The settings the nftables planner reads, resolved once from [`Config`].
//!
//! Pure. Everything the planner needs besides the snapshot is here as a typed value, checked so
//! the planner cannot fail: the masquerade mark, how local (pod) traffic is recognised, which
//! node addresses accept NodePorts, and whether conntrack-invalid packets are dropped. Node
//! addresses and pod CIDRs are not here: they come from the snapshot's node at plan time.

use ipnet::IpNet;

use super::ruleset::IfName;
use crate::cluster::IpFamily;
use crate::config::{Config, DetectLocalMode, NodePortAddresses};

/// Planner settings for the nftables mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeConfig {
    /// The fwmark bit set on packets to be masqueraded (`1 << masqueradeBit`).
    pub masquerade_mark: u32,
    /// Masquerade all ClusterIP traffic (`masqueradeAll`).
    pub masquerade_all: bool,
    pub detect_local: DetectLocal,
    pub node_ports: NodePortAddresses,
    /// Drop forwarded packets conntrack calls INVALID. Upstream's nftables mode installs no such
    /// rule and tells operators to set `conntrack.tcpBeLiberal`; its iptables mode installs it
    /// whenever be-liberal is off, because out-of-window TCP packets are INVALID, skip reverse
    /// NAT and reach the client from the pod's address, which resets the connection
    /// (kubernetes#74839). That failure is the same under nftables, so we follow the iptables
    /// rule: drop unless the operator chose `tcpBeLiberal`.
    pub drop_invalid: bool,
}

/// How traffic from this node's pods is recognised (`detectLocalMode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DetectLocal {
    /// No detection: ClusterCIDR mode without a cluster CIDR.
    None,
    /// Source inside these CIDRs (ClusterCIDR mode; at most one per family).
    ClusterCidrs(Vec<IpNet>),
    /// Source inside the Node's `spec.podCIDRs`, read from the snapshot at plan time.
    NodeCidr,
    /// Arrives on this bridge, or on an interface with this prefix.
    Interface(IfName),
}

impl DetectLocal {
    /// Whether a family has any detection (interface modes apply to both families).
    pub fn cidr_for(&self, family: IpFamily, pod_cidrs: &[IpNet]) -> Option<IpNet> {
        let pick = |nets: &[IpNet]| nets.iter().copied().find(|n| IpFamily::of_net(n) == family);
        match self {
            DetectLocal::ClusterCidrs(nets) => pick(nets),
            DetectLocal::NodeCidr => pick(pod_cidrs),
            DetectLocal::None | DetectLocal::Interface(_) => None,
        }
    }
}

/// Why a configuration cannot drive the nftables mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("masqueradeBit {0} is outside 0..=31")]
    MasqueradeBit(u8),
    #[error("detectLocal.{field} {value:?} is not an interface name nftables can match")]
    Interface { field: &'static str, value: String },
}

impl ModeConfig {
    /// Resolves the planner settings from the effective configuration.
    pub fn new(cfg: &Config) -> Result<ModeConfig, Error> {
        if cfg.masquerade_bit > 31 {
            return Err(Error::MasqueradeBit(cfg.masquerade_bit));
        }
        let interface = |field: &'static str, value: &str, prefix: bool| {
            IfName::new(value, prefix).ok_or_else(|| Error::Interface {
                field,
                value: value.to_string(),
            })
        };
        let detect_local = match cfg.detect_local_mode {
            DetectLocalMode::ClusterCidr if cfg.cluster_cidrs.is_empty() => DetectLocal::None,
            DetectLocalMode::ClusterCidr => DetectLocal::ClusterCidrs(cfg.cluster_cidrs.clone()),
            DetectLocalMode::NodeCidr => DetectLocal::NodeCidr,
            DetectLocalMode::BridgeInterface => DetectLocal::Interface(interface(
                "bridgeInterface",
                &cfg.detect_local.bridge_interface,
                false,
            )?),
            DetectLocalMode::InterfaceNamePrefix => DetectLocal::Interface(interface(
                "interfaceNamePrefix",
                &cfg.detect_local.interface_name_prefix,
                true,
            )?),
        };
        Ok(ModeConfig {
            masquerade_mark: 1 << cfg.masquerade_bit,
            masquerade_all: cfg.masquerade_all,
            detect_local,
            node_ports: cfg.node_port_addresses.clone(),
            drop_invalid: !cfg.conntrack.tcp_be_liberal,
        })
    }
}

impl Default for ModeConfig {
    /// Upstream's nftables defaults: bit 14, no masqueradeAll, no cluster CIDR, NodePorts on the
    /// primary addresses.
    fn default() -> ModeConfig {
        ModeConfig {
            masquerade_mark: 1 << 14,
            masquerade_all: false,
            detect_local: DetectLocal::None,
            node_ports: NodePortAddresses {
                primary: true,
                ..NodePortAddresses::default()
            },
            drop_invalid: true,
        }
    }
}
