//! One table of packets and what `explain` must say about them, checked in every mode over
//! the rules that mode plans for the same snapshot.

use proptest::prelude::*;

use super::render::{WIDTH, json, text};
use super::*;
use crate::testing::snapshots::{
    Svc, config, node, node_policy, snapshot, svc, web_empty_node_port,
};

fn services() -> Vec<Svc> {
    let mut services = web_empty_node_port();
    services.extend([
        svc("default/np-local", "10.96.0.31", 80)
            .node_port(30081)
            .external_local()
            .ep("10.244.2.4", 8080, "node-b"),
        svc("default/np-local-here", "10.96.0.32", 80)
            .node_port(30082)
            .external_local()
            .ep("10.244.1.4", 8080, "node-a")
            .ep("10.244.2.5", 8080, "node-b"),
        svc("default/lb", "10.96.0.40", 443)
            .lb("192.0.2.40")
            .node_port(30443)
            .range("198.51.100.0/24")
            .ep("10.244.2.6", 8443, "node-b"),
        svc("default/solo", "10.96.0.50", 80).ep("10.244.1.7", 8080, "node-a"),
        svc("default/sticky", "10.96.0.60", 80)
            .affinity(600)
            .ep("10.244.2.8", 8080, "node-b"),
        svc("default/both-local", "10.96.0.70", 80)
            .external("192.0.2.70")
            .internal_local()
            .external_local()
            .ep("10.244.1.9", 8080, "node-a")
            .ep("10.244.2.9", 8080, "node-b"),
    ]);
    services
}

/// What must hold of one packet's explanation, in every mode.
#[derive(Clone, Copy)]
struct Case {
    to: &'static str,
    from: Option<&'static str>,
    service: Option<&'static str>,
    verdict: Verdict,
    endpoints: &'static [&'static str],
    masquerade: Option<bool>,
    /// A reason must contain this.
    reason: &'static str,
}

