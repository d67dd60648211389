//! The IPVS mode's virtual services as a live node's kernel holds them, and how they differ
//! from the plan.

use std::net::SocketAddr;

use crate::cluster::IpFamily;
use crate::dataplane::inspect::Error;
use crate::dataplane::ipvs::apply::{Backend as _, KernelBackend};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::dataplane::ipvs::desired::Desired;
use crate::dataplane::ipvs::diff::Kernel;

/// The virtual services of `family` as the kernel holds them, with their destinations.
pub fn read_ipvs(netns: Option<&str>, family: IpFamily) -> Result<Kernel, Error> {
    let mut backend = KernelBackend::new(netns);
    let read = |e| Error::kernel("reading IPVS", e);
    let listed = backend.services().map_err(read)?;
    crate::dataplane::ipvs::adopt::adopt(listed, family, |s| backend.destinations(&s.service.key))
        .map_err(read)
}

/// The virtual services of the plan as the kernel holds them.
#[derive(Debug)]
pub struct IpvsRead {
    /// Each planned virtual service the kernel has, with the kernel's destinations and
    /// weights; one the kernel lacks is left out.
    pub services: Desired,
    /// What is missing, extra or different, one line each.
    pub drift: Vec<String>,
    /// Destinations the kernel has at weight 0 that the plan no longer has: draining
    /// (graceful termination keeps them while they have connections). They take no new
    /// connection, so a new connection meets what the plan means; not drift.
    pub draining: Vec<(ServiceKey, SocketAddr)>,
}

/// The planned virtual services as the kernel holds them, for the tracer: each planned one the
/// kernel has, with the kernel's destinations and weights (a draining one at weight 0 takes no
/// new connection); one the kernel lacks is left out. With the drift: what is missing, extra
/// or different. Virtual services the plan does not have are someone else's or stale; the
/// tracer knows nothing of them (no owner), so they are named in the drift only.
pub fn ipvs_as_read(planned: &Desired, kernel: &Kernel) -> IpvsRead {
    let mut read = planned.clone();
    let mut drift = Vec::new();
    let mut draining = Vec::new();
    read.services
        .retain(|key, vs| match kernel.services.get(key) {
            None => {
                drift.push(format!(
                    "virtual service {key} ({}) is not in the kernel",
                    vs.owner
                ));
                false
            }
            Some(k) => {
                let had: Vec<_> = vs.destinations.iter().map(|d| d.address).collect();
                vs.destinations = k.destinations.values().map(|d| d.destination).collect();
                let now: Vec<_> = vs.destinations.iter().map(|d| d.address).collect();
                for a in had.iter().filter(|a| !now.contains(a)) {
                    drift.push(format!(
                        "virtual service {key}: destination {a} is not in the kernel"
                    ));
                }
                for d in vs.destinations.iter().filter(|d| !had.contains(&d.address)) {
                    if d.weight == 0 {
                        draining.push((*key, d.address));
                    } else {
                        drift.push(format!(
                            "virtual service {key}: destination {} is not in the plan",
                            d.address
                        ));
                    }
                }
                true
            }
        });
    for key in kernel
        .services
        .keys()
        .filter(|k| !planned.services.contains_key(k))
    {
        drift.push(format!(
            "virtual service {key} is in the kernel but not in the plan"
        ));
    }
    IpvsRead {
        services: read,
        drift,
        draining,
    }
}

/// Why a draining destination of the packet's virtual service takes nothing new.
pub fn draining_reason(destination: SocketAddr) -> String {
    format!(
        "{destination} is draining (weight 0, no longer an endpoint): it keeps its open \
         connections and takes no new one (graceful termination)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ipvs::diff::KernelService;
    use crate::dataplane::ipvs::{self, HostAddresses};
    use crate::testing::snapshots::{node, snapshot, svc};

    #[test]
    fn ipvs_as_read_takes_the_kernels_destinations_and_names_every_difference() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .ep("10.244.1.2", 8080, "node-a")
                    .ep("10.244.2.2", 8080, "node-b"),
                svc("default/db", "10.96.0.20", 5432).ep("10.244.2.3", 5432, "node-b"),
            ],
        );
        let cfg = ipvs::ModeConfig::default();
        let planned = ipvs::plan(&snap, &cfg, IpFamily::V4, &HostAddresses::default());
        let mut kernel = Kernel::default();
        for (key, vs) in &planned.services {
            kernel.services.insert(
                *key,
                KernelService {
                    service: vs.service.clone(),
                    destinations: Default::default(),
                },
            );
        }
        // The kernel as planned but: web lost 10.244.2.2, db is gone.
        let web = *planned
            .services
            .iter()
            .find(|(_, vs)| vs.owner.service.name.as_ref() == "web")
            .unwrap()
            .0;
        let db = *planned
            .services
            .iter()
            .find(|(_, vs)| vs.owner.service.name.as_ref() == "db")
            .unwrap()
            .0;
        kernel.services.remove(&db);
        let kept = planned.services[&web].destinations[0];
        kernel.services.get_mut(&web).unwrap().destinations.insert(
            kept.address,
            crate::dataplane::ipvs::backend::netlink::ListedDestination {
                destination: kept,
                active_connections: 0,
                inactive_connections: 0,
                persistent_connections: 0,
                stats: Default::default(),
            },
        );
        // And a destination the plan dropped, draining at weight 0: not drift.
        let gone = crate::dataplane::ipvs::backend::netlink::Destination {
            address: "10.244.9.9:8080".parse().unwrap(),
            weight: 0,
            ..kept
        };
        kernel.services.get_mut(&web).unwrap().destinations.insert(
            gone.address,
            crate::dataplane::ipvs::backend::netlink::ListedDestination {
                destination: gone,
                active_connections: 1,
                inactive_connections: 0,
                persistent_connections: 0,
                stats: Default::default(),
            },
        );
        let IpvsRead {
            services: read,
            drift,
            draining,
        } = ipvs_as_read(&planned, &kernel);
        assert_eq!(draining, vec![(web, gone.address)]);
        assert!(!drift.iter().any(|d| d.contains("10.244.9.9")), "{drift:?}");
        assert_eq!(read.services[&web].destinations.len(), 2);
        assert!(read.services[&web].destinations.contains(&kept));
        assert!(!read.services.contains_key(&db));
        assert!(
            drift
                .iter()
                .any(|d| d.contains("10.244.2.2:8080 is not in the kernel")),
            "{drift:?}"
        );
        assert!(
            drift.iter().any(
                |d| d.contains(&format!("{db} (default/db")) && d.contains("not in the kernel")
            ),
            "{drift:?}"
        );
        let none = ipvs_as_read(&planned, &{
            let mut k = Kernel::default();
            for (key, vs) in &planned.services {
                k.services.insert(
                    *key,
                    KernelService {
                        service: vs.service.clone(),
                        destinations: vs
                            .destinations
                            .iter()
                            .map(|d| {
                                (
                                    d.address,
                                    crate::dataplane::ipvs::backend::netlink::ListedDestination {
                                        destination: *d,
                                        active_connections: 0,
                                        inactive_connections: 0,
                                        persistent_connections: 0,
                                        stats: Default::default(),
                                    },
                                )
                            })
                            .collect(),
                    },
                );
            }
            k
        });
        assert!(
            none.drift.is_empty() && none.draining.is_empty(),
            "{none:?}"
        );
    }
}
