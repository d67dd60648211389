//! The diff on small kernel states: nothing to do when equal, in-place updates, graceful
//! termination, and which kernel services are ours to delete.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use crate::cluster::IpFamily;
use crate::dataplane::ipvs::backend::netlink::{Protocol, Scheduler, Stats};
use crate::dataplane::ipvs::desired::{Desired, Frontend, Guard, Masquerade, VirtualService};

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn key(proto: Protocol, a: &str) -> ServiceKey {
    ServiceKey::Address {
        protocol: proto,
        address: addr(a),
    }
}

fn tcp(a: &str) -> ServiceKey {
    key(Protocol::Tcp, a)
}

fn want(services: &[(ServiceKey, &[&str])]) -> Desired {
    let mut d = Desired::new(IpFamily::V4);
    for (k, dests) in services {
        d.services.insert(
            *k,
            VirtualService {
                service: Service::new(*k, "rr"),
                destinations: dests
                    .iter()
                    .map(|a| Destination::masquerade(addr(a), 1))
                    .collect(),
                owner: crate::cluster::ServicePortName {
                    service: crate::cluster::ServiceKey::new("ns", "svc"),
                    port: "p".into(),
                    protocol: crate::cluster::Protocol::Tcp,
                },
                frontend: Frontend::ClusterIp,
                guard: Guard::None,
                masquerade: Masquerade::ClusterIp,
                allowed_sources: None,
            },
        );
    }
    d
}

/// A kernel destination with `weight` and `conns` active connections.
fn listed(a: &str, weight: u32, conns: u32) -> ListedDestination {
    ListedDestination {
        destination: Destination::masquerade(addr(a), weight),
        active_connections: conns,
        inactive_connections: 0,
        persistent_connections: 0,
        stats: Stats::default(),
    }
}

fn kernel(services: &[(ServiceKey, Vec<ListedDestination>)]) -> Kernel {
    Kernel {
        services: services
            .iter()
            .map(|(k, ds)| {
                (
                    *k,
                    KernelService {
                        service: Service::new(*k, "rr"),
                        destinations: ds
                            .iter()
                            .map(|d| (d.destination.address, d.clone()))
                            .collect(),
                    },
                )
            })
            .collect(),
    }
}

fn run(k: &Kernel, w: &Desired) -> Diff {
    diff(k, w, &ModeConfig::default(), &BTreeMap::new())
}

#[test]
fn an_empty_kernel_gets_each_service_before_its_destinations() {
    let vip = tcp("10.96.0.10:80");
    let d = run(
        &Kernel::default(),
        &want(&[(vip, &["10.244.1.5:8080", "10.244.2.5:8080"])]),
    );
    assert_eq!(
        d.requests,
        [
            Request::NewService(Service::new(vip, "rr")),
            Request::NewDest(vip, Destination::masquerade(addr("10.244.1.5:8080"), 1)),
            Request::NewDest(vip, Destination::masquerade(addr("10.244.2.5:8080"), 1)),
        ]
    );
}

#[test]
fn a_kernel_that_holds_the_plan_gets_no_request() {
    let vip = tcp("10.96.0.10:80");
    let k = kernel(&[(vip, vec![listed("10.244.1.5:8080", 1, 3)])]);
    let d = run(&k, &want(&[(vip, &["10.244.1.5:8080"])]));
    assert!(d.requests.is_empty(), "{:?}", d.requests);
    assert!(d.draining.is_empty());
}

#[test]
fn a_scheduler_change_updates_the_service_in_place() {
    let vip = tcp("10.96.0.10:80");
    let k = kernel(&[(vip, vec![listed("10.244.1.5:8080", 1, 0)])]);
    let mut w = want(&[(vip, &["10.244.1.5:8080"])]);
    let vs = w.services.get_mut(&vip).unwrap();
    vs.service.scheduler = Scheduler::new("sh");
    let changed = vs.service.clone();
    let d = run(&k, &w);
    assert_eq!(d.requests, [Request::SetService(changed)]);
}

