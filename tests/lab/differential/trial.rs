//! One trial: a world applied to the API server of a fresh lab, then upstream kube-proxy and
//! ours run on it one after the other (same objects, same addresses, same node worlds), each
//! probed at every frontend.
//!
//! Order: the objects first, then upstream on every node, its first sync seen on a sentinel
//! Service from every node (and that of its IPv6 rules on an IPv6 one) and a second one
//! forced, every frontend probed; upstream stopped
//! and everything it made removed (rules, IPVS state, conntrack entries; then checked: nothing
//! of it may be left for ours to be judged by); then ours the same way. Where ours differs, its frontend is
//! probed again before the difference counts (a difference that goes away was noise). The lab
//! is dropped at the end, with everything ours left in it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::compare;
use super::frontends::{self, Allocated, Frontend, Key, Source};
use super::model::World;
use super::objects;
use super::outcome::{Outcome, observe};
use crate::lab::client::{From, addr};
use crate::lab::probe::{BatchItem, Request};
use crate::lab::scenarios::report::say;
use crate::lab::topology::{ip, node_ip, node_ip6};
use crate::lab::{Lab, Mode, Proto, Proxy};
use crate::testenv::TestEnv;

/// The upstream proxy ours is compared with in `mode`: the same mode where upstream has it,
/// its nftables mode for the modes only ours has.
pub fn reference(mode: Mode) -> Proxy {
    let mode = match mode {
        Mode::Userspace | Mode::Ebpf => Mode::Nftables,
        m => m,
    };
    Proxy::Upstream { mode }
}

/// What one trial saw.
pub struct Trial {
    pub frontends: Vec<Frontend>,
    pub upstream: BTreeMap<Key, Outcome>,
    pub ours: BTreeMap<Key, Outcome>,
    /// Frontends where ours first differed and agreed when probed again.
    pub settled_on_recheck: Vec<Key>,
    pub took: Duration,
}

/// How long to wait for a proxy's first sync (the sentinel answering on every node).
pub fn sync_wait() -> Duration {
    #[allow(
        clippy::disallowed_methods,
        reason = "the UML guest's longer settle time"
    )]
    let secs = std::env::var(crate::lab::scenarios::SETTLE_VAR)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// Runs `world` under upstream and ours in `mode`; probes the frontends whose keys are in
/// `only` (every frontend when `None`).
pub async fn run(
    env: &'static TestEnv,
    mode: Mode,
    world: &World,
    only: Option<&BTreeSet<Key>>,
) -> Trial {
    let started = Instant::now();
    let mut times = Times(Vec::new(), Some(started));
    let mut lab = Lab::start_idle(env, Proxy::Ours { mode }).await;
    route_client(&lab);
    let allocated = apply(&lab, world).await;
    let sentinel = sentinel(&lab).await;
    let sentinel6 = sentinel6(&lab).await;
    times.lap("lab");
    let frontends: Vec<Frontend> = frontends::enumerate(world, &allocated)
        .into_iter()
        .filter(|f| only.is_none_or(|o| o.contains(&f.key)))
        .collect();

    lab.proxy = reference(mode);
    let upstream = run_proxy(&mut lab, [sentinel, sentinel6], &frontends, &mut times).await;
    lab.stop_proxies();
    reset_nodes(&lab, mode);
    times.lap("cleanup");

    lab.proxy = Proxy::Ours { mode };
    let mut ours = run_proxy(&mut lab, [sentinel, sentinel6], &frontends, &mut times).await;
    let differing: Vec<Frontend> = compare::compare(mode, world, &frontends, &upstream, &ours)
        .into_iter()
        .filter_map(|d| frontends.iter().find(|f| f.key == d.key).cloned())
        .collect();
    let mut settled_on_recheck = Vec::new();
    if !differing.is_empty() {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let again = probe_all(&lab, &differing).await;
        for f in &differing {
            let first = ours.get(&f.key).cloned().unwrap_or_default();
            let second = again.get(&f.key).cloned().unwrap_or_default();
            let up = compare::comparable(f, upstream.get(&f.key).unwrap_or(&Outcome::default()));
            let settled = if compare::comparable(f, &second) == up {
                settled_on_recheck.push(f.key.clone());
                second
            } else {
                first.union(&second)
            };
            ours.insert(f.key.clone(), settled);
        }
    }
    times.lap("re-check");
    check_running(&mut lab);
    lab.stop_proxies();
    drop(lab);
    times.lap("teardown");
    say(&format!(
        "trial of {} frontends: {}",
        frontends.len(),
        times.0.join(", ")
    ));
    Trial {
        frontends,
        upstream,
        ours,
        settled_on_recheck,
        took: started.elapsed(),
    }
}

