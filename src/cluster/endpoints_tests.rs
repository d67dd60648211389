use super::*;
use crate::testing::{ep, slice};

fn parsed(s: &EndpointSlice) -> (ParsedSlice, Vec<Warning>) {
    let mut w = Vec::new();
    match convert(s, &mut Interner::default(), &mut w) {
        Converted::Proxied(p) => (p, w),
        other => panic!("expected proxied, got {other:?}: {w:?}"),
    }
}

#[test]
fn conditions_default_as_the_api_says_and_upstream_reads_them() {
    let s = slice(
        "default",
        "web",
        "web-1",
        &[("http", 8080, "TCP")],
        &[
            ep("10.0.1.1", "a").conditions((None, None, None)),
            ep("10.0.1.2", "a").conditions((Some(false), None, None)),
            ep("10.0.1.3", "a").conditions((Some(false), Some(true), Some(true))),
            // Serving left out reads as true, as upstream's endpoint slice cache reads it (not
            // as ready): a terminating endpoint that says no more is a fallback.
            ep("10.0.1.4", "a").conditions((Some(false), None, Some(true))),
        ],
    );
    let (p, _) = parsed(&s);
    let c: Vec<(bool, bool, bool)> = p
        .endpoints
        .iter()
        .map(|e| (e.ready, e.serving, e.terminating))
        .collect();
    assert_eq!(
        c,
        [
            (true, true, false),
            (false, true, false),
            (false, true, true),
            (false, true, true)
        ]
    );
}

#[test]
fn ignored_and_refused_slices() {
    let mut headless = slice("default", "web", "web-1", &[], &[]);
    headless
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(LABEL_HEADLESS.into(), "".into());
    let mut fqdn = slice("default", "web", "web-1", &[], &[]);
    fqdn.address_type = "FQDN".into();
    for s in [headless, fqdn] {
        let mut w = Vec::new();
        assert_eq!(
            convert(&s, &mut Interner::default(), &mut w),
            Converted::Ignored
        );
        assert!(w.is_empty());
    }
    let mut unlabelled = slice("default", "web", "web-1", &[], &[]);
    unlabelled.metadata.labels = None;
    let mut bad_type = slice("default", "web", "web-1", &[], &[]);
    bad_type.address_type = "IPv5".into();
    let mut bad_service = slice("default", "we b", "web-1", &[], &[]);
    bad_service.metadata.namespace = Some("default".into());
    for (s, needle) in [
        (unlabelled, "kubernetes.io/service-name"),
        (bad_type, "IPv5"),
        (bad_service, "we b"),
    ] {
        let mut w = Vec::new();
        assert_eq!(
            convert(&s, &mut Interner::default(), &mut w),
            Converted::Refused
        );
        assert!(w[0].message.contains(needle), "{w:?}");
        assert!(w[0].object.starts_with("endpointslice default/web-1"));
    }
}

#[test]
fn bad_endpoints_are_skipped_and_the_rest_kept() {
    let mut s = slice(
        "default",
        "web",
        "web-1",
        &[("http", 8080, "TCP"), ("bad", 0, "TCP"), ("x", 1, "GRE")],
        &[
            ep("10.0.1.1", "a"),
            ep("10.0.1.999", "a"),
            ep("fd00::1", "a"),
            ep("10.0.1.2", "bad node!"),
        ],
    );
    s.endpoints.push(Default::default()); // no address
    let (p, w) = parsed(&s);
    assert_eq!(p.ports.len(), 1);
    assert_eq!(p.endpoints.len(), 1);
    assert_eq!(w.len(), 6, "{w:?}");
}

#[test]
fn absurd_slices_are_refused() {
    let many: Vec<_> = (0..1001).map(|_| ep("10.0.0.1", "a")).collect();
    let s = slice("default", "web", "web-1", &[("http", 80, "TCP")], &many);
    assert_eq!(
        convert(&s, &mut Interner::default(), &mut Vec::new()),
        Converted::Refused
    );
}

#[test]
fn merge_matches_ports_by_name_and_protocol_per_slice() {
    let a = parsed(&slice(
        "default",
        "web",
        "web-a",
        &[("http", 8080, "TCP"), ("dns", 53, "UDP")],
        &[ep("10.0.1.1", "a")],
    ))
    .0;
    let b = parsed(&slice(
        "default",
        "web",
        "web-b",
        &[("http", 9090, "TCP")],
        &[ep("10.0.2.1", "b")],
    ))
    .0;
    let http = merge([&a, &b], "http", Protocol::Tcp, IpFamily::V4, "a");
    let got: Vec<String> = http.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        ["10.0.1.1:8080", "10.0.2.1:9090"],
        "target port comes from each slice"
    );
    assert!(http[0].is_local && !http[1].is_local);
    assert!(
        merge([&a, &b], "dns", Protocol::Tcp, IpFamily::V4, "a").is_empty(),
        "protocol must match"
    );
    assert_eq!(
        merge([&a, &b], "dns", Protocol::Udp, IpFamily::V4, "a").len(),
        1
    );
    assert!(
        merge([&a, &b], "http", Protocol::Tcp, IpFamily::V6, "a").is_empty(),
        "family must match"
    );
}

#[test]
fn duplicates_across_slices_collapse_preferring_ready() {
    let a = parsed(&slice(
        "default",
        "web",
        "web-a",
        &[("http", 8080, "TCP")],
        &[ep("10.0.1.1", "a").not_ready()],
    ))
    .0;
    let b = parsed(&slice(
        "default",
        "web",
        "web-b",
        &[("http", 8080, "TCP")],
        &[ep("10.0.1.1", "a"), ep("10.0.0.9", "a")],
    ))
    .0;
    let merged = merge([&a, &b], "http", Protocol::Tcp, IpFamily::V4, "a");
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[0].ip.to_string(), "10.0.0.9", "sorted by address");
    assert!(merged[1].ready);
}

#[test]
fn ipv6_slices_and_hints_are_read() {
    let s = slice(
        "default",
        "web",
        "web-v6",
        &[("http", 8080, "TCP")],
        &[ep("fd00::1", "a")
            .zone("zone-a")
            .zone_hints(&["zone-a", "bad zone"])
            .node_hints(&["a"])],
    );
    let (p, _) = parsed(&s);
    assert_eq!(p.family, IpFamily::V6);
    let e = &p.endpoints[0];
    assert_eq!(e.placement.zone.as_deref(), Some("zone-a"));
    assert_eq!(
        e.placement.zone_hints.len(),
        1,
        "an invalid hint is dropped"
    );
    assert_eq!(e.placement.node_hints.len(), 1);
}

#[test]
fn trigger_time_is_kept() {
    let mut s = slice("default", "web", "web-1", &[], &[]);
    s.metadata.annotations = Some(
        [(
            ANNOTATION_TRIGGER_TIME.to_string(),
            "2026-12-01T00:00:00Z".to_string(),
        )]
        .into(),
    );
    assert_eq!(
        parsed(&s).0.trigger_time.as_deref(),
        Some("2026-12-01T00:00:00Z")
    );
}
