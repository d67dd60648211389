//! Per-Service traffic counters from the kernel's STATS64 of each virtual service, for
//! `kubeproxy_rs_ipvs_*_total` (upstream's IPVS mode exposes none; kube-router exposes 32-bit
//! gauges refreshed at its syncs).
//!
//! Read at each scrape by [`KernelTraffic`]: one dump of the virtual services over its own
//! socket, so a sync never pays for metrics and an idle sync still sends nothing. Which service
//! port a virtual service serves comes from the dataplane's last plan ([`Owners`], republished
//! when the set of virtual services changes). The counters of one kind of frontend of a service
//! port are summed (a NodePort has one virtual service per node address), so the series stay at
//! most four per service port and family whatever the node's addresses; a virtual service that
//! is not ours (`excludeCIDRs`, other programs) is left out.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::backend::netlink::{self as ipvs, ListedService, ServiceKey};
use super::desired::{Desired, Frontend};
use crate::cluster::{IpFamily, ServicePortName};
use crate::dataplane::{ServiceTraffic, TrafficSource};

/// The label value of a frontend kind.
pub fn frontend_label(f: Frontend) -> &'static str {
    match f {
        Frontend::ClusterIp => "cluster-ip",
        Frontend::ExternalIp => "external-ip",
        Frontend::LoadBalancer => "load-balancer",
        Frontend::NodePort => "node-port",
    }
}

/// Virtual service → the service port and kind of frontend it serves.
pub type OwnerMap = BTreeMap<ServiceKey, (ServicePortName, Frontend)>;

/// The owners of the programmed virtual services, shared between the dataplane (which
/// publishes) and [`KernelTraffic`] (which reads at scrape time).
#[derive(Clone, Default)]
pub struct Owners(Arc<Mutex<Arc<OwnerMap>>>);

impl Owners {
    /// Publishes the owners of `states`' virtual services.
    pub fn publish(&self, states: &[Desired]) {
        let map: OwnerMap = states
            .iter()
            .flat_map(|d| &d.services)
            .map(|(k, vs)| (*k, (vs.owner.clone(), vs.frontend)))
            .collect();
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
    }

    /// The owners as last published (a new `Arc` each time they are).
    pub fn current(&self) -> Arc<OwnerMap> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The traffic of every frontend in `owners`, from the kernel's `listed` services. Pure.
pub fn traffic(owners: &OwnerMap, listed: &[ListedService]) -> Vec<ServiceTraffic> {
    let mut sums: BTreeMap<(IpFamily, &ServicePortName, Frontend), ServiceTraffic> =
        BTreeMap::new();
    for l in listed {
        let Some((port, frontend)) = owners.get(&l.service.key) else {
            continue;
        };
        let family = l.service.key.family();
        let sum = sums
            .entry((family, port, *frontend))
            .or_insert_with(|| ServiceTraffic {
                family,
                port: port.clone(),
                frontend: frontend_label(*frontend),
                connections: 0,
                packets_in: 0,
                packets_out: 0,
                bytes_in: 0,
                bytes_out: 0,
            });
        let s = &l.stats;
        sum.connections = sum.connections.saturating_add(s.connections);
        sum.packets_in = sum.packets_in.saturating_add(s.packets_in);
        sum.packets_out = sum.packets_out.saturating_add(s.packets_out);
        sum.bytes_in = sum.bytes_in.saturating_add(s.bytes_in);
        sum.bytes_out = sum.bytes_out.saturating_add(s.bytes_out);
    }
    sums.into_values().collect()
}

/// Reads the counters from the kernel at each scrape (see the module doc).
pub struct KernelTraffic {
    netns: Option<String>,
    owners: Owners,
    /// Opened on the first scrape; dropped after a socket error, so the next one reopens.
    client: Mutex<Option<ipvs::Client>>,
}

impl KernelTraffic {
    pub fn new(netns: Option<&str>, owners: Owners) -> KernelTraffic {
        KernelTraffic {
            netns: netns.map(str::to_owned),
            owners,
            client: Mutex::new(None),
        }
    }

    fn listed(&self) -> Result<Vec<ListedService>, ipvs::Error> {
        let mut client = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if client.is_none() {
            *client = Some(ipvs::Client::open(self.netns.as_deref())?);
        }
        let result = client.as_mut().expect("opened above").services();
        if result.is_err() {
            *client = None;
        }
        result
    }
}

impl TrafficSource for KernelTraffic {
    fn read(&self) -> Vec<ServiceTraffic> {
        let owners = self.owners.current();
        if owners.is_empty() {
            return Vec::new();
        }
        match self.listed() {
            Ok(listed) => traffic(&owners, &listed),
            Err(e) => {
                tracing::warn!(error = %crate::causes::one_line(&e),
                    "cannot read the IPVS counters; the scrape leaves them out");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::ipvs::ModeConfig;
    use crate::dataplane::ipvs::backend::netlink::{Service, Stats};
    use crate::dataplane::ipvs::plan::{HostAddresses, plan};
    use crate::testing::snapshots::{ip, node, snapshot, svc};

    fn listed(key: ServiceKey, connections: u64) -> ListedService {
        ListedService {
            service: Service::new(key, "rr"),
            stats: Stats {
                connections,
                packets_in: 10 * connections,
                bytes_out: 100 * connections,
                ..Stats::default()
            },
        }
    }

    #[test]
    fn node_ports_are_summed_over_node_addresses_and_foreign_services_left_out() {
        let snap = snapshot(
            node(),
            vec![
                svc("ns/web", "10.96.0.10", 80)
                    .node_port(30080)
                    .ep("10.244.2.5", 8080, "node-b"),
            ],
        );
        let host = HostAddresses([ip("10.0.0.11"), ip("192.0.2.7")].into());
        let d = plan(&snap, &ModeConfig::default(), IpFamily::V4, &host);
        let owners = Owners::default();
        owners.publish(std::slice::from_ref(&d));
        let mut kernel: Vec<ListedService> = d
            .services
            .iter()
            .map(|(k, vs)| {
                listed(
                    *k,
                    if vs.frontend == Frontend::NodePort {
                        2
                    } else {
                        5
                    },
                )
            })
            .collect();
        let foreign = ServiceKey::Address {
            protocol: ipvs::Protocol::Tcp,
            address: "10.200.0.1:80".parse().unwrap(),
        };
        kernel.push(listed(foreign, 99));
        let t = traffic(&owners.current(), &kernel);
        assert_eq!(t.len(), 2, "{t:?}");
        let cluster = t.iter().find(|t| t.frontend == "cluster-ip").unwrap();
        assert_eq!(cluster.connections, 5);
        let np = t.iter().find(|t| t.frontend == "node-port").unwrap();
        assert_eq!(
            (np.connections, np.packets_in, np.bytes_out),
            (4, 40, 400),
            "two node addresses, two connections each"
        );
        assert_eq!(np.port.service.name.as_ref(), "web");
        assert_eq!(np.family, IpFamily::V4);
    }
}