/// Starts the lab's proxy on every node, waits for its first sync (of both families: see
/// [`sentinel6`]), probes every frontend.
async fn run_proxy(
    lab: &mut Lab,
    [sentinel, sentinel6]: [std::net::SocketAddr; 2],
    frontends: &[Frontend],
    times: &mut Times,
) -> BTreeMap<Key, Outcome> {
    lab.start_proxies();
    lab.set_settle(sync_wait());
    for node in 0..lab.topo.nodes.len() {
        let from = From::Pod(lab.pod(&Source::pod_name(node)));
        let synced = lab
            .eventually(
                &format!("{} synced on node {}", lab.proxy.label(), node + 1),
                || async { lab.all_reach(from, Proto::Tcp, sentinel, 1).await.map(drop) },
            )
            .await;
        if let Err(e) = synced {
            panic!("{e}\n{}", lab.proxy_log_tails(20).join("\n"));
        }
    }
    for node in 0..lab.topo.nodes.len() {
        let synced = lab
            .eventually(
                &format!("{} synced IPv6 on node {}", lab.proxy.label(), node + 1),
                || async { masqueraded(lab, node, sentinel6).await },
            )
            .await;
        if let Err(e) = synced {
            panic!("{e}\n{}", lab.proxy_log_tails(20).join("\n"));
        }
    }
    // A second sync: one that started before the proxy had read its Node's labels or the
    // ServiceCIDRs would otherwise stand until a periodic one.
    second_sync(lab, sentinel).await;
    times.lap(&format!("{} synced", lab.proxy.label()));
    let outcomes = probe_all(lab, frontends).await;
    times.lap("probes");
    check_running(lab);
    outcomes
}

/// How long each step of a trial took, for its log line; the time the last step ended.
struct Times(Vec<String>, Option<Instant>);

impl Times {
    /// Ends a step: said at once (a long trial, in the UML guest above all, shows where it
    /// is) and kept for the trial's summary line.
    fn lap(&mut self, what: &str) {
        let now = Instant::now();
        let since = self.1.replace(now);
        if let Some(t) = since {
            let step = format!("{what} {:.1}s", now.duration_since(t).as_secs_f64());
            say(&format!("  trial step: {step}"));
            self.0.push(step);
        }
    }
}

/// Gives the sentinel a fourth endpoint (`n1-b`) and waits until it answers from every node:
/// each proxy has synced again. The sentinel's slice is put back afterwards, for the next
/// proxy's run.
async fn second_sync(lab: &Lab, sentinel: std::net::SocketAddr) {
    let four = ["n1-a", "n2-a", "n3-a", "n1-b"];
    lab.cluster
        .apply_slice(
            "sentinel-0",
            "sentinel",
            &SENTINEL_PORT,
            &lab.endpoints(&four),
        )
        .await;
    for node in 0..lab.topo.nodes.len() {
        let from = From::Pod(lab.pod(&Source::pod_name(node)));
        let what = format!("{} synced again on node {}", lab.proxy.label(), node + 1);
        let synced = lab
            .eventually(&what, || async {
                let replies = lab.all_reach(from, Proto::Tcp, sentinel, 24).await?;
                if replies.iter().any(|r| r.pod == "n1-b") {
                    Ok(())
                } else {
                    Err("not yet n1-b".to_owned())
                }
            })
            .await;
        if let Err(e) = synced {
            panic!("{e}\n{}", lab.proxy_log_tails(20).join("\n"));
        }
    }
    lab.cluster
        .apply_slice(
            "sentinel-0",
            "sentinel",
            &SENTINEL_PORT,
            &lab.endpoints(&SENTINEL_PODS),
        )
        .await;
}

