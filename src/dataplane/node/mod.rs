//! Node traffic policy: what every dataplane mode decides the same way about this node's
//! traffic, resolved once from [`Config`].
//!
//! Pure; built once at start-up and never fails afterwards. It holds how local (pod) traffic is
//! recognised ([`DetectLocal`]), the masquerade mark, which node addresses accept NodePorts
//! ([`node_ports::resolve`], from `nodePortAddresses`), and whether conntrack-INVALID packets are
//! dropped, and which sources a LoadBalancer with source ranges accepts ([`source_ranges`]).
//! Each mode's `ModeConfig` embeds one [`NodePolicy`] and adds only what is its own
//! (iptables: localhost NodePorts), so a new mode gets these rules by construction, not by copy.
//! Node addresses and pod CIDRs are not here: they come from the snapshot's node at plan time.

pub mod detect_local;
pub mod node_ports;
pub mod source_ranges;

pub use detect_local::{DetectLocal, IfName, Local};
pub use node_ports::NodePortMatch;

use crate::config::{Config, DetectLocalMode, NodePortAddresses, ProxyMode};

/// The node traffic policy every mode programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePolicy {
    /// The fwmark bit set on packets to be masqueraded (`1 << masqueradeBit`).
    pub masquerade_mark: u32,
    /// Masquerade all ClusterIP traffic (`masqueradeAll`).
    pub masquerade_all: bool,
    pub detect_local: DetectLocal,
    /// `nodePortAddresses` as configured; [`node_ports::resolve`] turns it into addresses.
    pub node_ports: NodePortAddresses,
    /// Drop forwarded packets conntrack calls INVALID. Out-of-window TCP packets are INVALID,
    /// skip reverse NAT and reach the client from the pod's address, which resets the
    /// connection (kubernetes#74839). Upstream's iptables mode drops them unless
    /// `conntrack.tcpBeLiberal` is on; its nftables mode installs no such rule and tells
    /// operators to set be-liberal instead. The failure is the same in every mode, so every mode
    /// of ours follows the iptables rule: drop unless the operator chose `tcpBeLiberal`.
    pub drop_invalid: bool,
}

/// Why a configuration cannot drive a dataplane.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("masqueradeBit {0} is outside 0..=31")]
    MasqueradeBit(u8),
    #[error(
        "detectLocal.{field} {value:?} is not an interface name: 1 to {} characters of [A-Za-z0-9._-]",
        IfName::MAX_LEN
    )]
    Interface { field: &'static str, value: String },
}

impl NodePolicy {
    /// Resolves the policy from the effective configuration.
    pub fn new(cfg: &Config) -> Result<NodePolicy, Error> {
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
        Ok(NodePolicy {
            masquerade_mark: 1 << cfg.masquerade_bit,
            masquerade_all: cfg.masquerade_all,
            detect_local,
            node_ports: cfg.node_port_addresses.clone(),
            drop_invalid: !cfg.conntrack.tcp_be_liberal,
        })
    }

    /// Upstream's defaults for `mode`: bit 14, no masqueradeAll, no cluster CIDR, the mode's
    /// default NodePort addresses, INVALID dropped.
    pub fn defaults_for(mode: ProxyMode) -> NodePolicy {
        NodePolicy {
            masquerade_mark: 1 << 14,
            masquerade_all: false,
            detect_local: DetectLocal::None,
            node_ports: NodePortAddresses::default_for(mode),
            drop_invalid: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_follows_the_configuration() {
        let mut cfg = Config {
            masquerade_bit: 3,
            masquerade_all: true,
            detect_local_mode: DetectLocalMode::ClusterCidr,
            ..Config::default()
        };
        cfg.conntrack.tcp_be_liberal = true;
        let p = NodePolicy::new(&cfg).unwrap();
        assert_eq!(p.masquerade_mark, 8);
        assert!(p.masquerade_all && !p.drop_invalid);
        assert_eq!(
            p.detect_local,
            DetectLocal::None,
            "no cluster CIDR: no detection"
        );
        cfg.cluster_cidrs = vec!["10.244.0.0/16".parse().unwrap()];
        assert_eq!(
            NodePolicy::new(&cfg).unwrap().detect_local,
            DetectLocal::ClusterCidrs(cfg.cluster_cidrs.clone())
        );
    }

    #[test]
    fn a_bad_bit_or_interface_names_the_field() {
        let mut cfg = Config {
            masquerade_bit: 32,
            ..Config::default()
        };
        assert_eq!(NodePolicy::new(&cfg), Err(Error::MasqueradeBit(32)));
        cfg.masquerade_bit = 14;
        cfg.detect_local_mode = DetectLocalMode::InterfaceNamePrefix;
        cfg.detect_local.interface_name_prefix = "veth x".into();
        let e = NodePolicy::new(&cfg).unwrap_err();
        assert_eq!(
            e.to_string(),
            "detectLocal.interfaceNamePrefix \"veth x\" is not an interface name: 1 to 15 characters of [A-Za-z0-9._-]"
        );
    }
}
