use super::*;
use crate::cluster::model::TrafficPolicy;
use crate::testing::{affinity, load_balancer, node_port, service, spec};

fn proxied(svc: &Service) -> (ParsedService, Vec<Warning>) {
    let mut w = Vec::new();
    match convert(svc, &mut Interner::default(), &mut w) {
        Converted::Proxied(p) => (p, w),
        other => panic!("expected proxied, got {other:?} with {w:?}"),
    }
}

fn web() -> Service {
    service("default", "web", "10.96.0.10", &[("http", 80, "TCP")])
}

#[test]
fn services_that_upstream_ignores_are_ignored() {
    let mut labelled = web();
    labelled.metadata.labels =
        Some([(LABEL_SERVICE_PROXY_NAME.to_string(), "other".to_string())].into());
    let mut headless = web();
    spec(&mut headless).cluster_ip = Some("None".into());
    spec(&mut headless).cluster_ips = Some(vec!["None".into()]);
    let mut no_ip = web();
    spec(&mut no_ip).cluster_ip = None;
    spec(&mut no_ip).cluster_ips = None;
    let mut external_name = web();
    spec(&mut external_name).type_ = Some("ExternalName".into());
    let cases = [
        (labelled, Ignored::ServiceProxyName),
        (headless, Ignored::Headless),
        (no_ip, Ignored::Headless),
        (external_name, Ignored::ExternalName),
    ];
    for (svc, why) in cases {
        let mut w = Vec::new();
        assert_eq!(
            convert(&svc, &mut Interner::default(), &mut w),
            Converted::Ignored(ServiceKey::new("default", "web"), why)
        );
        assert!(w.is_empty(), "{why:?} must not warn");
    }
}

#[test]
fn a_clusterip_service_becomes_one_port_per_spec_port() {
    let svc = service(
        "default",
        "dns",
        "10.96.0.10",
        &[("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"), ("", 9153, "")],
    );
    let (p, w) = proxied(&svc);
    assert!(w.is_empty());
    let names: Vec<String> = p
        .ports
        .iter()
        .map(|p| format!("{} {} {}", p.name, p.name.protocol, p.port))
        .collect();
    assert_eq!(
        names,
        [
            "default/dns:dns UDP 53",
            "default/dns:dns-tcp TCP 53",
            "default/dns TCP 9153"
        ]
    );
    assert_eq!(p.cluster_ips, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
    let port = &p.ports[0];
    assert_eq!(port.node_port, None);
    assert_eq!(port.affinity_timeout_seconds, None);
    assert_eq!(port.internal_policy, TrafficPolicy::Cluster);
    assert!(port.allocate_load_balancer_node_ports);
}

#[test]
fn dual_stack_keeps_one_cluster_ip_per_family() {
    let svc = service(
        "default",
        "web",
        "10.96.0.10,fd00::10",
        &[("http", 80, "TCP")],
    );
    let (p, _) = proxied(&svc);
    assert_eq!(p.cluster_ips.len(), 2);
    let mut twice = service(
        "default",
        "web",
        "10.96.0.10,10.96.0.11",
        &[("http", 80, "TCP")],
    );
    spec(&mut twice).cluster_ip = Some("10.96.0.10".into());
    let (p, w) = proxied(&twice);
    assert_eq!(p.cluster_ips.len(), 1);
    assert_eq!(w.len(), 1);
}

#[test]
fn session_affinity_defaults_to_three_hours_and_refuses_absurd_timeouts() {
    let (p, _) = proxied(&affinity(web(), None));
    assert_eq!(p.ports[0].affinity_timeout_seconds, Some(10_800));
    let (p, _) = proxied(&affinity(web(), Some(60)));
    assert_eq!(p.ports[0].affinity_timeout_seconds, Some(60));
    for bad in [0, -5, 86_401] {
        let mut w = Vec::new();
        assert_eq!(
            convert(
                &affinity(web(), Some(bad)),
                &mut Interner::default(),
                &mut w
            ),
            Converted::Refused(Some(ServiceKey::new("default", "web")))
        );
        assert!(w[0].message.contains("timeoutSeconds"), "{w:?}");
    }
}

#[test]
fn external_traffic_policy_local_applies_to_externally_accessible_services() {
    let mut cluster_ip = web();
    spec(&mut cluster_ip).external_traffic_policy = Some("Local".into());
    assert_eq!(
        proxied(&cluster_ip).0.ports[0].external_policy,
        TrafficPolicy::Cluster,
        "a ClusterIP Service without externalIPs has no external traffic"
    );
    spec(&mut cluster_ip).external_ips = Some(vec!["192.0.2.50".into()]);
    assert_eq!(
        proxied(&cluster_ip).0.ports[0].external_policy,
        TrafficPolicy::Local,
        "a ClusterIP Service with externalIPs is externally accessible"
    );
    let mut np = node_port(web(), &[30080]);
    spec(&mut np).external_traffic_policy = Some("Local".into());
    assert_eq!(
        proxied(&np).0.ports[0].external_policy,
        TrafficPolicy::Local
    );
    let mut internal = web();
    spec(&mut internal).internal_traffic_policy = Some("Local".into());
    assert_eq!(
        proxied(&internal).0.ports[0].internal_policy,
        TrafficPolicy::Local
    );
}

#[test]
fn health_check_node_port_only_for_local_loadbalancers() {
    let mut lb = load_balancer(web(), &[30080], &[("192.0.2.10", None)]);
    spec(&mut lb).health_check_node_port = Some(32000);
    assert_eq!(
        proxied(&lb).0.ports[0].health_check_node_port,
        None,
        "cluster policy has no health check"
    );
    spec(&mut lb).external_traffic_policy = Some("Local".into());
    assert_eq!(proxied(&lb).0.ports[0].health_check_node_port, Some(32000));
    let mut np = node_port(web(), &[30080]);
    spec(&mut np).external_traffic_policy = Some("Local".into());
    spec(&mut np).health_check_node_port = Some(32000);
    assert_eq!(
        proxied(&np).0.ports[0].health_check_node_port,
        None,
        "NodePort services get none"
    );
}

#[test]
fn load_balancer_ips_in_proxy_mode_are_not_programmed() {
    let lb = load_balancer(
        web(),
        &[30080],
        &[
            ("192.0.2.10", None),
            ("192.0.2.11", Some("VIP")),
            ("192.0.2.12", Some("Proxy")),
        ],
    );
    let (p, _) = proxied(&lb);
    let ips: Vec<String> = p
        .load_balancer_ips
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ips, ["192.0.2.10", "192.0.2.11"]);
    // Ingress on a non-LoadBalancer Service is not a frontend.
    let mut np = lb.clone();
    spec(&mut np).type_ = Some("NodePort".into());
    assert!(proxied(&np).0.load_balancer_ips.is_empty());
}

