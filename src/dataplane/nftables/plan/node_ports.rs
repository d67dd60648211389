//! Which destination addresses accept NodePort traffic in one family (`nodePortAddresses`).
//!
//! Pure. Upstream's documented rules in our words: `all` accepts every local address (except
//! loopback, which the nftables mode never serves); otherwise the accepted addresses are the
//! node's primary address of the family (`primary`, the nftables default) and the node's
//! addresses inside the given CIDRs; a family with no entry at all accepts every local address.
//! Loopback entries (`localhost`, 127.0.0.0/8) belong to the userspace proxy of KEP-6032 and are
//! never programmed here.
//!
//! CIDRs select among the host's interface addresses, as upstream's do (the shell reads them:
//! `cluster::source::interfaces`); until they are known, and in `plan`, the Node object's
//! addresses stand in.

use std::net::IpAddr;

use crate::cluster::{IpFamily, NodeContext};
use crate::config::NodePortAddresses;

/// How the planner recognises NodePort traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodePortMatch {
    /// Any local destination but loopback (`fib daddr type local`).
    All,
    /// Exactly these addresses (the `nodeport-ips` set), ascending; may be empty, for example
    /// before the Node object is known.
    Addresses(Vec<IpAddr>),
}

pub(super) fn resolve(
    cfg: &NodePortAddresses,
    node: &NodeContext,
    family: IpFamily,
) -> NodePortMatch {
    let cidrs: Vec<_> = cfg
        .cidrs
        .iter()
        .filter(|c| IpFamily::of_net(c) == family)
        .collect();
    let localhost = cfg.localhost;
    if cfg.all || (!cfg.primary && !localhost && cidrs.is_empty()) {
        return NodePortMatch::All;
    }
    let mut addrs: Vec<IpAddr> = node
        .local_addresses()
        .into_iter()
        .filter(|ip| IpFamily::of(ip) == family && cidrs.iter().any(|c| c.contains(ip)))
        .collect();
    if cfg.primary {
        addrs.extend(node.primary_ip(family));
    }
    addrs.retain(|ip| !ip.is_loopback());
    addrs.sort();
    addrs.dedup();
    NodePortMatch::Addresses(addrs)
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

    fn addrs(list: &[&str]) -> NodePortMatch {
        NodePortMatch::Addresses(list.iter().map(|a| a.parse().unwrap()).collect())
    }

    #[test]
    fn primary_is_the_first_internal_ip_of_the_family() {
        let cfg = NodePortAddresses {
            primary: true,
            ..Default::default()
        };
        assert_eq!(resolve(&cfg, &node(), IpFamily::V4), addrs(&["10.0.0.11"]));
        assert_eq!(resolve(&cfg, &node(), IpFamily::V6), addrs(&["fd00::11"]));
        assert_eq!(
            resolve(&cfg, &NodeContext::named("n"), IpFamily::V4),
            addrs(&[])
        );
    }

    #[test]
    fn cidrs_select_node_addresses_and_a_family_without_entries_accepts_all() {
        let cfg = NodePortAddresses {
            cidrs: vec!["192.0.2.0/24".parse().unwrap()],
            ..Default::default()
        };
        assert_eq!(resolve(&cfg, &node(), IpFamily::V4), addrs(&["192.0.2.7"]));
        assert_eq!(resolve(&cfg, &node(), IpFamily::V6), NodePortMatch::All);
    }

    #[test]
    fn cidrs_select_host_addresses_once_known() {
        let cfg = NodePortAddresses {
            cidrs: vec!["10.244.0.0/16".parse().unwrap()],
            primary: true,
            ..Default::default()
        };
        // Known only on the host (a pod gateway), not in the Node object.
        let mut n = node();
        assert_eq!(resolve(&cfg, &n, IpFamily::V4), addrs(&["10.0.0.11"]));
        let host: Vec<IpAddr> = ["10.244.1.1", "10.0.0.11", "127.0.0.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        n.host_addresses = Some(host.into());
        assert_eq!(
            resolve(&cfg, &n, IpFamily::V4),
            addrs(&["10.0.0.11", "10.244.1.1"])
        );
    }

    #[test]
    fn all_wins_and_localhost_is_never_programmed() {
        let all = NodePortAddresses {
            all: true,
            primary: true,
            ..Default::default()
        };
        assert_eq!(resolve(&all, &node(), IpFamily::V4), NodePortMatch::All);
        let lo = NodePortAddresses {
            localhost: true,
            ..Default::default()
        };
        assert_eq!(resolve(&lo, &node(), IpFamily::V4), addrs(&[]));
    }
}
