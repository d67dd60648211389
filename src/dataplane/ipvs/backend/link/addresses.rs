//! Which service addresses sit on the dummy link, and the changes that take the addresses bound
//! now to the ones wanted: upstream's bind rule, stated once.
//!
//! Pure: values in, values out, no I/O, never fails.
//!
//! The rule (following upstream's IPVS proxier): every ClusterIP is
//! bound; an externalIP or a LoadBalancer ingress IP is bound unless the address already
//! exists on another interface of the node, where it is local already and belongs to
//! whoever put it there. Everything bound and no longer wanted is unbound.
//!
//! Why the caller passes ClusterIPs and external addresses apart, and the rule is applied
//! here rather than by the planner: the rule needs the addresses on the node's other
//! interfaces, which is kernel state read at apply time (one address dump gives both those
//! and what `kube-ipvs0` holds, [`super::LinkAddresses`]). A planner that filtered would have
//! to read the host, or be handed a copy that may be a sync old; and an external IP that
//! later appears on `eth0` must be unbound by the next sync, which a pre-filtered set cannot
//! express. So the planner states intent ([`ServiceAddresses`]), and this one function
//! decides against the state read in the same sync.

use std::collections::BTreeSet;
use std::net::IpAddr;

/// The service addresses a plan wants local, by kind, since the bind rule treats the kinds
/// differently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAddresses {
    /// Every ClusterIP: always bound.
    pub cluster_ips: BTreeSet<IpAddr>,
    /// Every externalIP and LoadBalancer ingress IP: bound unless already on another
    /// interface.
    pub external: BTreeSet<IpAddr>,
}

/// What to bind and what to unbind, each in address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressChanges {
    pub bind: BTreeSet<IpAddr>,
    pub unbind: BTreeSet<IpAddr>,
}

impl AddressChanges {
    pub fn is_empty(&self) -> bool {
        self.bind.is_empty() && self.unbind.is_empty()
    }
}

/// The addresses the dummy link should hold: every ClusterIP, and every external address
/// not in `elsewhere` (the addresses of the node's other interfaces).
pub fn wanted(services: &ServiceAddresses, elsewhere: &BTreeSet<IpAddr>) -> BTreeSet<IpAddr> {
    let external = services
        .external
        .iter()
        .filter(|ip| !elsewhere.contains(ip));
    services
        .cluster_ips
        .iter()
        .chain(external)
        .copied()
        .collect()
}

/// The changes that take `bound_now` (the dummy link's addresses, as read) to what
/// `services` want, given `elsewhere` (the addresses of every other interface).
#[doc(alias = "activeBindAddrs")]
pub fn address_changes(
    bound_now: &BTreeSet<IpAddr>,
    services: &ServiceAddresses,
    elsewhere: &BTreeSet<IpAddr>,
) -> AddressChanges {
    let wanted = wanted(services, elsewhere);
    AddressChanges {
        bind: wanted.difference(bound_now).copied().collect(),
        unbind: bound_now.difference(&wanted).copied().collect(),
    }
}

/// One address dump sorted by interface: what the dummy link holds, and the node addresses
/// of every other interface. An address on the dummy link and on another interface is in
/// both (an address may sit on several interfaces).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkAddresses {
    /// Every address on the dummy link, loopback and link-local ones included, so that
    /// whatever is there and unwanted gets unbound.
    pub bound: BTreeSet<IpAddr>,
    /// Every [node address](is_node_address) of every other interface.
    #[doc(alias = "GetAllLocalAddressesExcept")]
    pub elsewhere: BTreeSet<IpAddr>,
}

impl LinkAddresses {
    /// Sorts `(interface index, address)` pairs, the dummy link being `link_index`.
    pub fn sort(link_index: u32, addresses: impl IntoIterator<Item = (u32, IpAddr)>) -> Self {
        let mut sorted = LinkAddresses::default();
        for (index, ip) in addresses {
            if index == link_index {
                sorted.bound.insert(ip);
            } else if is_node_address(ip) {
                sorted.elsewhere.insert(ip);
            }
        }
        sorted
    }
}

