//! The settings the iptables planner reads, resolved once from [`Config`].
//!
//! Pure. The masquerade mark, how local (pod) traffic is recognised, which node addresses accept
//! NodePorts, whether localhost NodePorts are served, and whether conntrack-INVALID packets are
//! dropped. Node addresses and pod CIDRs come from the snapshot's node at plan time.

use ipnet::IpNet;

use super::ruleset::IfName;
use crate::cluster::IpFamily;
use crate::config::{Config, DetectLocalMode, NodePortAddresses, ProxyMode};

/// Planner settings for the iptables mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeConfig {
    /// The fwmark bit set on packets to be masqueraded (`1 << masqueradeBit`).
    pub masquerade_mark: u32,
    /// Masquerade all ClusterIP traffic (`masqueradeAll`).
    pub masquerade_all: bool,
    pub detect_local: DetectLocal,
    pub node_ports: NodePortAddresses,
    /// Serve IPv4 NodePorts on 127.0.0.0/8 (`iptables.localhostNodePorts`), where the NodePort
    /// addresses include loopback. Needs `route_localnet`, which `main` sets.
    pub localhost_node_ports: bool,
    /// Drop forwarded packets conntrack calls INVALID, as upstream's iptables mode does while
    /// `conntrack.tcpBeLiberal` is off (kubernetes#74839).
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

/// How one family recognises local traffic, resolved for a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    None,
    Cidr(IpNet),
    Interface(IfName),
}

impl DetectLocal {
    /// The detection for `family`, given the Node's pod CIDRs.
    pub fn resolve(&self, family: IpFamily, pod_cidrs: &[IpNet]) -> Local {
        let pick = |nets: &[IpNet]| nets.iter().copied().find(|n| IpFamily::of_net(n) == family);
        match self {
            DetectLocal::None => Local::None,
            DetectLocal::ClusterCidrs(nets) => pick(nets).map_or(Local::None, Local::Cidr),
            DetectLocal::NodeCidr => pick(pod_cidrs).map_or(Local::None, Local::Cidr),
            DetectLocal::Interface(i) => Local::Interface(i.clone()),
        }
    }
}

/// Why a configuration cannot drive the iptables mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("masqueradeBit {0} is outside 0..=31")]
    MasqueradeBit(u8),
    #[error("detectLocal.{field} {value:?} is not an interface name iptables can match")]
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
            localhost_node_ports: cfg.localhost_node_ports,
            drop_invalid: !cfg.conntrack.tcp_be_liberal,
        })
    }
}

impl ModeConfig {
    /// Whether IPv4 NodePorts are served on 127.0.0.0/8, which needs `route_localnet`.
    pub fn localhost_node_ports_active(&self) -> bool {
        let npa = &self.node_ports;
        let v4: Vec<_> = npa
            .cidrs
            .iter()
            .filter(|c| IpFamily::of_net(c) == IpFamily::V4)
            .collect();
        let match_all = npa.all || (!npa.primary && !npa.localhost && v4.is_empty());
        let loopback_given = npa.localhost
            || v4
                .iter()
                .any(|c| c.contains(&std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        self.localhost_node_ports && (match_all || loopback_given)
    }
}

impl Default for ModeConfig {
    /// Upstream's iptables defaults: bit 14, no masqueradeAll, no cluster CIDR, NodePorts on
    /// every local address including localhost, INVALID dropped.
    fn default() -> ModeConfig {
        ModeConfig {
            masquerade_mark: 1 << 14,
            masquerade_all: false,
            detect_local: DetectLocal::None,
            node_ports: NodePortAddresses::default_for(ProxyMode::Iptables),
            localhost_node_ports: true,
            drop_invalid: true,
        }
    }
}