#[test]
fn bad_addresses_and_ports_are_dropped_one_by_one() {
    let mut svc = service(
        "default",
        "web",
        "10.96.0.10",
        &[
            ("http", 80, "TCP"),
            ("bad", 70000, "TCP"),
            ("icmp", 1, "ICMP"),
            ("http", 80, "TCP"),
            ("Bad_Name", 81, "TCP"),
        ],
    );
    spec(&mut svc).external_ips = Some(vec!["192.0.2.1".into(), "not-an-ip".into()]);
    let (p, w) = proxied(&svc);
    assert_eq!(p.ports.len(), 1);
    assert_eq!(p.external_ips.len(), 1);
    let messages: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(w.len(), 5, "{messages:?}");
    assert!(w.iter().all(|w| w.object == "service default/web"));
    assert!(
        messages
            .iter()
            .any(|m| m.contains("spec.ports[1].port 70000"))
    );
    assert!(messages.iter().any(|m| m.contains("\"ICMP\"")));
    assert!(messages.iter().any(|m| m.contains("duplicate")));
    assert!(
        messages
            .iter()
            .any(|m| m.contains("spec.externalIPs: \"not-an-ip\""))
    );
}

#[test]
fn invalid_names_and_cluster_ips_refuse_the_service() {
    let mut bad_name = web();
    bad_name.metadata.name = Some("web\"; flush ruleset".into());
    let mut w = Vec::new();
    assert_eq!(
        convert(&bad_name, &mut Interner::default(), &mut w),
        Converted::Refused(None)
    );
    assert!(
        w[0].object.contains("\\\""),
        "the name is escaped in the warning: {}",
        w[0].object
    );

    let mut bad_ip = web();
    spec(&mut bad_ip).cluster_ips = Some(vec!["10.96.0.300".into()]);
    let mut w = Vec::new();
    assert!(matches!(
        convert(&bad_ip, &mut Interner::default(), &mut w),
        Converted::Refused(Some(_))
    ));
    assert!(w[0].message.contains("10.96.0.300"));

    let mut huge = web();
    huge.metadata.name = Some("a".repeat(10_000));
    let mut w = Vec::new();
    assert_eq!(
        convert(&huge, &mut Interner::default(), &mut w),
        Converted::Refused(None)
    );
    assert!(w[0].object.len() < 200);

    let mut no_spec = web();
    no_spec.spec = None;
    assert!(matches!(
        convert(&no_spec, &mut Interner::default(), &mut Vec::new()),
        Converted::Refused(Some(_))
    ));
}