/// Whether an address of the node's interfaces counts as a node address, for NodePort
/// virtual services and for the bind rule's "elsewhere": loopback addresses and IPv6
/// link-local ones do not (upstream drops the same: a virtual service on them would be
/// reachable from nowhere else, and link-local ones repeat on every interface).
pub fn is_node_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !v4.is_loopback(),
        IpAddr::V6(v6) => !v6.is_loopback() && !v6.is_unicast_link_local(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ips: &[&str]) -> BTreeSet<IpAddr> {
        ips.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn services(cluster_ips: &[&str], external: &[&str]) -> ServiceAddresses {
        ServiceAddresses {
            cluster_ips: set(cluster_ips),
            external: set(external),
        }
    }

    #[test]
    fn a_first_sync_binds_every_cluster_ip_and_every_external_ip_of_both_families() {
        let want = services(
            &["10.96.0.1", "fd00:96::1"],
            &["203.0.113.7", "2001:db8::7"],
        );
        let changes = address_changes(&set(&[]), &want, &set(&["192.168.1.10"]));
        assert_eq!(
            changes.bind,
            set(&["10.96.0.1", "fd00:96::1", "203.0.113.7", "2001:db8::7"])
        );
        assert!(changes.unbind.is_empty());
    }

    #[test]
    fn an_external_ip_already_on_another_interface_is_not_bound_but_a_cluster_ip_is() {
        let elsewhere = set(&["192.168.1.10", "10.96.0.1"]);
        let want = services(&["10.96.0.1"], &["192.168.1.10", "203.0.113.7"]);
        let changes = address_changes(&set(&[]), &want, &elsewhere);
        assert_eq!(changes.bind, set(&["10.96.0.1", "203.0.113.7"]));
    }

    #[test]
    fn an_external_ip_that_appears_on_another_interface_is_unbound_by_the_next_sync() {
        let bound = set(&["10.96.0.1", "203.0.113.7"]);
        let want = services(&["10.96.0.1"], &["203.0.113.7"]);
        assert!(address_changes(&bound, &want, &set(&[])).is_empty());
        let moved = address_changes(&bound, &want, &set(&["203.0.113.7"]));
        assert_eq!(moved.bind, set(&[]));
        assert_eq!(moved.unbind, set(&["203.0.113.7"]));
    }

    #[test]
    fn what_is_bound_and_no_longer_wanted_is_unbound_and_what_stays_is_left_alone() {
        let bound = set(&["10.96.0.1", "10.96.0.2", "fd00:96::2"]);
        let want = services(&["10.96.0.1", "10.96.0.3"], &[]);
        let changes = address_changes(&bound, &want, &set(&[]));
        assert_eq!(changes.bind, set(&["10.96.0.3"]));
        assert_eq!(changes.unbind, set(&["10.96.0.2", "fd00:96::2"]));
    }

    #[test]
    fn an_address_that_is_both_a_cluster_ip_and_external_is_bound_once_as_a_cluster_ip() {
        let want = services(&["10.96.0.5"], &["10.96.0.5"]);
        let changes = address_changes(&set(&[]), &want, &set(&["10.96.0.5"]));
        assert_eq!(changes.bind, set(&["10.96.0.5"]));
    }

    #[test]
    fn a_dump_is_sorted_into_the_link_s_addresses_and_the_node_addresses_elsewhere() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let dump = [
            (1, ip("127.0.0.1")),
            (1, ip("::1")),
            (2, ip("192.168.1.10")),
            (2, ip("fe80::1")),
            (2, ip("2001:db8::10")),
            (7, ip("10.96.0.1")),
            (7, ip("fd00:96::1")),
            (7, ip("192.168.1.10")),
        ];
        let sorted = LinkAddresses::sort(7, dump);
        assert_eq!(
            sorted.bound,
            set(&["10.96.0.1", "fd00:96::1", "192.168.1.10"])
        );
        assert_eq!(sorted.elsewhere, set(&["192.168.1.10", "2001:db8::10"]));
    }

    #[test]
    fn loopback_and_ipv6_link_local_addresses_are_not_node_addresses() {
        let no = ["127.0.0.1", "127.1.2.3", "::1", "fe80::1", "fe80::aa:bb"];
        let yes = [
            "192.168.1.10",
            "169.254.3.4",
            "2001:db8::1",
            "fd00::1",
            "fec0::1",
        ];
        for ip in no {
            assert!(!is_node_address(ip.parse().unwrap()), "{ip}");
        }
        for ip in yes {
            assert!(is_node_address(ip.parse().unwrap()), "{ip}");
        }
    }
}
