//! What `explain` reads from a live node's kernel, and how it tells drift.
//!
//! The reading is the adopting applier's own ([`nft::backend::Backend::dump`]), so
//! `explain` sees our table exactly as a restarted proxy would adopt it. Drift is the diff
//! from what was read to what the proxy would program now, shown as the nft commands that
//! would repair it.

use std::net::SocketAddr;

use crate::cluster::IpFamily;
use crate::config::NftablesEncoder;
use crate::dataplane::ipvs::apply::{Backend as _, KernelBackend};
use crate::dataplane::ipvs::backend::netlink::ServiceKey;
use crate::dataplane::ipvs::desired::Desired;
use crate::dataplane::ipvs::diff::Kernel;
use crate::nft::{self, Ruleset, ruleset::Family};

/// Lines of the repair script shown; the rest is counted.
const DRIFT_LINES: usize = 8;

/// Our nftables table of `family` as the kernel holds it (`None`: not there), in the named
/// network namespace or the caller's.
pub fn read_nftables(
    encoder: NftablesEncoder,
    netns: Option<&str>,
    family: Family,
) -> Result<Option<Ruleset>, String> {
    let mut backend = nft::backend::for_encoder(encoder, netns);
    backend
        .dump(family)
        .map(|parsed| parsed.map(|p| p.ruleset))
        .map_err(|e| {
            format!(
                "reading our nftables table: {}",
                crate::causes::one_line(&e)
            )
        })
}

/// The dynamic sets of our nftables table as the kernel holds them, for the affinity lookup.
pub struct NftablesSets {
    backend: Box<dyn nft::backend::Backend>,
    family: Family,
}

impl NftablesSets {
    pub fn new(encoder: NftablesEncoder, netns: Option<&str>, family: Family) -> NftablesSets {
        NftablesSets {
            backend: nft::backend::for_encoder(encoder, netns),
            family,
        }
    }
}

impl super::affinity::Lookup for NftablesSets {
    fn keys(
        &mut self,
        set: &nft::Name,
        decl: &nft::ruleset::SetDecl,
    ) -> Result<Option<Vec<nft::ruleset::Tuple>>, String> {
        self.backend
            .dynamic_keys(self.family, set, decl)
            .map_err(|e| format!("reading set {set}: {}", crate::causes::one_line(&e)))
    }
}

/// Every base chain of the `ip`, `ip6` and `inet` tables in the kernel (`None`: the encoder
/// cannot list them), for naming other programs' chains on a packet's path.
pub fn base_chains(
    encoder: NftablesEncoder,
    netns: Option<&str>,
) -> Result<Option<Vec<nft::backend::BaseChainSummary>>, String> {
    nft::backend::for_encoder(encoder, netns)
        .base_chains()
        .map_err(|e| {
            format!(
                "listing the kernel's base chains: {}",
                crate::causes::one_line(&e)
            )
        })
}

/// The virtual services of `family` as the kernel holds them, with their destinations.
pub fn read_ipvs(netns: Option<&str>, family: IpFamily) -> Result<Kernel, String> {
    let mut backend = KernelBackend::new(netns);
    let listed = backend
        .services()
        .map_err(|e| format!("reading IPVS: {}", crate::causes::one_line(&e)))?;
    crate::dataplane::ipvs::adopt::adopt(listed, family, |s| backend.destinations(&s.service.key))
        .map_err(|e| format!("reading IPVS: {}", crate::causes::one_line(&e)))
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

/// How `kernel` differs from `planned`: empty when it holds the plan.
pub fn drift(kernel: Option<&Ruleset>, planned: &Ruleset) -> Vec<String> {
    let Some(kernel) = kernel else {
        return vec!["our table is not in the kernel: nothing of ours handles this family".into()];
    };
    let repair = nft::diff(kernel, planned);
    if repair.ops.is_empty() {
        return Vec::new();
    }
    let script = nft::render(&repair);
    let lines: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    shortened(
        &lines,
        &format!(
            "{} operations would bring the kernel to the plan (a sync pending, or another \
             program changed our table):",
            repair.operations()
        ),
    )
}

/// A repair script in short, for every mode alike: `heading`, its first [`DRIFT_LINES`]
/// lines, and how many more there are; empty when `lines` is.
pub(super) fn shortened(lines: &[&str], heading: &str) -> Vec<String> {
    if lines.is_empty() {
        return Vec::new();
    }
    let mut out = vec![heading.to_string()];
    out.extend(lines.iter().take(DRIFT_LINES).map(|l| l.to_string()));
    if lines.len() > DRIFT_LINES {
        out.push(format!("… {} more lines", lines.len() - DRIFT_LINES));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ipvs::diff::KernelService;
    use crate::dataplane::ipvs::{self, HostAddresses};
    use crate::dataplane::nftables;
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

    #[test]
    fn drift_is_the_repair_in_short() {
        let cfg = nftables::ModeConfig::default();
        let before = snapshot(node(), vec![svc("default/web", "10.96.0.10", 80)]);
        let after = snapshot(
            node(),
            vec![svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a")],
        );
        let kernel = nftables::plan::plan(&before, &cfg, IpFamily::V4);
        let planned = nftables::plan::plan(&after, &cfg, IpFamily::V4);
        assert!(drift(Some(&planned), &planned).is_empty());
        let d = drift(Some(&kernel), &planned);
        assert!(
            d[0].contains("operations would bring the kernel to the plan"),
            "{d:?}"
        );
        assert!(d.iter().any(|l| l.contains("10.244.1.2")), "{d:?}");
        assert!(d.len() <= DRIFT_LINES + 2);
        assert!(drift(None, &planned)[0].contains("not in the kernel"));
    }
}
