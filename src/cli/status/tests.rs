//! `status` over every mode's planned rules taken as the kernel's (no drift), over a kernel
//! programmed from an older model (drift named per frontend), and its rendering.

use std::time::Duration;

use proptest::prelude::*;

use super::render::{json, text};
use super::*;
use crate::cli::explain::Plan;
use crate::cli::explain::render::WIDTH;
use crate::cluster::{IpFamily, ServiceKey};
use crate::testing::snapshots::{
    Svc, config, node, node_policy, snapshot, svc, web_empty_node_port,
};

fn services() -> Vec<Svc> {
    let mut services = web_empty_node_port();
    services.extend([
        svc("default/lb", "10.96.0.40", 443)
            .lb("192.0.2.40")
            .external("192.0.2.41")
            .node_port(30443)
            .external_local()
            .health_check(32000)
            .ep("10.244.1.6", 8443, "node-a")
            .ep("10.244.2.6", 8443, "node-b"),
        svc("default/lb-elsewhere", "10.96.0.41", 443)
            .lb("192.0.2.42")
            .node_port(30444)
            .external_local()
            .health_check(32001)
            .ep("10.244.2.7", 8443, "node-b"),
    ]);
    services
}

/// Every mode's plan for `services`.
fn modes(services: Vec<Svc>) -> [Box<dyn Plan>; 3] {
    crate::testing::plans::every_mode(&snapshot(node(), services), &config())
}

fn runtime() -> Runtime {
    let key = |s: &str| {
        let (ns, name) = s.split_once('/').unwrap();
        ServiceKey::new(ns, name)
    };
    Runtime {
        sync: SyncSummary {
            ready: true,
            last_success: Some("2026-12-03T15:00:00Z".into()),
            seconds_since_success: Some(3),
            syncs_ok: 7,
            ..SyncSummary::default()
        },
        health_checks: [
            (
                key("default/lb"),
                Serving::Listening(vec!["10.0.0.11:32000".parse().unwrap()]),
            ),
            (key("default/lb-elsewhere"), Serving::BindFailing),
        ]
        .into(),
    }
}

/// `status` of `services` with `kernel` as the kernel's rules (`None`: not read).
fn status_of<P: AsRef<dyn Plan>>(
    services: Vec<Svc>,
    planned: &P,
    kernel: Option<&P>,
    service: Option<&str>,
) -> Status {
    let snap = snapshot(node(), services);
    let rt = runtime();
    build(Inputs {
        snapshot: &snap,
        node: &node_policy(),
        planned: IpFamily::ALL.map(|f| planned.as_ref().rules(f)),
        kernel: kernel.map(|k| IpFamily::ALL.map(|f| k.as_ref().rules(f))),
        drift: Vec::new(),
        runtime: &rt,
        service,
    })
}

/// [`status_of`] with every port traced: one Service at a time in iptables mode, whose whole
/// node is not traced (see `port_status`), all at once in the others.
fn traced<P: AsRef<dyn Plan>>(services: Vec<Svc>, planned: &P, kernel: &P) -> Status {
    let mut whole = status_of(services.clone(), planned, Some(kernel), None);
    if whole.mode == "iptables" {
        assert!(
            whole.service_ports.iter().all(|p| p.programmed.is_none()),
            "a whole iptables node is not traced"
        );
        whole.service_ports = whole
            .service_ports
            .iter()
            .map(|p| {
                let one = status_of(services.clone(), planned, Some(kernel), Some(&p.name));
                one.service_ports
                    .into_iter()
                    .next()
                    .expect("the port asked for")
            })
            .collect();
    }
    whole
}

fn port<'a>(s: &'a Status, name: &str) -> &'a PortStatus {
    s.service_ports
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{name} in {s:#?}"))
}

#[test]
fn a_kernel_as_planned_shows_every_port_programmed_and_no_drift() {
    for planned in modes(services()) {
        let s = traced(services(), &planned, &planned);
        let t = text(&s, false);
        let at = format!("{} mode:\n{t}", s.mode);
        assert_eq!(s.service_ports.len(), 5, "{at}");
        for p in &s.service_ports {
            assert_eq!(p.programmed, Some(p.endpoints), "{} {at}", p.name);
            assert_eq!(p.drifted(), 0, "{} {at}", p.name);
        }
        let kinds =
            |name| -> Vec<&str> { port(&s, name).frontends.iter().map(|f| f.kind).collect() };
        assert_eq!(kinds("default/web"), ["ClusterIP"], "{at}");
        assert_eq!(kinds("default/np"), ["ClusterIP", "NodePort"], "{at}");
        assert_eq!(
            kinds("default/lb"),
            ["ClusterIP", "externalIP", "LoadBalancer", "NodePort"],
            "{at}"
        );
        assert_eq!(port(&s, "default/web").endpoints, 2);
        assert_eq!(port(&s, "default/empty").endpoints, 0);
        let empty = &port(&s, "default/empty").frontends[0];
        assert_eq!(empty.outcome.as_deref(), Some("rejects it"), "{at}");
        assert!(t.contains("kernel: matches the plan"), "{at}");
        assert!(
            t.contains("last sync: 2026-12-03T15:00:00Z (3 s ago), 7 ok, 0 failed"),
            "{at}"
        );
    }
}