/// The sentinel's endpoints before [`second_sync`]: one on every node.
const SENTINEL_PODS: [&str; 3] = ["n1-a", "n2-a", "n3-a"];
/// The sentinel's slice port.
const SENTINEL_PORT: [(&str, u16, Proto); 1] = [("", 8080, Proto::Tcp)];

/// Panics with the logs of any proxy that exited.
fn check_running(lab: &mut Lab) {
    let exited = lab.exited_proxies();
    assert!(exited.is_empty(), "proxies exited:\n{}", exited.join("\n"));
}

/// Routes the Service CIDRs and the IPv6 externalIP and ingress ranges from the external client
/// through node 1 (the IPv4 external ranges already are), so outside traffic reaches every
/// kind of frontend; and lifts the nodes' overall ICMP limit (1000 a second, bursts of 50 by
/// default), which the refusals of many probes at once would reach, turning UDP refusals
/// into silence. The lab's namespaces go with the lab.
fn route_client(lab: &Lab) {
    for node in &lab.topo.nodes {
        for setting in [
            "net.ipv4.icmp_msgs_per_sec=1000000",
            "net.ipv4.icmp_msgs_burst=100000",
        ] {
            node.ns.output("sysctl", &["-qw", setting]);
        }
    }
    let via4 = node_ip(0).to_string();
    let via6 = node_ip6(0).to_string();
    for (range, via) in [
        ("10.96.0.0/12", &via4),
        ("fd00:10:96::/108", &via6),
        ("fd00:203::/64", &via6),
        ("fd00:198::/64", &via6),
    ] {
        ip(&lab.topo.client, &["route", "add", range, "via", via]);
    }
}

/// Applies every object of `world`; what the API server allocated, by Service name.
async fn apply(lab: &Lab, world: &World) -> BTreeMap<String, Allocated> {
    let mut allocated = BTreeMap::new();
    for svc in &world.services {
        let obj = lab.cluster.apply_service(objects::service(svc)).await;
        if let Some(ingress) = objects::ingress(svc) {
            lab.cluster.set_lb_ingress(&svc.name, ingress).await;
        }
        allocated.insert(svc.name.clone(), allocated_of(&obj));
        for slice in &svc.slices {
            let body = objects::slice(slice, &lab.cluster.node_names);
            lab.cluster
                .apply_slice_json(&slice.name, &svc.name, body)
                .await;
        }
    }
    allocated
}

fn allocated_of(svc: &Service) -> Allocated {
    let spec = svc.spec.clone().unwrap_or_default();
    Allocated {
        cluster_ips: spec
            .cluster_ips
            .unwrap_or_default()
            .iter()
            .filter_map(|ip| ip.parse::<IpAddr>().ok())
            .collect(),
        node_ports: spec
            .ports
            .unwrap_or_default()
            .iter()
            .map(|p| p.node_port.and_then(|n| u16::try_from(n).ok()))
            .collect(),
        health_check_port: spec
            .health_check_node_port
            .and_then(|n| u16::try_from(n).ok()),
    }
}

/// A Service outside the world, with an endpoint on every node: when it answers from a pod on
/// every node, each node's proxy has made its first sync (which holds every object, all
/// written before the proxies started).
async fn sentinel(lab: &Lab) -> std::net::SocketAddr {
    let svc = lab
        .cluster
        .apply_service(json!({
            "metadata": { "name": "sentinel" },
            "spec": { "ports": [{ "port": 80, "targetPort": 8080, "protocol": "TCP" }] },
        }))
        .await;
    lab.cluster
        .apply_slice(
            "sentinel-0",
            "sentinel",
            &SENTINEL_PORT,
            &lab.endpoints(&SENTINEL_PODS),
        )
        .await;
    addr(crate::lab::scenarios::cluster_ip(&svc), 80)
}

