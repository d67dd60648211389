//! The end-to-end scenario suite: each scenario is an `async fn(&Lab) -> Result`, run
//! in turn against one shared lab per proxy and mode (each uses its own Services, so they do not
//! interfere), and judged against what that proxy is expected to do.
//!
//! A scenario a proxy cannot pass yet is declared expected-to-fail with its reason (the proxy's
//! [`Proxy::known_gap`] or the scenario's own `expect`), still runs (with a short settle time),
//! and is reported as such; one that unexpectedly passes fails the suite so the declaration gets
//! updated. Scenarios the lab does not build yet are listed as not run, with why ([`NOT_BUILT`]).
//! `LAB_SCENARIOS=1,4,9` runs a subset (the rest are reported as not run).
//!
//! For our proxies, a scenario that passed is also explained: `kube-proxy-rs explain` on the
//! live node must tell its main packet as it went (`explained.rs`, one table for every mode).

mod basic;
mod disruption;
mod dual_stack;
pub mod explained;
mod external;
mod flags;
mod ipvs;
mod policy;
mod relay;
pub mod report;
mod session;
mod socket_lb;

use std::net::IpAddr;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::LocalBoxFuture;
use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::client::{From, expect_pods};
use super::{Lab, Proto, Proxy};
use crate::testenv::TestEnv;
use report::{Expect, Row, Verdict};

type Run = for<'a> fn(&'a Lab) -> LocalBoxFuture<'a, Result<(), String>>;

/// One scenario of the suite.
pub struct Scenario {
    /// Its number in the suite (docs/testing.md, "Scenarios and their status").
    pub id: u8,
    pub title: &'static str,
    pub run: Run,
    /// What `proxy` is expected to do here, beyond its known gap.
    pub expect: fn(Proxy) -> Expect,
}

/// Every proxy is held to the scenario.
fn must_pass(_: Proxy) -> Expect {
    Expect::Pass
}

macro_rules! scenario {
    ($id:expr, $title:expr, $f:path) => {
        scenario!($id, $title, $f, must_pass)
    };
    ($id:expr, $title:expr, $f:path, $expect:expr) => {{
        fn run(lab: &Lab) -> LocalBoxFuture<'_, Result<(), String>> {
            Box::pin($f(lab))
        }
        Scenario {
            id: $id,
            title: $title,
            run,
            expect: $expect,
        }
    }};
}

