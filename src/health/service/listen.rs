//! Where Service health checks listen: the node's NodePort addresses, as `nodePortAddresses`
//! selects them, or every address when it matches all; in either case only in the IP families
//! the Service has, as upstream runs one check server per family.
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

    /// The socket addresses to bind for `port` of a Service with `families` (every family
    /// when empty). For [`Listen::Any`] they are alternatives, in order: with both families
    /// the dual-stack wildcard, then the IPv4 one, to try when the first cannot be bound
    /// because the host has no IPv6; with one family that family's wildcard (the IPv6 one
    /// bound IPv6-only, see [`Listen::v6_only`]). For [`Listen::Addresses`] every address of
    /// those families, all to bind.
    pub fn sockets(&self, port: u16, families: &BTreeSet<IpFamily>) -> Vec<SocketAddr> {
        let has = |f: IpFamily| families.is_empty() || families.contains(&f);
        match self {
            Listen::Any => {
                let mut sockets = Vec::new();
                if has(IpFamily::V6) {
                    sockets.push(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port));
                }
                if has(IpFamily::V4) {
                    sockets.push(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port));
                }
                sockets
            }
            Listen::Addresses(ips) => ips
                .iter()
                .filter(|ip| has(IpFamily::of(ip)))
                .map(|ip| SocketAddr::new(*ip, port))
                .collect(),
        }
    }

    /// Whether the IPv6 wildcard of a Service with `families` must refuse IPv4 (it has no
    /// IPv4 check to answer for).
    pub fn v6_only(families: &BTreeSet<IpFamily>) -> bool {
        !families.is_empty() && !families.contains(&IpFamily::V4)
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

    #[test]
    fn a_check_listens_only_in_its_services_families() {
        let v4: BTreeSet<IpFamily> = [IpFamily::V4].into();
        let v6: BTreeSet<IpFamily> = [IpFamily::V6].into();
        let both: BTreeSet<IpFamily> = [IpFamily::V4, IpFamily::V6].into();
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(Listen::Any.sockets(9, &v4), vec![at("0.0.0.0:9")]);
        assert_eq!(Listen::Any.sockets(9, &v6), vec![at("[::]:9")]);
        assert_eq!(
            Listen::Any.sockets(9, &both),
            vec![at("[::]:9"), at("0.0.0.0:9")]
        );
        assert!(Listen::v6_only(&v6));
        assert!(!Listen::v6_only(&v4) && !Listen::v6_only(&both));
        let two = Listen::Addresses(vec![ip("192.168.1.10"), ip("fd00::10")]);
        assert_eq!(two.sockets(9, &v4), vec![at("192.168.1.10:9")]);
        assert_eq!(two.sockets(9, &v6), vec![at("[fd00::10]:9")]);
        assert_eq!(two.sockets(9, &both).len(), 2);
    }
}