#[test]
fn a_tcp_destination_that_left_drains_at_weight_zero_then_goes_when_idle_or_too_long() {
    let vip = tcp("10.96.0.10:80");
    let w = want(&[(vip, &["10.244.1.5:8080"])]);
    let gone = "10.244.2.5:8080";

    // First: weight 0, connections kept.
    let k = kernel(&[(
        vip,
        vec![listed("10.244.1.5:8080", 1, 0), listed(gone, 1, 2)],
    )]);
    let d = run(&k, &w);
    assert_eq!(
        d.requests,
        [Request::SetDest(
            vip,
            Destination::masquerade(addr(gone), 0)
        )]
    );
    assert_eq!(d.draining, [(vip, addr(gone))]);

    // Still busy: kept.
    let k = kernel(&[(
        vip,
        vec![listed("10.244.1.5:8080", 1, 0), listed(gone, 0, 2)],
    )]);
    let d = run(&k, &w);
    assert!(d.requests.is_empty());
    assert_eq!(d.draining, [(vip, addr(gone))]);

    // Busy past the limit: deleted anyway.
    let long = BTreeMap::from([((vip, addr(gone)), Duration::from_secs(301))]);
    let d = diff(&k, &w, &ModeConfig::default(), &long);
    assert_eq!(d.requests, [Request::DelDest(vip, addr(gone))]);
    assert!(d.draining.is_empty());

    // Idle: deleted.
    let k = kernel(&[(
        vip,
        vec![listed("10.244.1.5:8080", 1, 0), listed(gone, 0, 0)],
    )]);
    let d = run(&k, &w);
    assert_eq!(d.requests, [Request::DelDest(vip, addr(gone))]);
}

#[test]
fn udp_and_sctp_destinations_that_left_go_at_once() {
    for proto in [Protocol::Udp, Protocol::Sctp] {
        let vip = key(proto, "10.96.0.53:53");
        let k = kernel(&[(
            vip,
            vec![listed("10.244.1.5:53", 1, 0), listed("10.244.2.5:53", 1, 4)],
        )]);
        let d = run(&k, &want(&[(vip, &["10.244.1.5:53"])]));
        assert_eq!(d.requests, [Request::DelDest(vip, addr("10.244.2.5:53"))]);
    }
}

#[test]
fn a_destination_at_weight_zero_that_the_plan_has_gets_its_weight_back() {
    let vip = tcp("10.96.0.10:80");
    let k = kernel(&[(vip, vec![listed("10.244.1.5:8080", 0, 1)])]);
    let d = run(&k, &want(&[(vip, &["10.244.1.5:8080"])]));
    assert_eq!(
        d.requests,
        [Request::SetDest(
            vip,
            Destination::masquerade(addr("10.244.1.5:8080"), 1)
        )]
    );
}

#[test]
fn only_our_familys_address_services_outside_exclude_cidrs_are_deleted() {
    let cfg = ModeConfig {
        exclude_cidrs: vec!["10.200.0.0/16".parse().unwrap()],
        ..ModeConfig::default()
    };
    let stale = tcp("10.96.0.99:80");
    let excluded = tcp("10.200.0.1:80");
    let v6 = tcp("[fd00::1]:80");
    let fwmark = ServiceKey::Fwmark {
        family: IpFamily::V4,
        mark: 7,
    };
    let k = kernel(&[
        (stale, vec![]),
        (excluded, vec![]),
        (v6, vec![]),
        (fwmark, vec![]),
    ]);
    let d = diff(&k, &want(&[]), &cfg, &BTreeMap::new());
    assert_eq!(d.requests, [Request::DelService(stale)]);
}

#[test]
fn the_kernel_after_the_requests_is_the_plan_and_then_nothing_is_left_to_send() {
    let vip = tcp("10.96.0.10:80");
    let stale = tcp("10.96.0.99:80");
    let mut k = kernel(&[
        (
            vip,
            vec![
                listed("10.244.1.5:8080", 1, 0),
                listed("10.244.9.9:8080", 1, 5),
            ],
        ),
        (stale, vec![listed("10.244.1.5:8080", 1, 0)]),
    ]);
    let w = want(&[
        (vip, &["10.244.1.5:8080", "10.244.2.5:8080"]),
        (tcp("10.96.0.11:80"), &["10.244.3.5:8080"]),
    ]);
    let d = run(&k, &w);
    for r in &d.requests {
        k.apply(r);
    }
    let again = run(&k, &w);
    assert!(again.requests.is_empty(), "{:?}", again.requests);
    assert_eq!(
        again.draining,
        [(vip, addr("10.244.9.9:8080"))],
        "still draining at weight 0"
    );
    assert!(!k.services.contains_key(&stale));
}
