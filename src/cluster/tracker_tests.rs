use super::*;
use crate::cluster::model::Protocol;
use crate::testing::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn web() -> Service {
    service("default", "web", "10.96.0.10", &[("http", 80, "TCP")])
}

fn web_slice(name: &str, ips: &[&str]) -> EndpointSlice {
    let eps: Vec<_> = ips.iter().map(|ip| ep(ip, "node-a")).collect();
    slice("default", "web", name, &[("http", 8080, "TCP")], &eps)
}

fn http() -> ServicePortName {
    ServicePortName {
        service: ServiceKey::new("default", "web"),
        port: "http".into(),
        protocol: Protocol::Tcp,
    }
}

fn endpoints_of(snap: &Snapshot, name: &ServicePortName) -> Vec<String> {
    snap.get(name).unwrap().families[0]
        .endpoints
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn tracker() -> Tracker {
    Tracker::new("node-a", Features::default())
}

#[test]
fn a_service_and_its_slice_become_one_port_with_endpoints() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(web_slice(
        "web-1",
        &["10.244.1.2", "10.244.1.3"],
    )));
    let (snap, changes) = t.snapshot();
    assert_eq!(changes.ports, BTreeSet::from([http()]));
    assert_eq!(
        endpoints_of(&snap, &http()),
        ["10.244.1.2:8080", "10.244.1.3:8080"]
    );
    let view = &snap.get(&http()).unwrap().families[0];
    assert_eq!(view.cluster_endpoints().unwrap().count(), 2);
    assert!(view.reachable_endpoints().all(|e| e.is_local));
}

#[test]
fn a_snapshot_without_events_reports_no_changes() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.snapshot();
    let (_, changes) = t.snapshot();
    assert!(changes.ports.is_empty());
    assert_eq!(changes.service_changes, 0);
}

#[test]
fn a_change_undone_before_the_snapshot_is_not_reported() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.2"])));
    t.snapshot();
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.9"])));
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.2"])));
    let (_, changes) = t.snapshot();
    assert!(changes.ports.is_empty());
    assert_eq!(
        changes.endpoint_changes, 1,
        "the change was still pending until the snapshot"
    );
}

#[test]
fn a_slice_change_reports_only_its_own_service() {
    let mut t = tracker();
    let other = service("default", "other", "10.96.0.11", &[("http", 80, "TCP")]);
    t.apply(&applied_service(web()));
    t.apply(&applied_service(other));
    t.snapshot();
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.2"])));
    let (_, changes) = t.snapshot();
    assert_eq!(changes.ports, BTreeSet::from([http()]));
}

#[test]
fn deleting_slices_and_services_removes_endpoints_and_ports() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.2"])));
    t.apply(&applied_slice(web_slice("web-2", &["10.244.2.2"])));
    t.snapshot();
    t.apply(&deleted_slice(web_slice("web-1", &[])));
    let (snap, _) = t.snapshot();
    assert_eq!(endpoints_of(&snap, &http()), ["10.244.2.2:8080"]);
    t.apply(&deleted_service(web()));
    let (snap, changes) = t.snapshot();
    assert!(snap.get(&http()).is_none());
    assert_eq!(changes.ports, BTreeSet::from([http()]));
}

#[test]
fn a_removed_port_is_reported_and_dropped() {
    let mut t = tracker();
    t.apply(&applied_service(service(
        "default",
        "web",
        "10.96.0.10",
        &[("http", 80, "TCP"), ("https", 443, "TCP")],
    )));
    t.snapshot();
    t.apply(&applied_service(web()));
    let (snap, changes) = t.snapshot();
    assert_eq!(snap.ports.len(), 1);
    assert_eq!(changes.ports.len(), 1);
    assert_eq!(&*changes.ports.first().unwrap().port, "https");
}

#[test]
fn a_slice_relabelled_to_another_service_moves_its_endpoints() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_service(service(
        "default",
        "api",
        "10.96.0.12",
        &[("http", 80, "TCP")],
    )));
    t.apply(&applied_slice(web_slice("shared", &["10.244.1.2"])));
    t.snapshot();
    let mut moved = web_slice("shared", &["10.244.1.2"]);
    moved
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("kubernetes.io/service-name".into(), "api".into());
    t.apply(&applied_slice(moved));
    let (snap, changes) = t.snapshot();
    assert!(endpoints_of(&snap, &http()).is_empty());
    let api = ServicePortName {
        service: ServiceKey::new("default", "api"),
        ..http()
    };
    assert_eq!(endpoints_of(&snap, &api), ["10.244.1.2:8080"]);
    assert_eq!(changes.ports.len(), 2);
}

