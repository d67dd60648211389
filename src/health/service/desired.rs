//! Which Service health checks this node should serve, and what each answers, derived from a
//! [`Snapshot`].
//!
//! Pure: no I/O, never fails. Follows upstream: a Service gets a check when the model gives it a
//! `healthCheckNodePort` (LoadBalancer with `externalTrafficPolicy: Local`), and the check counts
//! the distinct IPs of the Service's **ready** endpoints on this node, over all its ports. A
//! terminating endpoint does not count even while it still serves (KEP-1669), so a node with
//! only terminating endpoints tells the load balancer to go elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crate::cluster::{IpFamily, ServiceKey, Snapshot};

/// One Service's health check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// The `healthCheckNodePort` to listen on.
    pub port: u16,
    pub local_endpoints: LocalEndpoints,
}

/// Local ready endpoint counts, per IP family the Service has.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalEndpoints(BTreeMap<IpFamily, usize>);

impl LocalEndpoints {
    /// The count for a request that arrived over `family`. Upstream runs one check per family,
    /// and so do the listeners (only in the Service's families); a request over another family
    /// (an IPv4-mapped peer, say) answers with the count of the family the Service has.
    pub fn for_family(&self, family: IpFamily) -> usize {
        self.0
            .get(&family)
            .or_else(|| self.0.values().next())
            .copied()
            .unwrap_or(0)
    }

    /// Counts per family, for logs.
    pub fn families(&self) -> &BTreeMap<IpFamily, usize> {
        &self.0
    }

    /// Builds counts directly, for callers that know them (tests, other sources).
    pub fn from_counts(counts: impl IntoIterator<Item = (IpFamily, usize)>) -> LocalEndpoints {
        LocalEndpoints(counts.into_iter().collect())
    }
}

/// Every Service health check the snapshot asks for.
#[doc(alias = "LocalReadyEndpoints")]
pub fn desired(snapshot: &Snapshot) -> BTreeMap<ServiceKey, Check> {
    let mut ips: BTreeMap<&ServiceKey, (u16, BTreeMap<IpFamily, BTreeSet<IpAddr>>)> =
        BTreeMap::new();
    for state in snapshot.ports.values() {
        let Some(port) = state.port.health_check_node_port else {
            continue;
        };
        let (_, families) = ips
            .entry(&state.port.name.service)
            .or_insert_with(|| (port, BTreeMap::new()));
        for view in &state.families {
            let local = families.entry(view.family).or_default();
            local.extend(
                view.endpoints
                    .iter()
                    .filter(|e| e.is_local && e.ready)
                    .map(|e| e.ip),
            );
        }
    }
    ips.into_iter()
        .map(|(key, (port, families))| {
            let counts = families.into_iter().map(|(f, set)| (f, set.len()));
            let check = Check {
                port,
                local_endpoints: LocalEndpoints(counts.collect()),
            };
            (key.clone(), check)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::model::ServiceType;
    use crate::cluster::{
        Endpoint, FamilyView, Protocol, Selection, ServicePort, ServicePortName, ServicePortState,
        TrafficPolicy,
    };

    fn endpoint(ip: &str, port: u16, local: bool, ready: bool) -> Endpoint {
        Endpoint {
            ip: ip.parse().unwrap(),
            port,
            ready,
            serving: true,
            terminating: !ready,
            placement: Default::default(),
            is_local: local,
        }
    }

    fn port(
        svc: &str,
        name: &str,
        hcnp: Option<u16>,
        views: Vec<(&str, Vec<Endpoint>)>,
    ) -> ServicePortState {
        ServicePortState {
            port: ServicePort {
                name: ServicePortName {
                    service: ServiceKey::new("default", svc),
                    port: name.into(),
                    protocol: Protocol::Tcp,
                },
                service_type: ServiceType::LoadBalancer,
                port: 80,
                node_port: Some(30080),
                affinity_timeout_seconds: None,
                internal_policy: TrafficPolicy::Cluster,
                external_policy: TrafficPolicy::Local,
                health_check_node_port: hcnp,
                traffic_distribution: None,
                allocate_load_balancer_node_ports: true,
                ipvs_scheduler: None,
            },
            families: views
                .into_iter()
                .map(|(cluster_ip, endpoints)| {
                    let cluster_ip: IpAddr = cluster_ip.parse().unwrap();
                    FamilyView {
                        family: IpFamily::of(&cluster_ip),
                        cluster_ip,
                        external_ips: vec![],
                        load_balancer_ips: vec![],
                        load_balancer_source_ranges: vec![],
                        endpoints,
                        selection: Selection::default(),
                    }
                })
                .collect(),
        }
    }

    fn snapshot(ports: Vec<ServicePortState>) -> Snapshot {
        Snapshot::new(
            Arc::default(),
            Arc::new(
                ports
                    .into_iter()
                    .map(|p| (p.port.name.clone(), Arc::new(p)))
                    .collect(),
            ),
        )
    }

    #[test]
    fn counts_distinct_local_ready_ips_over_all_ports_of_a_service() {
        let eps = || {
            vec![
                endpoint("10.0.0.1", 8080, true, true),
                endpoint("10.0.0.2", 8080, false, true),
                endpoint("10.0.0.3", 8080, true, false),
            ]
        };
        let snap = snapshot(vec![
            port("web", "http", Some(31000), vec![("172.30.0.1", eps())]),
            port(
                "web",
                "https",
                Some(31000),
                vec![(
                    "172.30.0.1",
                    vec![
                        endpoint("10.0.0.1", 8443, true, true),
                        endpoint("10.0.0.4", 8443, true, true),
                    ],
                )],
            ),
            port("plain", "", None, vec![("172.30.0.2", eps())]),
        ]);
        let want = desired(&snap);
        assert_eq!(want.len(), 1, "only Services with a healthCheckNodePort");
        let check = &want[&ServiceKey::new("default", "web")];
        assert_eq!(check.port, 31000);
        assert_eq!(check.local_endpoints.for_family(IpFamily::V4), 2);
    }

    #[test]
    fn only_terminating_local_endpoints_count_as_none() {
        let snap = snapshot(vec![port(
            "web",
            "",
            Some(31000),
            vec![("172.30.0.1", vec![endpoint("10.0.0.3", 80, true, false)])],
        )]);
        let check = &desired(&snap)[&ServiceKey::new("default", "web")];
        assert_eq!(check.local_endpoints.for_family(IpFamily::V4), 0);
    }

    #[test]
    fn dual_stack_counts_per_family_and_single_stack_answers_for_both() {
        let snap = snapshot(vec![
            port(
                "dual",
                "",
                Some(31000),
                vec![
                    ("172.30.0.1", vec![endpoint("10.0.0.1", 80, true, true)]),
                    (
                        "fd00::1",
                        vec![
                            endpoint("fd01::1", 80, true, true),
                            endpoint("fd01::2", 80, true, true),
                        ],
                    ),
                ],
            ),
            port(
                "v6only",
                "",
                Some(31001),
                vec![("fd00::2", vec![endpoint("fd01::3", 80, true, true)])],
            ),
        ]);
        let want = desired(&snap);
        let dual = &want[&ServiceKey::new("default", "dual")].local_endpoints;
        assert_eq!(dual.for_family(IpFamily::V4), 1);
        assert_eq!(dual.for_family(IpFamily::V6), 2);
        let v6 = &want[&ServiceKey::new("default", "v6only")].local_endpoints;
        assert_eq!(v6.for_family(IpFamily::V4), 1);
    }
}