/// The suite, in issue order.
pub fn all() -> Vec<Scenario> {
    vec![
        scenario!(
            1,
            "ClusterIP TCP from every node to every endpoint",
            basic::cluster_ip_tcp
        ),
        scenario!(
            2,
            "multi-port, named target ports, split slices",
            basic::multi_port_named
        ),
        scenario!(3, "same port number over TCP and UDP", basic::tcp_and_udp),
        scenario!(
            4,
            "NodePort from outside and from a pod",
            external::node_ports,
            must_pass
        ),
        scenario!(
            5,
            "LoadBalancer ingress IP, ipMode VIP and Proxy",
            external::load_balancer,
            must_pass
        ),
        scenario!(6, "externalIPs", external::external_ips, must_pass),
        scenario!(
            7,
            "ClientIP session affinity",
            policy::session_affinity,
            policy::session_affinity_expect
        ),
        scenario!(
            8,
            "externalTrafficPolicy Cluster",
            external::etp_cluster,
            must_pass
        ),
        scenario!(
            9,
            "externalTrafficPolicy Local + health check",
            external::etp_local,
            must_pass
        ),
        scenario!(10, "internalTrafficPolicy Local", policy::itp_local),
        scenario!(11, "no endpoints: rejected at once", basic::no_endpoints),
        scenario!(12, "serving terminating endpoints", policy::terminating),
        scenario!(13, "PreferSameZone with zone hints", policy::topology),
        scenario!(14, "hairpin: a pod reaches itself", basic::hairpin),
        scenario!(15, "endpoint removed", basic::endpoint_removed),
        scenario!(16, "Service deleted", basic::service_deleted),
        scenario!(
            17,
            "loadBalancerSourceRanges",
            external::source_ranges,
            must_pass
        ),
        scenario!(
            18,
            "UDP stream moves when its endpoint is replaced",
            disruption::udp_endpoint_replaced,
            disruption::udp_endpoint_replaced_expect
        ),
        scenario!(
            19,
            "proxy restarted under load: zero failures",
            disruption::proxy_restart,
            disruption::proxy_restart_expect
        ),
        scenario!(
            29,
            "graceful termination: a long-lived connection outlives its endpoint",
            disruption::graceful_termination,
            disruption::graceful_termination_expect
        ),
        scenario!(
            21,
            "IPv6 single-stack and dual-stack",
            dual_stack::ipv6_and_dual_stack,
            must_pass
        ),
        scenario!(
            22,
            "ignored: proxy-name label, headless, ExternalName",
            basic::ignored
        ),
        scenario!(
            25,
            "no endpoints: a burst of TCP connects is refused at once",
            basic::no_endpoints_burst,
            basic::no_endpoints_burst_expect
        ),
        scenario!(
            26,
            "ipvs rr: connections in a row take the endpoints in turn",
            ipvs::round_robin,
            ipvs::ipvs_only
        ),
        scenario!(
            27,
            "ipvs sh chosen live: each source keeps to one endpoint",
            ipvs::source_hashing_live,
            ipvs::ours_ipvs_only
        ),
        scenario!(
            28,
            "ipvs mh: the same endpoint for one client on two nodes",
            ipvs::maglev_same_on_two_nodes,
            ipvs::ours_ipvs_only
        ),
        scenario!(
            30,
            "an endpoint that refuses is skipped, the client connects",
            relay::refusing_endpoint_skipped,
            relay::relay_only
        ),
        scenario!(
            31,
            "an endpoint silent past the dial timeout is skipped",
            relay::silent_endpoint_skipped,
            relay::relay_only
        ),
        scenario!(
            32,
            "a long-lived connection survives syncs not touching its endpoint",
            relay::long_lived_survives_sync
        ),
        scenario!(
            37,
            "a relay listener's own port is refused; only frontends reach it",
            relay::relay_ports_only_through_frontends,
            relay::relay_only
        ),
        scenario!(
            34,
            "IPv6 and dual-stack from the node's pods and the node",
            dual_stack::ipv6_from_inside,
            socket_lb::inside_part_for_ebpf
        ),
        scenario!(
            35,
            "a pod's ClusterIP connection leaves no conntrack entry for it",
            socket_lb::no_conntrack_for_cluster_ip,
            socket_lb::ebpf_only
        ),
        scenario!(
            36,
            "NodePort, externalIP and LoadBalancer IP from a pod and the node",
            socket_lb::external_frontends_from_inside,
            socket_lb::inside_part_for_ebpf
        ),
        // Last: these restart node 1's proxy with other flags (and put it back afterwards).
        scenario!(
            20,
            "rules deleted by another program come back",
            flags::rules_deleted,
            flags::rules_deleted_expect
        ),
        scenario!(
            23,
            "nodePortAddresses",
            flags::node_port_addresses,
            must_pass
        ),
        scenario!(
            33,
            "NodePorts on 127.0.0.1 from the node itself",
            flags::node_port_localhost,
            flags::node_port_localhost_expect
        ),
        scenario!(
            24,
            "masqueradeAll and detect-local modes",
            flags::snat_modes,
            flags::snat_modes_expect
        ),
    ]
}

/// Scenarios of the suite the lab does not build, and what they need.
pub const NOT_BUILT: &[(u8, &str, &str)] = &[];

/// Settle time while a scenario is expected to pass: proxies sync within about a second.
const SETTLE: Duration = Duration::from_secs(20);
/// Names a longer settle time, in seconds: a UML guest runs the whole lab on one CPU at a
/// fraction of the host's speed (`lab_uml.rs` sets it).
pub const SETTLE_VAR: &str = "LAB_SETTLE_SECS";
/// Settle time while it is expected to fail: enough to notice a proxy that does work.
const SETTLE_XFAIL: Duration = Duration::from_secs(3);
/// Hard limit for one scenario, at the default settle time (it grows with [`SETTLE_VAR`]).
const SCENARIO_LIMIT: Duration = Duration::from_secs(120);

/// How many times slower than this host's the machine running the lab is taken to be: the
/// settle time [`SETTLE_VAR`] asks for over the host's (1 without it).
pub fn slowdown() -> f64 {
    settle_and_limit().0.as_secs_f64() / SETTLE.as_secs_f64()
}

/// The settle time and the scenario limit for this run.
pub fn settle_and_limit() -> (Duration, Duration) {
    #[allow(clippy::disallowed_methods, reason = "the UML harness's setting")]
    let asked = std::env::var(SETTLE_VAR)
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    match asked.map(Duration::from_secs) {
        Some(settle) if settle > SETTLE => (settle, SCENARIO_LIMIT * 3),
        _ => (SETTLE, SCENARIO_LIMIT),
    }
}