#[test]
fn a_relist_deletes_what_it_no_longer_contains() {
    let mut t = tracker();
    let other = service("default", "other", "10.96.0.11", &[("http", 80, "TCP")]);
    t.apply(&listed(
        Kind::Service,
        vec![
            Object::Service(Box::new(web())),
            Object::Service(Box::new(other)),
        ],
    ));
    t.apply(&listed(
        Kind::EndpointSlice,
        vec![Object::EndpointSlice(Box::new(web_slice(
            "web-1",
            &["10.244.1.2"],
        )))],
    ));
    t.snapshot();
    t.apply(&listed(
        Kind::Service,
        vec![Object::Service(Box::new(web()))],
    ));
    t.apply(&listed(Kind::EndpointSlice, vec![]));
    let (snap, changes) = t.snapshot();
    assert_eq!(snap.ports.len(), 1);
    assert!(endpoints_of(&snap, &http()).is_empty());
    assert_eq!(changes.ports.len(), 2);
}

#[test]
fn a_relist_of_unchanged_objects_changes_nothing() {
    let mut t = tracker();
    let list = || listed(Kind::Service, vec![Object::Service(Box::new(web()))]);
    t.apply(&list());
    t.snapshot();
    t.apply(&list());
    let (_, changes) = t.snapshot();
    assert!(changes.ports.is_empty());
    assert_eq!(t.change_counts().service_changes_total, 1);
}

#[test]
fn sync_waits_for_services_slices_and_the_node_but_not_service_cidrs() {
    let mut t = tracker();
    t.apply(&listed(Kind::Service, vec![]));
    t.apply(&listed(Kind::EndpointSlice, vec![]));
    assert!(!t.synced());
    t.apply(&listed(Kind::Node, vec![]));
    assert!(t.synced(), "ServiceCIDRs may never list (403, 404)");
}

fn service_cidr(name: &str, cidrs: &[&str]) -> Object {
    let object = k8s_openapi::api::networking::v1::ServiceCIDR {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(k8s_openapi::api::networking::v1::ServiceCIDRSpec {
            cidrs: Some(cidrs.iter().map(|c| c.to_string()).collect()),
        }),
        status: None,
    };
    Object::from(object)
}

#[test]
fn service_cidrs_follow_their_objects_into_the_snapshot() {
    let mut t = tracker();
    let cidrs = |t: &mut Tracker| -> Vec<String> {
        t.snapshot()
            .0
            .service_cidrs
            .iter()
            .map(|n| n.to_string())
            .collect()
    };
    assert!(cidrs(&mut t).is_empty());
    t.apply(&listed(
        Kind::ServiceCidr,
        vec![
            service_cidr("kubernetes", &["10.96.0.0/16"]),
            service_cidr("extra", &["10.100.0.0/16"]),
        ],
    ));
    assert_eq!(cidrs(&mut t), ["10.96.0.0/16", "10.100.0.0/16"]);
    t.apply(&Event::Deleted(service_cidr("extra", &[])));
    assert_eq!(cidrs(&mut t), ["10.96.0.0/16"]);
    t.apply(&Event::Applied(service_cidr(
        "kubernetes",
        &["10.96.0.0/12"],
    )));
    assert_eq!(cidrs(&mut t), ["10.96.0.0/12"]);
    // A relist without it: gone.
    t.apply(&listed(Kind::ServiceCidr, vec![]));
    assert!(cidrs(&mut t).is_empty());
    // A bad range warns once per version, naming the object.
    let bad = Event::Applied(service_cidr("odd", &["10.96.0.0/99"]));
    let warnings = t.apply(&bad);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].object, "servicecidr odd");
    assert!(t.apply(&bad).is_empty());
}

#[test]
fn a_zone_change_on_this_node_recomputes_topology() {
    let mut t = tracker();
    t.apply(&applied_node(node("node-a", "10.0.0.11", Some("zone-a"))));
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(slice(
        "default",
        "web",
        "web-1",
        &[("http", 8080, "TCP")],
        &[
            ep("10.244.1.2", "node-a").zone_hints(&["zone-a"]),
            ep("10.244.2.2", "node-b").zone_hints(&["zone-b"]),
        ],
    )));
    let (snap, _) = t.snapshot();
    assert_eq!(
        snap.get(&http()).unwrap().families[0]
            .cluster_endpoints()
            .unwrap()
            .count(),
        1
    );
    assert_eq!(snap.node.zone.as_deref(), Some("zone-a"));

    t.apply(&applied_node(node("node-a", "10.0.0.11", Some("zone-b"))));
    let (snap, changes) = t.snapshot();
    assert!(changes.node_topology_changed);
    let chosen: Vec<String> = snap.get(&http()).unwrap().families[0]
        .cluster_endpoints()
        .unwrap()
        .map(ToString::to_string)
        .collect();
    assert_eq!(chosen, ["10.244.2.2:8080"]);
}

#[test]
fn other_nodes_and_address_changes_do_not_touch_services() {
    let mut t = tracker();
    t.apply(&applied_node(node("node-a", "10.0.0.11", None)));
    t.apply(&applied_service(web()));
    t.snapshot();
    t.apply(&applied_node(node("node-b", "10.0.0.12", Some("zone-b"))));
    t.apply(&applied_node(node("node-a", "10.0.0.99", None)));
    let (snap, changes) = t.snapshot();
    assert!(changes.ports.is_empty());
    assert!(!changes.node_topology_changed);
    assert_eq!(snap.node.addresses[0].ip.to_string(), "10.0.0.99");
}