const CASES: &[Case] = &[
    // Both policies Local: this node's pods and the node itself reaching an external frontend
    // are short-circuited to every endpoint; from outside, this node's endpoint only, the
    // client's address kept.
    Case {
        to: "192.0.2.70:80",
        from: Some("10.244.1.7"),
        service: Some("default/both-local"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.9:8080", "10.244.2.9:8080"],
        masquerade: Some(false),
        reason: "",
    },
    Case {
        to: "192.0.2.70:80",
        from: Some("node"),
        service: Some("default/both-local"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.9:8080", "10.244.2.9:8080"],
        masquerade: Some(true),
        reason: "",
    },
    Case {
        to: "192.0.2.70:80",
        from: Some("203.0.113.9"),
        service: Some("default/both-local"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.9:8080"],
        masquerade: Some(false),
        reason: "the client's address is kept",
    },
    Case {
        to: "10.96.0.10:80",
        from: None,
        service: Some("default/web"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.2:8080", "10.244.2.2:8080"],
        masquerade: Some(false),
        reason: "Cluster: every usable endpoint (2)",
    },
    Case {
        to: "10.96.0.20:80",
        from: None,
        service: Some("default/empty"),
        verdict: Verdict::Rejected,
        endpoints: &[],
        masquerade: None,
        reason: "has no usable endpoint",
    },
    Case {
        to: "10.0.0.11:30080",
        from: Some("outside"),
        service: Some("default/np"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.2.3:8080"],
        masquerade: Some(true),
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
    },
    Case {
        to: "10.0.0.11:30081",
        from: Some("outside"),
        service: Some("default/np-local"),
        verdict: Verdict::Dropped,
        endpoints: &[],
        masquerade: None,
        reason: "no endpoint of default/np-local runs on this node",
    },
    Case {
        to: "10.0.0.11:30082",
        from: Some("198.51.100.7"),
        service: Some("default/np-local-here"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.4:8080"],
        masquerade: Some(false),
        reason: "the client's address is kept",
    },
    Case {
        to: "192.0.2.40:443",
        from: Some("203.0.113.9"),
        service: Some("default/lb"),
        verdict: Verdict::Dropped,
        endpoints: &[],
        masquerade: None,
        reason: "outside the loadBalancerSourceRanges",
    },
    Case {
        to: "192.0.2.40:443",
        from: Some("198.51.100.9"),
        service: Some("default/lb"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.2.6:8443"],
        masquerade: Some(true),
        reason: "externalTrafficPolicy Cluster",
    },
    Case {
        to: "10.96.0.50:80",
        from: Some("10.244.1.7"),
        service: Some("default/solo"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.7:8080"],
        masquerade: Some(true),
        reason: "hairpin",
    },
    Case {
        to: "10.96.0.10:80",
        from: Some("203.0.113.9"),
        service: Some("default/web"),
        verdict: Verdict::Forwarded,
        endpoints: &["10.244.1.2:8080", "10.244.2.2:8080"],
        masquerade: Some(true),
        reason: "not a pod of this node",
    },
    Case {
        to: "10.96.9.9:80",
        from: None,
        service: None,
        verdict: Verdict::Untouched,
        endpoints: &[],
        masquerade: None,
        reason: "is no frontend of any Service port",
    },
];

/// Every mode's plan: nftables, iptables, ipvs, userspace, ebpf.
fn modes() -> Vec<Box<dyn Plan>> {
    crate::testing::plans::all_modes(&snapshot(node(), services()), &config())
}

/// Words of [`Case::reason`] that say why the source is (not) rewritten: userspace mode has
/// one reason for every source instead, since the relay always dials from the node.
const SOURCE_REASONS: [&str; 4] = [
    "the source is rewritten",
    "hairpin",
    "the client's address",
    "not a pod of this node",
];

/// What `c` must show in the mode of `e`: the table's, except that userspace mode relays
/// (the node's address, one reason for every source), and that the eBPF mode's socket
/// programs rewrite nothing (one reason for every source). From outside the node the eBPF
/// mode's tc programs answer as the table says.
fn in_mode(c: &Case, e: &Explanation) -> Case {
    let forwarded = c.verdict == Verdict::Forwarded;
    let about_source = SOURCE_REASONS.iter().any(|r| c.reason.contains(r));
    match e.mode {
        // As upstream's IPVS mode: a virtual service has one list of destinations for every
        // source, so the node and its pods reach an external frontend under externalTrafficPolicy
        // Local on this node's endpoints only (docs/operations.md).
        "ipvs" if e.packet.origin != "outside" && c.service == Some("default/both-local") => Case {
            endpoints: &["10.244.1.9:8080"],
            ..*c
        },
        "userspace" if forwarded => Case {
            masquerade: Some(true),
            reason: if about_source {
                "relayed by the proxy"
            } else {
                c.reason
            },
            ..*c
        },
        "ebpf" if e.packet.origin == "outside" => Case { ..*c },
        "ebpf" if forwarded => Case {
            masquerade: Some(false),
            reason: if about_source {
                "no per-packet NAT"
            } else {
                c.reason
            },
            ..*c
        },
        _ => Case { ..*c },
    }
}

fn ask(planned: &impl AsRef<dyn Plan>, to: &str, from: Option<&str>) -> Explanation {
    let snap = snapshot(node(), services());
    let request = Request::parse(to, from, None).unwrap();
    let family = IpFamily::of(&request.to.ip());
    explain(
        &snap,
        &node_policy(),
        planned.as_ref().rules(family),
        RulesFrom::Planned,
        &request,
    )
    .unwrap()
}

#[test]
fn every_mode_explains_the_table_alike() {
    for planned in modes() {
        for c in CASES {
            let e = ask(&planned, c.to, c.from);
            let at = format!("{} mode, {} from {:?}:\n{}", e.mode, c.to, c.from, text(&e));
            let c = &in_mode(c, &e);
            assert_eq!(
                e.service_port.as_ref().map(|s| s.name.as_str()),
                c.service,
                "{at}"
            );
            assert_eq!(e.outcome.verdict, c.verdict, "{at}");
            let reached: Vec<String> = e
                .outcome
                .endpoints
                .iter()
                .map(|s| s.endpoint.to_string())
                .collect();
            assert_eq!(reached, c.endpoints, "{at}");
            if c.verdict == Verdict::Forwarded {
                assert_eq!(e.outcome.masquerade, c.masquerade, "{at}");
            }
            assert!(e.reasons.iter().any(|r| r.contains(c.reason)), "{at}");
        }
    }
}

#[test]
fn shares_and_affinity_are_told() {
    for planned in modes() {
        let e = ask(&planned, "10.96.0.10:80", None);
        assert!(
            e.outcome.endpoints.iter().all(|s| s.share == 0.5),
            "{}",
            text(&e)
        );
        let e = ask(&planned, "10.96.0.60:80", None);
        assert_eq!(e.affinity.as_ref().map(|a| a.timeout_seconds), Some(600));
        assert!(
            text(&e).contains("affinity: ClientIP, 600 s"),
            "{}",
            text(&e)
        );
    }
}

#[test]
fn ebpf_mode_names_the_hook_and_says_when_the_backend_is_chosen() {
    let ebpf = modes().pop().unwrap();
    let e = ask(&ebpf, "10.96.0.10:80", None);
    assert_eq!(e.hooks, ["connect4"]);
    let t = text(&e);
    assert!(t.contains("(ebpf mode, maps as planned)"), "{t}");
    assert!(
        t.contains("hook: cgroup connect4 (the backend is chosen when the socket connects"),
        "{t}"
    );
    let e = ask(&ebpf, "[fd00::11]:53/udp", Some("node"));
    assert_eq!(e.hooks, ["connect6", "sendmsg6"]);
    let e = ask(&ebpf, "10.0.0.11:30081", Some("node"));
    // np-local from the node: every endpoint, as traffic of local origin is short-circuited.
    assert_eq!(e.outcome.verdict, Verdict::Forwarded, "{}", text(&e));
    assert!(
        e.reasons
            .iter()
            .any(|r| r.contains("whatever the externalTrafficPolicy")),
        "{}",
        text(&e)
    );
    let e = ask(&ebpf, "10.96.0.20:80", Some("node"));
    assert!(
        e.reasons
            .iter()
            .any(|r| r.contains("fails at once with ECONNREFUSED")),
        "{}",
        text(&e)
    );
}

#[test]
fn ebpf_mode_traces_traffic_from_outside_through_the_tc_programs() {
    let ebpf = modes().pop().unwrap();
    let e = ask(&ebpf, "10.0.0.11:30080", Some("outside"));
    assert_eq!(e.hooks, ["tc ingress"]);
    let t = text(&e);
    assert!(
        t.contains("hook: tc ingress on the node's interfaces"),
        "{t}"
    );
    assert!(
        t.contains("outcome: forwarded to an endpoint, masqueraded"),
        "{t}"
    );
    assert!(
        e.reasons
            .iter()
            .any(|r| r.contains("kp_svc entry of scope external for TCP 10.0.0.11:30080")),
        "{t}"
    );
    // Local policy: the client's address is kept, only this node's endpoint.
    let e = ask(&ebpf, "10.0.0.11:30082", Some("outside"));
    assert_eq!(e.outcome.masquerade, Some(false), "{}", text(&e));
    assert_eq!(e.outcome.endpoints.len(), 1, "{}", text(&e));
    // The LoadBalancer IP's source ranges, from kp_src, in and out.
    let e = ask(&ebpf, "192.0.2.40:443", Some("198.51.100.9"));
    assert!(
        e.reasons.iter().any(|r| r
            == "kp_src restricts TCP 192.0.2.40:443 to its loadBalancerSourceRanges \
                (198.51.100.0/24), checked first: 198.51.100.9 is in one of them"),
        "{}",
        text(&e)
    );
    let e = ask(&ebpf, "192.0.2.40:443", Some("203.0.113.9"));
    assert_eq!(e.outcome.verdict, Verdict::Dropped, "{}", text(&e));
    assert!(
        text(&e).contains("DROPPED (the client times out)"),
        "{}",
        text(&e)
    );
}

#[test]
fn an_unallocated_address_of_a_service_cidr_is_told_as_each_mode_treats_it() {
    let cidr: ipnet::IpNet = "10.96.0.0/16".parse().unwrap();
    let snap = snapshot(node(), services()).with_service_cidrs(vec![cidr]);
    let request = Request::parse("10.96.9.9:80", None, None).unwrap();
    for planned in crate::testing::plans::every_mode(&snap, &config()) {
        let e = explain(
            &snap,
            &node_policy(),
            planned.rules(IpFamily::V4),
            RulesFrom::Planned,
            &request,
        )
        .unwrap();
        let (verdict, said) = match e.mode {
            "nftables" => (
                Verdict::Dropped,
                "dropped, as upstream's nftables mode does",
            ),
            _ => (Verdict::Untouched, "leaves it to the node's routes"),
        };
        assert_eq!(e.outcome.verdict, verdict, "{}", e.mode);
        assert!(
            e.reasons
                .iter()
                .any(|r| r.contains("in the Service CIDR 10.96.0.0/16") && r.contains(said)),
            "{}: {:?}",
            e.mode,
            e.reasons
        );
    }
}

#[test]
fn left_out_endpoints_carry_the_models_reason() {
    let e = ask(&modes()[0], "10.0.0.11:30082", Some("outside"));
    let t = text(&e);
    assert!(t.contains("endpoints left out:"), "{t}");
    assert!(t.contains("10.244.2.5:8080 on node-b: local:"), "{t}");
}

#[test]
fn json_is_one_document_with_the_same_answer() {
    let e = ask(&modes()[0], "10.96.0.10:80", None);
    let v: serde_json::Value = serde_json::from_str(&json(&e)).unwrap();
    assert_eq!(v["servicePort"]["name"], "default/web");
    assert_eq!(v["outcome"]["verdict"], "forwarded");
    assert_eq!(v["packet"]["origin"], "pod");
    assert_eq!(v["packet"]["source"], "10.244.1.254");
}

#[test]
fn a_pending_sync_is_told_only_when_there_is_one() {
    let mut e = ask(&modes()[0], "10.96.0.10:80", None);
    assert!(!text(&e).contains("sync pending"));
    let v: serde_json::Value = serde_json::from_str(&json(&e)).unwrap();
    assert!(v.get("pendingSync").is_none());
    e.pending_sync = Some("changes queued 12 ms ago are not programmed yet".into());
    assert!(
        text(&e).contains("sync pending: changes queued 12 ms ago"),
        "{}",
        text(&e)
    );
    let v: serde_json::Value = serde_json::from_str(&json(&e)).unwrap();
    assert_eq!(
        v["pendingSync"],
        "changes queued 12 ms ago are not programmed yet"
    );
}

#[test]
fn a_pod_source_needs_a_pod_network() {
    let mut n = node();
    n.pod_cidrs.clear();
    let snap = snapshot(n, services());
    let policy = NodePolicy::defaults_for(crate::config::ProxyMode::Nftables);
    let defaults = crate::config::Config {
        cluster_cidrs: vec![],
        ..config()
    };
    let [planned, ..] = crate::testing::plans::every_mode(&snap, &defaults);
    let request = Request::parse("10.96.0.10:80", None, None).unwrap();
    let e = explain(
        &snap,
        &policy,
        planned.rules(IpFamily::V4),
        RulesFrom::Planned,
        &request,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("--from pod:"), "{e}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever is asked, the answer is lines within the width, with no control character.
    #[test]
    fn any_request_gives_clean_text(
        to in prop_oneof![
            Just("10.96.0.10:80".to_string()),
            "10\\.(96|0|244)\\.[0-9]\\.[0-9]{1,2}:[0-9]{1,5}(/(tcp|udp|sctp))?",
            any::<String>(),
        ],
        from in proptest::option::of(prop_oneof![
            Just("pod".to_string()),
            Just("node".to_string()),
            Just("outside".to_string()),
            "10\\.244\\.[12]\\.[0-9]",
            any::<String>(),
        ]),
    ) {
        let snap = snapshot(node(), services());
        for planned in modes() {
            let Ok(request) = Request::parse(&to, from.as_deref(), None) else { continue };
            let family = IpFamily::of(&request.to.ip());
            let Ok(e) = explain(&snap, &node_policy(), planned.rules(family), RulesFrom::Planned, &request) else { continue };
            for line in text(&e).lines() {
                prop_assert!(line.chars().count() <= WIDTH, "{line}");
                prop_assert!(!line.chars().any(char::is_control), "{line:?}");
            }
            let _: serde_json::Value = serde_json::from_str(&json(&e)).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whatever a mode's reader of the kernel adds to an answer (drift lines, reasons, which
    /// may quote a hostile rule's comment), the answer is lines within the width, with no
    /// control character. The readers' own tests feed them hostile kernel text.
    #[test]
    fn any_drift_or_reason_gives_clean_text(drift in any::<String>(), reason in any::<String>()) {
        let snap = snapshot(node(), services());
        let request = Request::parse("10.96.0.10:80", Some("10.244.1.7"), None).unwrap();
        for planned in modes() {
            let mut e = explain(&snap, &node_policy(), planned.rules(IpFamily::V4), RulesFrom::Kernel, &request).unwrap();
            e.drift.push(drift.clone());
            e.reasons.push(reason.clone());
            for line in text(&e).lines() {
                prop_assert!(line.chars().count() <= WIDTH, "{line}");
                prop_assert!(!line.chars().any(char::is_control), "{line:?}");
            }
            let _: serde_json::Value = serde_json::from_str(&json(&e)).unwrap();
        }
    }
}