/// An IPv6 Service outside the world, with an endpoint on every node, whose ClusterIP a node's
/// own connection reaches from one of the node's addresses once the node's proxy has written
/// its IPv6 rules. Upstream's dual-stack ipvs mode syncs each family in a proxier of its own,
/// the IPv6 one only after the IPv4 one's first sync has returned, and each writes its IPVS
/// services before its ipsets and its `ip6tables-restore`; in between, its IPv6 Services
/// answer unmasqueraded (a node's own connection arrives from the ClusterIP itself, which
/// `kube-ipvs0` holds). So the IPv4 sentinel answering says nothing of the IPv6 rules.
async fn sentinel6(lab: &Lab) -> std::net::SocketAddr {
    let svc = lab
        .cluster
        .apply_service(json!({
            "metadata": { "name": "sentinel6" },
            "spec": {
                "ipFamilies": ["IPv6"],
                "ipFamilyPolicy": "SingleStack",
                "ports": [{ "port": 80, "targetPort": 8080, "protocol": "TCP" }],
            },
        }))
        .await;
    lab.cluster
        .apply_slice_of(
            crate::lab::cluster::Family::V6,
            "sentinel6-0",
            "sentinel6",
            &SENTINEL_PORT,
            &lab.endpoints6(&SENTINEL_PODS),
        )
        .await;
    addr(crate::lab::scenarios::cluster_ip(&svc), 80)
}

/// Whether node `node`'s own connections to `sentinel6` are answered, each from an endpoint
/// that saw a source other than the ClusterIP (see [`sentinel6`]).
async fn masqueraded(
    lab: &Lab,
    node: usize,
    sentinel6: std::net::SocketAddr,
) -> Result<(), String> {
    let replies = lab
        .all_reach(From::Node(node), Proto::Tcp, sentinel6, 3)
        .await?;
    match replies.iter().find(|r| r.src.ip() == sentinel6.ip()) {
        Some(r) => Err(format!("{} saw the ClusterIP as the source", r.pod)),
        None => Ok(()),
    }
}

/// Removes what upstream left on the nodes, then checks that nothing is left: no rule, and in
/// ipvs mode no virtual service and no `kube-ipvs0`.
///
/// Everything upstream makes, by hand rather than with `kube-proxy --cleanup` (best effort: it
/// fails on its own ipvs mode's iptables chains, "Device or resource busy", and leaves
/// `KUBE-FIREWALL`, which it counts as the kubelet's): the node's whole ruleset is flushed
/// (only proxies write rules in the lab's node namespaces), IPVS cleared, `kube-ipvs0` and the
/// ipsets removed, and the conntrack table emptied.
fn reset_nodes(lab: &Lab, mode: Mode) {
    for node in &lab.topo.nodes {
        let ns = &node.ns;
        ns.output("nft", &["flush", "ruleset"]);
        if mode == Mode::Ipvs {
            ns.output("ipvsadm", &["-C"]);
            let _ = ns.try_output("ip", &["link", "del", "kube-ipvs0"]);
            let _ = ns.try_output("ipset", &["destroy"]);
        }
        let _ = ns.command("conntrack").arg("-F").output();
        let mut left = ns.output("nft", &["list", "ruleset"]);
        if mode == Mode::Ipvs {
            left.push_str(&ns.output("ipvsadm", &["-Sn"]));
            if ns.try_output("ip", &["link", "show", "kube-ipvs0"]).is_ok() {
                left.push_str("kube-ipvs0\n");
            }
        }
        assert!(
            left.trim().is_empty(),
            "upstream's state left in {}:\n{left}",
            ns.name
        );
    }
}

/// Probes every frontend: enough attempts to see every candidate endpoint answer (ClientIP
/// affinity: a dozen, to see that it sticks), several at once; a frontend that fails every
/// attempt gives up after [`GIVE_UP_AFTER`]. Each attempt is allowed long enough for a
/// refusal that comes with a SYN retransmission, so a frontend that fails only sometimes (a
/// pod reaching itself, say) is still told apart from one that refuses.
pub async fn probe_all(lab: &Lab, frontends: &[Frontend]) -> BTreeMap<Key, Outcome> {
    probe_round(lab, frontends, |f| {
        let n = if f.http {
            2
        } else if f.sticky {
            12
        } else {
            (16 + 14 * f.candidates).min(150)
        };
        u32::try_from(n).unwrap_or(150)
    })
    .await
}

