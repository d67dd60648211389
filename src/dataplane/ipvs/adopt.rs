//! Adoption: the kernel's IPVS services and destinations, as the client lists them, → the
//! [`Kernel`] state the diff starts from. Pure.
//!
//! Every service of the family is read, ours or not: [`diff`](super::diff) decides which it may
//! change (never those in `excludeCIDRs` or with a firewall mark). Nothing is flushed, so a
//! restart keeps every connection: the first full sync changes only what differs, and the
//! kernel's weight-0 destinations the plan still has get their weight back.

use super::backend::netlink::{ListedDestination, ListedService};
use super::diff::{Kernel, KernelService};
use crate::cluster::IpFamily;

/// The services of `family` in `listed`, each with its destinations (`destinations` answers
/// for one service, as the kernel's per-service dump does).
pub fn adopt<E>(
    listed: Vec<ListedService>,
    family: IpFamily,
    mut destinations: impl FnMut(&ListedService) -> Result<Vec<ListedDestination>, E>,
) -> Result<Kernel, E> {
    let mut kernel = Kernel::default();
    for s in listed {
        if s.service.key.family() != family {
            continue;
        }
        let dests = destinations(&s)?
            .into_iter()
            .map(|d| (d.destination.address, d))
            .collect();
        kernel.services.insert(
            s.service.key,
            KernelService {
                service: s.service,
                destinations: dests,
            },
        );
    }
    Ok(kernel)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::dataplane::ipvs::backend::netlink::{
        Destination, Protocol, Service, ServiceKey, Stats,
    };

    fn listed(a: &str) -> ListedService {
        let key = ServiceKey::Address {
            protocol: Protocol::Tcp,
            address: a.parse().unwrap(),
        };
        ListedService {
            service: Service::new(key, "rr"),
            stats: Stats::default(),
        }
    }

    #[test]
    fn the_familys_services_are_read_with_their_destinations() {
        let dest = |a: &str| ListedDestination {
            destination: Destination::masquerade(a.parse().unwrap(), 1),
            active_connections: 0,
            inactive_connections: 0,
            persistent_connections: 0,
            stats: Stats::default(),
        };
        let mut asked = Vec::new();
        let k = adopt::<()>(
            vec![listed("10.96.0.1:443"), listed("[fd00::1]:443")],
            IpFamily::V4,
            |s| {
                asked.push(s.service.key);
                Ok(vec![dest("10.0.0.11:6443")])
            },
        )
        .unwrap();
        assert_eq!(asked.len(), 1, "the other family's service is not read");
        let svc = k.services.values().next().unwrap();
        let addr: SocketAddr = "10.0.0.11:6443".parse().unwrap();
        assert_eq!(svc.destinations[&addr].destination.weight, 1);
    }

    #[test]
    fn a_failed_destination_dump_fails_the_adoption() {
        let r = adopt(vec![listed("10.96.0.1:443")], IpFamily::V4, |_| {
            Err("EPERM")
        });
        assert_eq!(r, Err("EPERM"));
    }
}