/// One lab at a time per test binary. Three labs side by side put nine proxies, their probes
/// and the API server on the same cores, and a starved proxy then misses the settle time (seen
/// in CI: an upstream proxy still not filtering by zone after 20 s); the suite measures
/// behaviour, not how a proxy copes with a saturated machine.
static ONE_LAB_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Builds a lab for `proxy`, runs every scenario, prints the summary, and panics if any verdict
/// is bad (a failure, or an expected failure that passed).
pub async fn run_suite(proxy: Proxy) {
    let _turn = ONE_LAB_AT_A_TIME.lock().await;
    let started = Instant::now();
    let label = proxy.label();
    let env = TestEnv::shared();
    let mut lab = Lab::start(env, proxy).await;
    report::say(&format!(
        "lab {label}: started in {:.1}s; proxy logs: {}",
        started.elapsed().as_secs_f64(),
        lab.proxy_logs().join(" ")
    ));
    #[allow(clippy::disallowed_methods, reason = "a developer's filter")]
    let only: Option<Vec<u8>> = std::env::var("LAB_SCENARIOS")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect());

    let ids: Vec<u8> = all().iter().map(|s| s.id).collect();
    if let Err(e) = explained::rows_name_scenarios(&ids) {
        panic!("{e}");
    }
    let (settle, limit) = settle_and_limit();
    let mut rows = Vec::new();
    let mut diagnostics = Vec::new();
    for s in all() {
        let t0 = Instant::now();
        let verdict = if only.as_ref().is_some_and(|o| !o.contains(&s.id)) {
            Verdict::NotRun("not selected by LAB_SCENARIOS".to_owned())
        } else if let Expect::NotApplicable(why) = (s.expect)(proxy) {
            Verdict::NotRun(format!("n/a: {why}"))
        } else {
            let expected = match proxy.known_gap() {
                Some(gap) => Expect::Fail(gap),
                None => proxy.held_to((s.expect)(proxy)),
            };
            // A proxy that is slow rather than wrong gets the whole settle time.
            let slow = expected == Expect::Either(super::proxy::UPSTREAM_IPVS_IN_UML);
            lab.set_settle(if expected == Expect::Pass || slow {
                settle
            } else {
                SETTLE_XFAIL
            });
            // Once a scenario has passed, `explain` must tell its main packet as it went.
            let run = tokio::time::timeout(limit, async {
                (s.run)(&lab).await?;
                explained::check(&lab, s.id)
                    .await
                    .map_err(|e| format!("explain: {e}"))
            });
            let result = match AssertUnwindSafe(run).catch_unwind().await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(format!("scenario took longer than {limit:?}")),
                Err(panic) => Err(panic_text(&*panic)),
            };
            let verdict = Verdict::judge(result, expected);
            if verdict.is_bad() {
                diagnostics.push(format!(
                    "scenario {}: the proxies' last log lines:\n{}",
                    s.id,
                    lab.proxy_log_tails(12).join("\n")
                ));
            }
            verdict
        };
        let row = Row {
            id: s.id,
            title: s.title,
            verdict,
            took: t0.elapsed(),
        };
        report::progress(&label, &row);
        rows.push(row);
    }
    for &(id, title, needs) in NOT_BUILT {
        rows.push(Row {
            id,
            title,
            verdict: Verdict::NotRun(format!("not built yet ({needs})")),
            took: Duration::ZERO,
        });
    }
    rows.sort_by_key(|r| r.id);
    let exited = lab.exited_proxies();
    drop(lab);
    report::say(&report::summary(&label, &rows, started.elapsed()));
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| r.verdict.is_bad())
        .map(|r| {
            format!(
                "scenario {} ({}): {}: {:?}",
                r.id,
                r.title,
                r.verdict.tag(),
                r.verdict
            )
        })
        .collect();
    let proxy_note = if exited.is_empty() || proxy.known_gap().is_some() {
        String::new()
    } else {
        format!("\nproxies that exited:\n{}", exited.join("\n"))
    };
    assert!(
        bad.is_empty() && proxy_note.is_empty(),
        "{label}: {} scenario(s) went wrong:\n{}{proxy_note}\n{}",
        bad.len(),
        bad.join("\n"),
        diagnostics.join("\n")
    );
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else if let Some(s) = panic.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers the scenario files share.

/// The Service's first ClusterIP.
pub fn cluster_ip(svc: &Service) -> IpAddr {
    svc.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .expect("an allocated ClusterIP")
}

/// The node port of the Service's `index`th port.
pub fn node_port(svc: &Service, index: usize) -> u16 {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.get(index))
        .and_then(|p| p.node_port)
        .and_then(|p| u16::try_from(p).ok())
        .expect("an allocated nodePort")
}

/// A Service `name` with one TCP port `port` → `target`, plus the fields of `extra` in `spec`.
pub fn service(name: &str, port: u16, target: u16, extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "ports": [{ "name": "p", "port": port, "targetPort": target, "protocol": "TCP" }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({ "metadata": { "name": name }, "spec": spec })
}

/// Waits until `from` reaches `target` over TCP at all, then checks that `count` connections
/// are answered by exactly the pods in `want`.
pub async fn reaches_exactly(
    lab: &Lab,
    from: From<'_>,
    target: std::net::SocketAddr,
    count: u32,
    want: &[&str],
) -> Result<(), String> {
    let what = format!("{from} → {target} reaches {want:?}");
    lab.eventually(&what, || async {
        let replies = lab.all_reach(from, Proto::Tcp, target, count).await?;
        expect_pods(&what, &replies, want)
    })
    .await
}
