//! Where Service health checks listen: the node's NodePort addresses, as `nodePortAddresses`
//! selects them, or every address when it matches all.
//!
//! Pure: the caller passes the host's local addresses (an I/O question answered at the edge).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cluster::{IpFamily, NodeContext};
use crate::config::NodePortAddresses;

/// The addresses every Service health check listens on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    /// One wildcard listener per check. It is bound to `[::]`, which on Linux (with the default
    /// `net.ipv6.bindv6only=0`) also accepts IPv4, like upstream's Go listener on `0.0.0.0`;
    /// where IPv6 is unavailable, `0.0.0.0`.
    Any,
    /// One listener per address, sorted, without duplicates.
    Addresses(Vec<IpAddr>),
}

impl Listen {
    /// Resolves `nodePortAddresses` for this node: `all` or a `/0` CIDR matches every address;
    /// otherwise `primary` gives the Node's primary IPs, `localhost` the local loopback
    /// addresses, and each CIDR the local addresses inside it.
    pub fn resolve(
        addresses: &NodePortAddresses,
        node: &NodeContext,
        local_addresses: &[IpAddr],
    ) -> Listen {
        if addresses.all || addresses.cidrs.iter().any(|c| c.prefix_len() == 0) {
            return Listen::Any;
        }
        let mut chosen = BTreeSet::new();
        if addresses.primary {
            chosen.extend(IpFamily::ALL.iter().filter_map(|f| node.primary_ip(*f)));
        }
        for ip in local_addresses {
            if (addresses.localhost && ip.is_loopback())
                || addresses.cidrs.iter().any(|c| c.contains(ip))
            {
                chosen.insert(*ip);
            }
        }
        Listen::Addresses(chosen.into_iter().collect())
    }

    /// The socket addresses to bind for `port`, in order. For [`Listen::Any`] the first is the
    /// dual-stack wildcard and the second the IPv4 one, to try when the first cannot be bound
    /// because the host has no IPv6.
    pub fn sockets(&self, port: u16) -> Vec<SocketAddr> {
        match self {
            Listen::Any => vec![
                SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port),
                SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port),
            ],
            Listen::Addresses(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, port)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::model::NodeAddress;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn all_and_match_all_cidrs_listen_on_the_wildcard() {
        let node = NodeContext::named("n");
        let all = NodePortAddresses {
            all: true,
            ..NodePortAddresses::default()
        };
        assert_eq!(Listen::resolve(&all, &node, &[]), Listen::Any);
        let zero = NodePortAddresses {
            cidrs: vec!["0.0.0.0/0".parse().unwrap()],
            ..NodePortAddresses::default()
        };
        assert_eq!(Listen::resolve(&zero, &node, &[]), Listen::Any);
    }

    #[test]
    fn primary_localhost_and_cidrs_pick_addresses() {
        let mut node = NodeContext::named("n");
        node.addresses = vec![
            NodeAddress {
                kind: "InternalIP".into(),
                ip: ip("192.168.1.10"),
            },
            NodeAddress {
                kind: "InternalIP".into(),
                ip: ip("fd00::10"),
            },
        ];
        let local = [
            ip("127.0.0.1"),
            ip("::1"),
            ip("192.168.1.10"),
            ip("10.1.2.3"),
        ];
        let pick = NodePortAddresses {
            primary: true,
            localhost: true,
            cidrs: vec!["10.1.0.0/16".parse().unwrap()],
            all: false,
        };
        assert_eq!(
            Listen::resolve(&pick, &node, &local),
            Listen::Addresses(vec![
                ip("10.1.2.3"),
                ip("127.0.0.1"),
                ip("192.168.1.10"),
                ip("::1"),
                ip("fd00::10"),
            ])
        );
    }
}