#[test]
fn a_bad_object_warns_once_and_never_stops_the_rest() {
    let mut t = tracker();
    let mut bad = service("default", "bad", "10.96.0.300", &[("http", 80, "TCP")]);
    bad.metadata.resource_version = Some("1".into());
    let list = vec![
        Object::Service(Box::new(bad.clone())),
        Object::Service(Box::new(web())),
    ];
    let warnings = t.apply(&listed(Kind::Service, list.clone()));
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].object, "service default/bad");
    assert!(
        t.apply(&listed(Kind::Service, list)).is_empty(),
        "the same version warns once"
    );
    assert!(t.apply(&applied_service(bad)).is_empty());
    let (snap, _) = t.snapshot();
    assert_eq!(snap.ports.len(), 1);
}

#[test]
fn a_service_turning_invalid_is_removed() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.snapshot();
    let mut broken = web();
    spec(&mut broken).cluster_ips = Some(vec!["bogus".into()]);
    assert_eq!(t.apply(&applied_service(broken)).len(), 1);
    let (snap, changes) = t.snapshot();
    assert!(snap.ports.is_empty());
    assert_eq!(changes.ports.len(), 1);
}

#[test]
fn ignored_services_are_listed_with_their_reason() {
    let mut t = tracker();
    let mut headless = web();
    spec(&mut headless).cluster_ips = Some(vec!["None".into()]);
    t.apply(&applied_service(headless));
    assert_eq!(
        t.ignored_services(),
        vec![(
            ServiceKey::new("default", "web"),
            service::Ignored::Headless
        )]
    );
    assert!(t.snapshot().0.ports.is_empty());
}

#[test]
fn change_counts_and_trigger_times_follow_upstream_metrics() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    let mut s = web_slice("web-1", &["10.244.1.2"]);
    s.metadata.annotations = Some(
        [(
            "endpoints.kubernetes.io/last-change-trigger-time".to_string(),
            "2026-12-01T03:00:00Z".to_string(),
        )]
        .into(),
    );
    t.apply(&applied_slice(s));
    t.apply(&applied_slice(web_slice("web-2", &["10.244.1.3"])));
    let counts = t.change_counts();
    assert_eq!(counts.service_changes_pending, 1);
    assert_eq!(
        counts.endpoint_changes_pending, 1,
        "counted per Service, as upstream"
    );
    assert_eq!(counts.endpoint_changes_total, 2);
    let (_, changes) = t.snapshot();
    assert_eq!(
        changes.trigger_times,
        vec![(
            ServiceKey::new("default", "web"),
            "2026-12-01T03:00:00Z".to_string()
        )]
    );
    assert_eq!(t.change_counts().endpoint_changes_pending, 0);
}

#[test]
fn snapshots_are_immutable() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    let (before, _) = t.snapshot();
    t.apply(&applied_slice(web_slice("web-1", &["10.244.1.2"])));
    let (after, _) = t.snapshot();
    assert!(endpoints_of(&before, &http()).is_empty());
    assert_eq!(endpoints_of(&after, &http()).len(), 1);
}

#[test]
fn dual_stack_services_get_a_view_per_family() {
    let mut t = tracker();
    t.apply(&applied_service(service(
        "default",
        "web",
        "10.96.0.10,fd00:10:96::10",
        &[("http", 80, "TCP")],
    )));
    t.apply(&applied_slice(web_slice("web-v4", &["10.244.1.2"])));
    t.apply(&applied_slice(web_slice("web-v6", &["fd00:10:244:1::2"])));
    let (snap, _) = t.snapshot();
    let state = snap.get(&http()).unwrap();
    assert_eq!(state.families.len(), 2);
    let v6 = state.family(crate::cluster::IpFamily::V6).unwrap();
    assert_eq!(v6.cluster_ip.to_string(), "fd00:10:96::10");
    assert_eq!(v6.endpoints[0].to_string(), "[fd00:10:244:1::2]:8080");
}

#[test]
fn slices_for_a_family_the_service_lacks_are_not_used() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(web_slice("web-v6", &["fd00:10:244:1::2"])));
    let (snap, _) = t.snapshot();
    let state = snap.get(&http()).unwrap();
    assert_eq!(state.families.len(), 1);
    assert!(state.families[0].endpoints.is_empty());
}

#[test]
fn a_draining_service_falls_back_to_its_terminating_endpoints() {
    let mut t = tracker();
    t.apply(&applied_service(web()));
    t.apply(&applied_slice(slice(
        "default",
        "web",
        "web-1",
        &[("http", 8080, "TCP")],
        &[
            ep("10.244.1.2", "node-a").terminating(),
            ep("10.244.2.2", "node-b").not_ready(),
        ],
    )));
    let (snap, _) = t.snapshot();
    let view = &snap.get(&http()).unwrap().families[0];
    let chosen: Vec<String> = view
        .cluster_endpoints()
        .unwrap()
        .map(ToString::to_string)
        .collect();
    assert_eq!(chosen, ["10.244.1.2:8080"]);
    assert!(view.selection.cluster_uses_terminating);
    assert!(view.selection.has_any_endpoints);
}