#[test]
fn health_checks_show_their_listener_and_local_endpoints() {
    let planned = &modes(services())[0];
    let s = status_of(services(), planned, Some(planned), None);
    let lb = port(&s, "default/lb").health_check.as_ref().unwrap();
    assert_eq!(
        (lb.port, lb.state, lb.local_endpoints),
        (32000, "serving", 1)
    );
    let other = port(&s, "default/lb-elsewhere")
        .health_check
        .as_ref()
        .unwrap();
    assert_eq!((other.state, other.local_endpoints), ("bindFailing", 0));
    assert!(port(&s, "default/web").health_check.is_none());
    let t = text(&s, false);
    assert!(t.contains("32000 serving (1)"), "{t}");
    assert!(t.contains("32001 failed (0)"), "{t}");
}

#[test]
fn a_kernel_programmed_from_an_older_model_is_drift_a_client_would_meet() {
    // The kernel still has web's old endpoint set (one endpoint) and no endpoint for np.
    let mut older = services();
    older[0] = svc("default/web", "10.96.0.10", 80).ep("10.244.1.2", 8080, "node-a");
    older[2] = svc("default/np", "10.96.0.30", 80).node_port(30080);
    for (planned, kernel) in modes(services()).iter().zip(modes(older)) {
        let s = traced(services(), planned, &kernel);
        let t = text(&s, false);
        let at = format!("{} mode:\n{t}", s.mode);
        let web = port(&s, "default/web");
        assert_eq!((web.programmed, web.endpoints), (Some(1), 2), "{at}");
        let drift = web.frontends[0].drift.as_deref().unwrap_or_default();
        assert!(
            drift.starts_with("kernel forwards to 1 endpoint (10.244.1.2:8080)")
                && drift.contains("; plan forwards to 2 endpoints"),
            "{at}"
        );
        let np = port(&s, "default/np");
        assert_eq!(np.drifted(), 2, "both frontends reject in the kernel: {at}");
        assert!(t.contains("kernel: DIFFERS from the plan"), "{at}");
        assert!(
            t.contains("  - default/np NodePort 10.0.0.11:30080: kernel rejects it; plan forwards"),
            "{at}"
        );
        assert_eq!(port(&s, "default/lb").drifted(), 0, "{at}");
    }
}

#[test]
fn without_the_kernel_nothing_is_called_programmed() {
    let planned = &modes(services())[1];
    let s = status_of(services(), planned, None, None);
    assert_eq!(s.rules_from, RulesFrom::Planned);
    assert!(s.service_ports.iter().all(|p| p.programmed.is_none()));
    let t = text(&s, false);
    assert!(t.contains("rules as planned"), "{t}");
    assert!(!t.contains("kernel:"), "{t}");
    // The whole node is not traced without the kernel; one Service is, through the plan.
    assert!(
        s.service_ports
            .iter()
            .flat_map(|p| &p.frontends)
            .all(|f| f.outcome.is_none())
    );
    let one = status_of(services(), planned, None, Some("default/np"));
    let t = text(&one, true);
    assert!(
        t.contains("  - NodePort 10.0.0.11:30080: forwards to 1 endpoint (10.244.2.3:8080)"),
        "{t}"
    );
}

#[test]
fn one_service_or_one_port_is_asked_for_by_name() {
    let planned = &modes(services())[0];
    let s = status_of(services(), planned, Some(planned), Some("default/lb"));
    let names: Vec<&str> = s.service_ports.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["default/lb"]);
    let t = text(&s, true);
    assert!(t.contains("default/lb frontends:"), "{t}");
    assert!(
        t.contains("  - LoadBalancer 192.0.2.40:443: forwards to 1 endpoint (10.244.1.6:8443)"),
        "{t}"
    );
    let none = status_of(services(), planned, Some(planned), Some("default/lb2"));
    assert!(none.service_ports.is_empty());
    assert!(text(&none, true).contains("no service ports"));
}

#[test]
fn only_service_names_are_taken() {
    for ok in ["default/web", "kube-system/kube-dns:dns-tcp", "a/b"] {
        assert_eq!(bad_service(ok), None, "{ok}");
    }
    for bad in [
        "web",
        "/web",
        "default/",
        "default/web\nx",
        "a/b&output=json",
        "a/b c",
    ] {
        assert!(bad_service(bad).is_some(), "{bad:?}");
    }
    assert!(bad_service(&format!("a/{}", "b".repeat(600))).is_some());
}