#[test]
fn source_ranges_come_from_spec_or_annotation_and_fail_closed() {
    let mut lb = load_balancer(
        web(),
        &[30080],
        &[("192.0.2.10", None), ("2001:db8::10", None)],
    );
    spec(&mut lb).load_balancer_source_ranges = Some(vec!["203.0.113.0/24".into()]);
    let (p, w) = proxied(&lb);
    assert_eq!(
        p.source_ranges,
        vec!["203.0.113.0/24".parse::<IpNet>().unwrap()]
    );
    assert_eq!(
        p.load_balancer_ips,
        vec!["192.0.2.10".parse::<IpAddr>().unwrap()],
        "no IPv6 range: the IPv6 VIP is not opened to all"
    );
    assert_eq!(w.len(), 1);

    let mut annotated = load_balancer(web(), &[30080], &[("192.0.2.10", None)]);
    annotated.metadata.annotations = Some(
        [(
            ANNOTATION_SOURCE_RANGES.to_string(),
            " 198.51.100.0/24 , 10.0.0.1/8".to_string(),
        )]
        .into(),
    );
    let (p, _) = proxied(&annotated);
    assert_eq!(p.source_ranges.len(), 2);
    assert_eq!(
        p.source_ranges[1].to_string(),
        "10.0.0.0/8",
        "ranges are normalised"
    );

    let mut all_bad = load_balancer(web(), &[30080], &[("192.0.2.10", None)]);
    spec(&mut all_bad).load_balancer_source_ranges = Some(vec!["nope".into()]);
    let (p, w) = proxied(&all_bad);
    assert!(p.load_balancer_ips.is_empty());
    assert_eq!(w.len(), 2);
}

#[test]
fn traffic_distribution_and_node_ports_are_read() {
    let mut svc = node_port(web(), &[30080]);
    spec(&mut svc).traffic_distribution = Some("PreferClose".into());
    spec(&mut svc).allocate_load_balancer_node_ports = Some(false);
    let (p, _) = proxied(&svc);
    assert_eq!(
        p.ports[0].traffic_distribution,
        Some(TrafficDistribution::PreferClose)
    );
    assert_eq!(p.ports[0].node_port, Some(30080));
    assert!(!p.ports[0].allocate_load_balancer_node_ports);
    // A ClusterIP Service's stray nodePort is not a frontend.
    let mut stray = web();
    spec(&mut stray).ports.as_mut().unwrap()[0].node_port = Some(30081);
    assert_eq!(proxied(&stray).0.ports[0].node_port, None);
}

#[test]
fn the_ipvs_scheduler_annotation_goes_on_every_port_and_a_bad_one_only_warns() {
    use crate::cluster::scheduler_annotation::{ANNOTATION, ANNOTATION_FLAGS};
    let mut svc = web();
    svc.metadata.annotations = Some(
        [
            (ANNOTATION.to_string(), "sh".to_string()),
            (ANNOTATION_FLAGS.to_string(), "sh-port".to_string()),
        ]
        .into(),
    );
    let (p, w) = proxied(&svc);
    assert!(w.is_empty(), "{w:?}");
    assert!(!p.ports.is_empty());
    for port in &p.ports {
        let c = port.ipvs_scheduler.expect("annotated");
        assert_eq!((c.name, c.port, c.fallback), ("sh", true, false));
    }

    let mut bad = web();
    bad.metadata.annotations = Some([(ANNOTATION.to_string(), "fastest".to_string())].into());
    let (p, w) = proxied(&bad);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].object.contains("default/web"), "{}", w[0]);
    assert!(
        w[0].message.contains("\"fastest\" is not a scheduler"),
        "{}",
        w[0]
    );
    assert!(!p.ports.is_empty(), "the Service is still proxied");
    assert!(p.ports.iter().all(|p| p.ipvs_scheduler.is_none()));
}

#[test]
fn a_second_port_with_the_same_number_and_protocol_is_skipped_with_a_warning() {
    let svc = service(
        "default",
        "web",
        "10.96.0.10",
        &[
            ("http", 80, "TCP"),
            ("web", 80, "TCP"),
            ("dns", 80, "UDP"),
            ("web", 81, "TCP"),
        ],
    );
    let (p, w) = proxied(&svc);
    let kept: Vec<String> = p
        .ports
        .iter()
        .map(|p| format!("{} {} {}", p.name, p.name.protocol, p.port))
        .collect();
    // The same number on another protocol is a different port; the skipped port's name stays free.
    assert_eq!(
        kept,
        [
            "default/web:http TCP 80",
            "default/web:dns UDP 80",
            "default/web:web TCP 81"
        ]
    );
    let messages: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(
        messages,
        ["spec.ports[1] \"web\": port 80/TCP duplicates spec.ports[0]; skipped"]
    );
    assert_eq!(w[0].object, "service default/web");
}