/// Per attempt: a refusal by ICMP can take until the second SYN retransmission (3 s) when
/// the kernel holds back its first error.
const TIMEOUT_MS: u64 = 3500;
/// Per attempt once the frontend has served: what fails then (a pod reaching itself through
/// another node, say) is dropped, not refused late.
const TIMEOUT_ONCE_SERVED_MS: u64 = 1500;
/// Attempts of one frontend in flight at once.
const PARALLEL: u32 = 16;
/// Failed attempts, without any served one, after which a frontend is given up on.
const GIVE_UP_AFTER: u32 = 8;
/// Frontends in flight at once in one probe process.
const CONCURRENCY: usize = 24;
/// How much slower than this host the lab runs: the sync wait over the host's 30 s (3 in the
/// UML guest, where one CPU runs the API server, three proxies and the probes). Probes there
/// wait that much longer per attempt and send that much less at once, or the guest's own
/// load turns answers into timeouts.
fn slowness() -> f64 {
    (sync_wait().as_secs_f64() / 30.0).max(1.0)
}

/// `ms` times the lab's [`slowness`].
fn slower(ms: u64) -> u64 {
    (ms as f64 * slowness()) as u64
}

/// `n` divided by the lab's [`slowness`], at least 1.
fn fewer(n: usize) -> usize {
    ((n as f64 / slowness()).round() as usize).max(1)
}

/// Items per probe process (its spec travels in an environment variable).
const BATCH: usize = 120;

/// One probe process per source (and batch), all sources at once; `count` gives each
/// frontend's attempts.
async fn probe_round(
    lab: &Lab,
    frontends: &[Frontend],
    count: impl Fn(&Frontend) -> u32,
) -> BTreeMap<Key, Outcome> {
    let mut by_source: BTreeMap<Source, Vec<&Frontend>> = BTreeMap::new();
    for f in frontends {
        by_source.entry(f.key.source).or_default().push(f);
    }
    let runs = by_source
        .iter()
        .flat_map(|(&source, fs)| fs.chunks(BATCH).map(move |chunk| (source, chunk.to_vec())));
    let results = futures::future::join_all(runs.map(|(source, chunk)| {
        let items: Vec<BatchItem> = chunk
            .iter()
            .map(|f| BatchItem {
                request: Request {
                    proto: f.key.proto,
                    target: f.target,
                    count: count(f),
                    timeout_ms: slower(TIMEOUT_MS),
                    bind: None,
                    send: f.http.then(|| "GET / HTTP/1.0\r\n\r\n".to_owned()),
                    interval_ms: 0,
                    same_socket: false,
                },
                // Affinity is recorded by the first connection: later ones wait for it, and
                // a sticky frontend that fails is given up on sooner.
                parallel: if f.sticky {
                    1
                } else {
                    fewer(PARALLEL as usize) as u32
                },
                give_up_after: if f.sticky { 2 } else { GIVE_UP_AFTER },
                timeout_once_served_ms: slower(TIMEOUT_ONCE_SERVED_MS),
            })
            .collect();
        async move {
            let from = from(lab, source);
            let attempts = lab.probe_batch(from, items, fewer(CONCURRENCY)).await;
            chunk
                .iter()
                .zip(attempts)
                .map(|(f, attempts)| {
                    let obs = attempts
                        .iter()
                        .map(|a| {
                            let r = a
                                .reply
                                .clone()
                                .ok_or_else(|| a.error.clone().unwrap_or_default());
                            observe(source, &r)
                        })
                        .collect();
                    (f.key.clone(), Outcome(obs))
                })
                .collect::<Vec<_>>()
        }
    }))
    .await;
    results.into_iter().flatten().collect()
}

fn from(lab: &Lab, source: Source) -> From<'_> {
    match source {
        Source::Pod { node } => From::Pod(lab.pod(&Source::pod_name(node))),
        Source::Node(i) => From::Node(i),
        Source::Client => From::Client,
        Source::OtherClient => From::OtherClient,
    }
}