#[test]
fn the_sync_summary_reads_the_runners_clock() {
    let t0 = Instant::now();
    let mut status = crate::sync::Status::new(t0);
    status.ready = true;
    status.last_success = Some(t0);
    status.failing_since = Some(t0 + Duration::from_secs(10));
    status.syncs_ok = 4;
    status.syncs_failed = 2;
    let s = SyncSummary::of(&status, t0 + Duration::from_secs(25));
    assert_eq!(s.seconds_since_success, Some(25));
    assert_eq!(s.failing_for_seconds, Some(15));
    assert_eq!((s.syncs_ok, s.syncs_failed), (4, 2));
    let mut summary = runtime().sync;
    summary.failing_for_seconds = Some(15);
    let planned = &modes(services())[0];
    let mut st = status_of(services(), planned, Some(planned), None);
    st.sync = summary;
    assert!(text(&st, false).contains("; FAILING for 15 s"));
}

/// The eBPF mode's plan of `services` (the last of every mode's).
fn ebpf_plan(services: Vec<Svc>) -> Box<dyn Plan> {
    crate::testing::plans::all_modes(&snapshot(node(), services), &config())
        .pop()
        .expect("the eBPF mode's plan")
}

/// `services` without `default/web`.
fn without_web() -> Vec<Svc> {
    services()
        .into_iter()
        .filter(|s| s.cluster_ip != "10.96.0.10".parse::<std::net::IpAddr>().unwrap())
        .collect()
}

#[test]
fn ebpf_mode_counts_the_backends_in_the_maps_and_traces_external_frontends_from_the_node() {
    let planned = ebpf_plan(services());
    let s = status_of(services(), &planned, Some(&planned), None);
    assert_eq!(s.mode, "ebpf");
    assert!(
        text(&s, false).starts_with("node node-a, ebpf mode, maps read from the kernel\n"),
        "{}",
        text(&s, false)
    );
    let port = |s: &Status, name: &str| {
        let p = s.service_ports.iter().find(|p| p.name == name).unwrap();
        (p.programmed, p.endpoints, p.drifted())
    };
    assert_eq!(port(&s, "default/web"), (Some(2), 2, 0));
    // lb's LoadBalancer IP from the node: every endpoint (local origin), not "untouched".
    let lb = s
        .service_ports
        .iter()
        .find(|p| p.name == "default/lb")
        .unwrap();
    let at_lb = lb
        .frontends
        .iter()
        .find(|f| f.kind == "LoadBalancer")
        .unwrap();
    assert!(
        at_lb
            .outcome
            .as_deref()
            .unwrap()
            .starts_with("forwards to 2 endpoints"),
        "{at_lb:?}"
    );
    // Maps without web's entries: nothing programmed for it, its one frontend drifted.
    let kernel = ebpf_plan(without_web());
    let s = status_of(services(), &planned, Some(&kernel), None);
    assert_eq!(port(&s, "default/web"), (Some(0), 2, 1));
    assert_eq!(port(&s, "default/np"), (Some(1), 1, 0));
}

#[test]
fn json_is_one_document() {
    let planned = &modes(services())[0];
    let s = status_of(services(), planned, Some(planned), None);
    let v: serde_json::Value = serde_json::from_str(&json(&s)).unwrap();
    assert_eq!(v["mode"], "nftables");
    assert_eq!(v["rulesFrom"], "kernel");
    assert_eq!(v["servicePorts"][0]["name"], "default/empty");
    assert_eq!(v["sync"]["syncsOk"], 7);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Whatever the names, the table is lines within the width with no control character, and
    /// every name is shown whole (escaped).
    #[test]
    fn any_name_gives_a_clean_table(ns in "[a-z0-9\\n\\t\\x1b-]{1,80}", name in "\\PC{1,200}") {
        let hostile = || {
            let mut v = services();
            v.push(svc(&format!("{ns}/{name}"), "10.96.0.90", 80).ep("10.244.2.9", 80, "node-b"));
            v
        };
        let mut all: Vec<Status> = modes(hostile())
            .iter()
            .map(|planned| status_of(hostile(), planned, Some(planned), None))
            .collect();
        // The eBPF mode with the hostile port's entries gone: its name is in a frontend's
        // drift and in the node's, as the mode's reader words it.
        let mut gone = status_of(hostile(), &ebpf_plan(hostile()), Some(&ebpf_plan(services())), None);
        gone.drift.push(format!("kp_svc has no entry for TCP 10.96.0.90:80 ({ns}/{name})"));
        all.push(gone);
        for s in all {
            let t = text(&s, true);
            for line in t.lines() {
                prop_assert!(line.chars().count() <= WIDTH, "{line}");
                prop_assert!(!line.chars().any(char::is_control), "{line:?}");
            }
            let _: serde_json::Value = serde_json::from_str(&json(&s)).unwrap();
        }
    }
}
