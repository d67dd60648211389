//! Which destinations accept NodePort traffic in one family (`nodePortAddresses`), iptables
//! flavour.
//!
//! Pure. Upstream's documented rules in our words: with `all` (the iptables default) or nothing
//! for this family, every local address accepts NodePorts, loopback included for IPv4 when
//! `localhostNodePorts` is on; otherwise the node's addresses inside the given CIDRs and its
//! primary address (`primary`), plus 127.0.0.0/8 when `localhost` (or a CIDR holding it) is
//! given and localhost NodePorts are on. IPv6 never serves loopback NodePorts.
//!
//! As in the nftables mode, CIDRs select among the host's interface addresses once the shell has
//! read them, else among the Node object's.

use std::net::{IpAddr, Ipv4Addr};

use crate::cluster::{IpFamily, NodeContext};
use crate::dataplane::iptables::mode_config::ModeConfig;

/// How NodePort traffic is recognised in `KUBE-SERVICES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePortMatch {
    /// Any local destination (`-m addrtype --dst-type LOCAL`); loopback only when `loopback`.
    Local { loopback: bool },
    /// Exactly these addresses, ascending, and 127.0.0.0/8 when `loopback`.
    Addresses { addrs: Vec<IpAddr>, loopback: bool },
}

impl NodePortMatch {
    /// Whether NodePorts are served on loopback, which needs `route_localnet`.
    pub fn loopback(&self) -> bool {
        match self {
            NodePortMatch::Local { loopback } | NodePortMatch::Addresses { loopback, .. } => {
                *loopback
            }
        }
    }
}

pub(crate) fn resolve(cfg: &ModeConfig, node: &NodeContext, family: IpFamily) -> NodePortMatch {
    let npa = &cfg.node_ports;
    let localhost_ok = cfg.localhost_node_ports && family == IpFamily::V4;
    let cidrs: Vec<_> = npa
        .cidrs
        .iter()
        .filter(|c| IpFamily::of_net(c) == family)
        .collect();
    if npa.all || (!npa.primary && !npa.localhost && cidrs.is_empty()) {
        return NodePortMatch::Local {
            loopback: localhost_ok,
        };
    }
    let loopback_given = npa.localhost
        || cidrs
            .iter()
            .any(|c| c.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let mut addrs: Vec<IpAddr> = node
        .local_addresses()
        .into_iter()
        .filter(|ip| IpFamily::of(ip) == family && cidrs.iter().any(|c| c.contains(ip)))
        .collect();
    if npa.primary {
        addrs.extend(node.primary_ip(family));
    }
    addrs.retain(|ip| !ip.is_loopback());
    addrs.sort();
    addrs.dedup();
    NodePortMatch::Addresses {
        addrs,
        loopback: localhost_ok && loopback_given,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::NodeAddress;
    use crate::config::NodePortAddresses;

    fn node() -> NodeContext {
        let mut n = NodeContext::named("n");
        for ip in ["10.0.0.11", "192.0.2.7", "fd00::11"] {
            n.addresses.push(NodeAddress {
                kind: "InternalIP".into(),
                ip: ip.parse().unwrap(),
            });
        }
        n
    }

    fn cfg(npa: NodePortAddresses) -> ModeConfig {
        ModeConfig {
            node_ports: npa,
            ..ModeConfig::default()
        }
    }

    #[test]
    fn the_default_accepts_every_local_address_and_ipv4_loopback() {
        let c = ModeConfig::default();
        assert_eq!(
            resolve(&c, &node(), IpFamily::V4),
            NodePortMatch::Local { loopback: true }
        );
        assert_eq!(
            resolve(&c, &node(), IpFamily::V6),
            NodePortMatch::Local { loopback: false }
        );
        let off = ModeConfig {
            localhost_node_ports: false,
            ..ModeConfig::default()
        };
        assert!(!resolve(&off, &node(), IpFamily::V4).loopback());
    }

    #[test]
    fn cidrs_pick_node_addresses_and_a_family_without_any_accepts_all() {
        let c = cfg(NodePortAddresses {
            cidrs: vec!["192.0.2.0/24".parse().unwrap()],
            ..NodePortAddresses::default()
        });
        assert_eq!(
            resolve(&c, &node(), IpFamily::V4),
            NodePortMatch::Addresses {
                addrs: vec!["192.0.2.7".parse().unwrap()],
                loopback: false
            }
        );
        assert_eq!(
            resolve(&c, &node(), IpFamily::V6),
            NodePortMatch::Local { loopback: false }
        );
        let lo = cfg(NodePortAddresses {
            cidrs: vec!["127.0.0.0/8".parse().unwrap()],
            primary: true,
            ..NodePortAddresses::default()
        });
        assert_eq!(
            resolve(&lo, &node(), IpFamily::V4),
            NodePortMatch::Addresses {
                addrs: vec!["10.0.0.11".parse().unwrap()],
                loopback: true
            }
        );
    }
}
