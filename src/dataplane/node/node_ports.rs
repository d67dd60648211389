//! Which destination addresses accept NodePort traffic in one family (`nodePortAddresses`).
//!
//! Pure. Upstream's documented rules in our words: with `all`, or with no entry for this family
//! at all, every local address accepts NodePorts; otherwise the node's addresses inside the
//! given CIDRs and its primary address of the family (`primary`). Loopback is a choice of the
//! mode, passed in: iptables serves IPv4 NodePorts on 127.0.0.0/8 (`localhostNodePorts`, needs
//! `route_localnet`) where the entries include loopback (`localhost`, or a CIDR holding
//! 127.0.0.1), or select every address; the nftables mode never does (KEP-6032 leaves loopback
//! to a userspace proxy). IPv6 never serves loopback NodePorts.
//!
//! CIDRs select among the host's interface addresses, as upstream's do (the shell reads them:
//! `cluster::source::interfaces`); until they are known, and in `plan`, the Node object's
//! addresses stand in.

use std::net::{IpAddr, Ipv4Addr};

use crate::cluster::{IpFamily, NodeContext};
use crate::config::NodePortAddresses;

/// How a planner recognises NodePort traffic of one family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePortMatch {
    /// Any local destination; loopback only when `loopback`.
    All { loopback: bool },
    /// Exactly these addresses, ascending (may be empty, for example before the Node object is
    /// known), and 127.0.0.0/8 when `loopback`.
    Addresses { addrs: Vec<IpAddr>, loopback: bool },
}

impl NodePortMatch {
    /// Whether NodePorts are served on loopback.
    pub fn loopback(&self) -> bool {
        match self {
            NodePortMatch::All { loopback } | NodePortMatch::Addresses { loopback, .. } => {
                *loopback
            }
        }
    }
}

/// The NodePort destinations of `family` on `node`. `serve_loopback`: the mode serves loopback
/// NodePorts in this family where the entries ask for them.
pub fn resolve(
    npa: &NodePortAddresses,
    node: &NodeContext,
    family: IpFamily,
    serve_loopback: bool,
) -> NodePortMatch {
    let loopback = serve_loopback && family == IpFamily::V4 && selects_loopback(npa, family);
    if selects_all(npa, family) {
        return NodePortMatch::All { loopback };
    }
    let cidrs = cidrs_of(npa, family);
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
    NodePortMatch::Addresses { addrs, loopback }
}

/// Whether the entries ask for IPv4 NodePorts on loopback: `all` or no IPv4 entry (every local
/// address), `localhost`, or a CIDR holding 127.0.0.1. Known without the node, so the shell can
/// decide on `route_localnet` at start-up.
pub fn selects_loopback(npa: &NodePortAddresses, family: IpFamily) -> bool {
    family == IpFamily::V4
        && (selects_all(npa, family)
            || npa.localhost
            || cidrs_of(npa, family)
                .iter()
                .any(|c| c.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST))))
}

/// `all`, or no entry that applies to this family.
fn selects_all(npa: &NodePortAddresses, family: IpFamily) -> bool {
    npa.all || (!npa.primary && !npa.localhost && cidrs_of(npa, family).is_empty())
}

fn cidrs_of(npa: &NodePortAddresses, family: IpFamily) -> Vec<&ipnet::IpNet> {
    npa.cidrs
        .iter()
        .filter(|c| IpFamily::of_net(c) == family)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::NodeAddress;

    fn node() -> NodeContext {
        let mut n = NodeContext::named("n");
        for (kind, ip) in [
            ("ExternalIP", "192.0.2.7"),
            ("InternalIP", "10.0.0.11"),
            ("InternalIP", "fd00::11"),
        ] {
            n.addresses.push(NodeAddress {
                kind: kind.into(),
                ip: ip.parse().unwrap(),
            });
        }
        n
    }

    fn addrs(list: &[&str], loopback: bool) -> NodePortMatch {
        NodePortMatch::Addresses {
            addrs: list.iter().map(|a| a.parse().unwrap()).collect(),
            loopback,
        }
    }

    fn npa(entries: &[&str]) -> NodePortAddresses {
        let mut n = NodePortAddresses::default();
        for e in entries {
            match *e {
                "all" => n.all = true,
                "primary" => n.primary = true,
                "localhost" => n.localhost = true,
                cidr => n.cidrs.push(cidr.parse().unwrap()),
            }
        }
        n
    }

    #[test]
    fn primary_is_the_first_internal_ip_of_the_family() {
        let cfg = npa(&["primary"]);
        assert_eq!(
            resolve(&cfg, &node(), IpFamily::V4, false),
            addrs(&["10.0.0.11"], false)
        );
        assert_eq!(
            resolve(&cfg, &node(), IpFamily::V6, false),
            addrs(&["fd00::11"], false)
        );
        assert_eq!(
            resolve(&cfg, &NodeContext::named("n"), IpFamily::V4, false),
            addrs(&[], false)
        );
    }

    #[test]
    fn cidrs_select_node_addresses_and_a_family_without_entries_accepts_all() {
        let cfg = npa(&["192.0.2.0/24"]);
        assert_eq!(
            resolve(&cfg, &node(), IpFamily::V4, true),
            addrs(&["192.0.2.7"], false)
        );
        assert_eq!(
            resolve(&cfg, &node(), IpFamily::V6, true),
            NodePortMatch::All { loopback: false }
        );
    }

    #[test]
    fn cidrs_select_host_addresses_once_known() {
        let cfg = npa(&["10.244.0.0/16", "primary"]);
        // Known only on the host (a pod gateway), not in the Node object.
        let mut n = node();
        assert_eq!(
            resolve(&cfg, &n, IpFamily::V4, false),
            addrs(&["10.0.0.11"], false)
        );
        let host: Vec<IpAddr> = ["10.244.1.1", "10.0.0.11", "127.0.0.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        n.host_addresses = Some(host.into());
        assert_eq!(
            resolve(&cfg, &n, IpFamily::V4, false),
            addrs(&["10.0.0.11", "10.244.1.1"], false)
        );
    }

    #[test]
    fn all_wins_and_loopback_is_served_only_where_the_mode_serves_it() {
        let all = npa(&["all", "primary"]);
        assert_eq!(
            resolve(&all, &node(), IpFamily::V4, false),
            NodePortMatch::All { loopback: false }
        );
        assert_eq!(
            resolve(&all, &node(), IpFamily::V4, true),
            NodePortMatch::All { loopback: true }
        );
        assert_eq!(
            resolve(&all, &node(), IpFamily::V6, true),
            NodePortMatch::All { loopback: false }
        );
        let lo = npa(&["localhost"]);
        assert_eq!(
            resolve(&lo, &node(), IpFamily::V4, false),
            addrs(&[], false)
        );
        assert_eq!(resolve(&lo, &node(), IpFamily::V4, true), addrs(&[], true));
        let lo_cidr = npa(&["127.0.0.0/8", "primary"]);
        assert_eq!(
            resolve(&lo_cidr, &node(), IpFamily::V4, true),
            addrs(&["10.0.0.11"], true)
        );
        assert!(selects_loopback(&lo_cidr, IpFamily::V4));
        assert!(!selects_loopback(&npa(&["primary"]), IpFamily::V4));
        assert!(!selects_loopback(&all, IpFamily::V6));
    }
}
