//! Scenarios that need node 1's proxy configured otherwise, or its rules taken away: rules
//! deleted by another program (20), `--nodeport-addresses` (23), and `--masquerade-all` and each
//! `--detect-local-mode` (24).
//!
//! Each restarts the proxy on node 1 only (the other nodes keep the lab's flags, which also gives
//! a control to compare with), with the lab's flags plus its own, and puts the ordinary proxy back
//! when it ends, also on failure ([`Reconfigured`]). A killed proxy leaves its rules behind, so
//! every check after a restart goes through a Service created after it: only the new proxy can
//! have programmed that.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{cluster_ip, node_port, reaches_exactly, service};
use crate::lab::client::{From, addr};
use crate::lab::proxy::{UPSTREAM_HAS_NO_EBPF, UPSTREAM_HAS_NO_USERSPACE};
use crate::lab::scenarios::report::Expect;
use crate::lab::{Lab, Mode, Proto, Proxy};

/// How long a scenario waits for a freshly started proxy's first sync.
const STARTUP: Duration = Duration::from_secs(20);
/// The same while the scenario is expected to fail (the lab's settle time is short then).
const STARTUP_XFAIL: Duration = Duration::from_secs(5);
/// How soon deleted rules must be back (scenario 20): far less than the sync period node 1
/// runs with there, so only a proxy that watches the kernel passes.
const RESTORED_WITHIN: Duration = Duration::from_secs(5);
/// Node 1's sync period in scenario 20 (`--iptables-sync-period`, which upstream's iptables
/// canary monitor also polls at; `--ipvs-sync-period` in ipvs mode).
const SYNC_PERIOD_20: &str = "--iptables-sync-period=60s";
const IPVS_SYNC_PERIOD_20: &str = "--ipvs-sync-period=60s";
/// The IPv4 service CIDR of the testenv API server, which scenario 24 routes from the client.
const SERVICE_CIDR: &str = "10.96.0.0/12";

/// Node 1's proxy running with extra flags; dropping it restarts the ordinary one.
struct Reconfigured<'a> {
    lab: &'a Lab,
}

impl<'a> Reconfigured<'a> {
    fn new(lab: &'a Lab, flags: &[&str]) -> Self {
        let this = Reconfigured { lab };
        this.set(flags);
        this
    }

    /// Kills node 1's proxy and starts it with the lab's flags plus `flags`.
    fn set(&self, flags: &[&str]) {
        self.lab.stop_proxy(0);
        let flags: Vec<String> = flags.iter().map(|f| (*f).to_owned()).collect();
        self.lab.start_proxy_with(0, &flags);
    }
}

impl Drop for Reconfigured<'_> {
    fn drop(&mut self) {
        self.lab.stop_proxy(0);
        self.lab.start_proxy(0);
    }
}

/// How long to wait for a restarted proxy's first sync: [`STARTUP`], or less while the scenario
/// is expected to fail (its settle time is then shorter than that).
fn startup(lab: &Lab) -> Duration {
    if lab.settle() < STARTUP_XFAIL {
        STARTUP_XFAIL
    } else {
        STARTUP
    }
}

/// Runs `f` with the lab's settle time set to `d`, then puts it back.
async fn with_settle<T>(lab: &Lab, d: Duration, f: impl Future<Output = T>) -> T {
    let old = lab.settle();
    lab.set_settle(d);
    let r = f.await;
    lab.set_settle(old);
    r
}

/// A one-port TCP Service `name` (80 → 8080, plus `extra` in its spec) served by the pods
/// `eps`; returns its ClusterIP and node port (0 without one).
async fn fresh_service(
    lab: &Lab,
    name: &str,
    extra: serde_json::Value,
    eps: &[&str],
) -> (IpAddr, u16) {
    let with_node_port = extra.get("type").is_some();
    let svc = lab
        .cluster
        .apply_service(service(name, 80, 8080, extra))
        .await;
    lab.cluster
        .apply_slice(
            &format!("{name}-x"),
            name,
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(eps),
        )
        .await;
    let np = if with_node_port {
        node_port(&svc, 0)
    } else {
        0
    };
    (cluster_ip(&svc), np)
}

// ---------------------------------------------------------------------------------------------
// Scenario 20

/// Why `proxy` is expected not to restore deleted rules quickly.
pub fn rules_deleted_expect(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Upstream {
            mode: Mode::Nftables,
        } => Expect::Fail(
            "upstream nftables does not watch its table: a deleted table comes back only at its \
             next sync (a Service/EndpointSlice change, or the hourly full sync)",
        ),
        Proxy::Upstream {
            mode: Mode::Iptables,
        } => Expect::Fail(
            "upstream iptables checks its canary chains every --iptables-sync-period (60 s here), \
             so a firewall reload is repaired only then",
        ),
        Proxy::Upstream { mode: Mode::Ipvs } => Expect::Fail(
            "IPVS sends no notification when another program flushes it (`ipvsadm -C`): upstream \
             restores the virtual servers at its next --ipvs-sync-period (60 s here)",
        ),
        Proxy::Upstream {
            mode: Mode::Userspace,
        } => Expect::NotApplicable(UPSTREAM_HAS_NO_USERSPACE),
        Proxy::Upstream { mode: Mode::Ebpf } => Expect::NotApplicable(UPSTREAM_HAS_NO_EBPF),
        Proxy::Ours { mode: Mode::Ebpf } => Expect::NotApplicable(
            "the eBPF mode writes no nftables, iptables or IPVS state for another program to \
             delete: its programs and maps are pinned BPF objects (a firewall reload leaves them \
             alone; their removal by another program is not watched yet)",
        ),
        Proxy::Ours { .. } => Expect::Pass,
    }
}

/// Scenario 20: another program deletes the proxy's rules on node 1 (nftables: its whole
/// table; iptables: a firewall reload flushing and deleting every chain of mangle, nat and
/// filter, in one `iptables-restore`; ipvs: `ipvsadm -C`, every virtual server gone, and then
/// `kube-ipvs0` deleted); a pod on node 1 reaches the Service again within
/// [`RESTORED_WITHIN`] each time.
///
/// Node 1's proxy runs with a sync period of 60 s ([`SYNC_PERIOD_20`]; every proxy gets the
/// same flags), so a proxy that only repairs at its periodic sync (or polls a canary at that
/// period, as upstream's iptables mode does) cannot pass: ours hears the deletion from the
/// nf_tables multicast group, in nftables mode and in iptables mode on the nft back end (the
/// lab's `iptables` is iptables-nft); in ipvs mode, which no kernel notification covers, its
/// watch probes a few of its virtual services once a second (`ipvs/watch.rs`).
pub async fn rules_deleted(lab: &Lab) -> Result<(), String> {
    let _node1 = Reconfigured::new(lab, &[SYNC_PERIOD_20, IPVS_SYNC_PERIOD_20]);
    let (ip, _) = fresh_service(lab, "s20", json!({}), &["n2-a"]).await;
    let vip = addr(ip, 80);
    let from = From::Pod(lab.pod("n1-b"));
    with_settle(
        lab,
        startup(lab),
        reaches_exactly(lab, from, vip, 5, &["n2-a"]),
    )
    .await?;

    let ns = &lab.topo.nodes[0].ns;
    match lab.proxy.mode() {
        // Userspace mode's redirect rules live in our nftables table too.
        Mode::Nftables | Mode::Userspace => {
            let table = lab.proxy.nft_table();
            ns.try_output("nft", &["delete", "table", "ip", table])
                .map_err(|e| format!("nft delete table ip {table}: {e}"))?;
        }
        Mode::Iptables => {
            // A firewall reload: every chain of the three tables flushed and every chain of
            // ours deleted in one transaction. As separate `-F` and `-X` commands, a proxy
            // that repairs fast (ours, in a slow guest) re-adds its jumps in between and the
            // `-X` fails with EBUSY.
            ns.try_output_fed(
                "iptables-restore",
                &["-w"],
                "*mangle\nCOMMIT\n*nat\nCOMMIT\n*filter\nCOMMIT\n",
            )
            .map_err(|e| format!("iptables-restore of empty tables: {e}"))?;
        }
        Mode::Ipvs => {
            ns.try_output("ipvsadm", &["-C"])
                .map_err(|e| format!("ipvsadm -C: {e}"))?;
        }
        Mode::Ebpf => return Err("the eBPF mode has no rules to delete".to_owned()),
    }
    let t0 = Instant::now();
    let bound = lab.settle().min(RESTORED_WITHIN);
    with_settle(lab, bound, reaches_exactly(lab, from, vip, 5, &["n2-a"]))
        .await
        .map_err(|e| format!("rules deleted on node 1 not restored: {e}"))?;
    crate::lab::scenarios::report::say(&format!(
        "lab {}: 20: restored {:.1}s after the deletion",
        lab.proxy.label(),
        t0.elapsed().as_secs_f64()
    ));
    if lab.proxy.mode() == Mode::Ipvs {
        // The dummy link deleted: the ClusterIPs are no longer local, so IPVS never sees a
        // pod's packets to them.
        ns.try_output("ip", &["link", "del", "kube-ipvs0"])
            .map_err(|e| format!("ip link del kube-ipvs0: {e}"))?;
        let t0 = Instant::now();
        with_settle(lab, bound, reaches_exactly(lab, from, vip, 5, &["n2-a"]))
            .await
            .map_err(|e| format!("kube-ipvs0 deleted on node 1 not restored: {e}"))?;
        crate::lab::scenarios::report::say(&format!(
            "lab {}: 20: kube-ipvs0 restored {:.1}s after its deletion",
            lab.proxy.label(),
            t0.elapsed().as_secs_f64()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Scenario 23

/// Scenario 23: node 1's proxy is restarted with `--nodeport-addresses`, each time with a new
/// NodePort Service (endpoints on node 2):
/// - `192.168.200.11/32` (its underlay address): the external client reaches it there; a pod
///   on node 3 does not through node 1's other address, its pod gateway 10.244.1.1 (which
///   upstream iptables' default, every local address, would accept);
/// - `10.244.0.0/16` (an address on the host but not in the Node object): the pod reaches it
///   through 10.244.1.1; the client no longer through the underlay address, which node 2 (the
///   lab's flags) still accepts.
pub async fn node_port_addresses(lab: &Lab) -> Result<(), String> {
    let eps = ["n2-a", "n2-b"];
    let node1 = lab.topo.nodes[0].ip;
    let node2 = lab.topo.nodes[1].ip;
    let gw = lab.topo.nodes[0].pod_gateway;
    let pod = From::Pod(lab.pod("n3-a"));

    let flag = format!("--nodeport-addresses={node1}/32");
    let node1_proxy = Reconfigured::new(lab, &[&flag]);
    let (_, np) = fresh_service(lab, "s23-a", json!({ "type": "NodePort" }), &eps).await;
    with_settle(
        lab,
        startup(lab),
        reaches_exactly(lab, From::Client, addr(node1, np), 10, &eps),
    )
    .await
    .map_err(|e| format!("{flag}: node 1's underlay address: {e}"))?;
    lab.all_fail(pod, Proto::Tcp, addr(gw, np), 3, &[])
        .await
        .map_err(|e| format!("{flag}: node 1's pod gateway must not accept: {e}"))?;

    node1_proxy.set(&["--nodeport-addresses=10.244.0.0/16"]);
    let (_, np) = fresh_service(lab, "s23-b", json!({ "type": "NodePort" }), &eps).await;
    with_settle(
        lab,
        startup(lab),
        reaches_exactly(lab, pod, addr(gw, np), 10, &eps),
    )
    .await
    .map_err(|e| format!("--nodeport-addresses=10.244.0.0/16: node 1's pod gateway: {e}"))?;
    reaches_exactly(lab, From::Client, addr(node2, np), 10, &eps)
        .await
        .map_err(|e| format!("control, node 2 with the lab's flags: {e}"))?;
    lab.all_fail(From::Client, Proto::Tcp, addr(node1, np), 3, &[])
        .await
        .map_err(|e| {
            format!(
                "--nodeport-addresses=10.244.0.0/16: node 1's underlay address must not accept: {e}"
            )
        })
}

// ---------------------------------------------------------------------------------------------
// Scenario 24

/// One configuration of node 1's proxy and who must be SNATed under it.
struct SnatCase {
    name: &'static str,
    flags: &'static [&'static str],
    /// Pods on node 1 whose source must be kept.
    kept: &'static [&'static str],
    /// Pods on node 1 whose source must become node 1's address.
    snat: &'static [&'static str],
}

/// Upstream: traffic to a ClusterIP is masqueraded when it does not come from a local pod (as
/// the detect-local mode defines local), or always with `--masquerade-all`. The external client
/// (which does not count as local in any mode) always gets SNAT.
const SNAT_CASES: &[SnatCase] = &[
    SnatCase {
        name: "ClusterCIDR (the lab's --cluster-cidr)",
        flags: &[],
        kept: &["n1-a", "n1-b"],
        snat: &[],
    },
    SnatCase {
        name: "--masquerade-all",
        flags: &["--masquerade-all"],
        kept: &[],
        snat: &["n1-a", "n1-b"],
    },
    SnatCase {
        name: "InterfaceNamePrefix vp-",
        flags: &[
            "--detect-local-mode=InterfaceNamePrefix",
            "--pod-interface-name-prefix=vp-",
        ],
        kept: &["n1-a", "n1-b"],
        snat: &[],
    },
    SnatCase {
        name: "BridgeInterface vp-n1-a",
        flags: &[
            "--detect-local-mode=BridgeInterface",
            "--pod-bridge-interface=vp-n1-a",
        ],
        kept: &["n1-a"],
        snat: &["n1-b"],
    },
    SnatCase {
        name: "NodeCIDR (node 1's podCIDR 10.244.1.0/24)",
        flags: &["--detect-local-mode=NodeCIDR"],
        kept: &["n1-a", "n1-b"],
        snat: &[],
    },
];

/// Removes the client's route to the service CIDR when dropped.
struct ClientRoute<'a>(&'a Lab);

impl Drop for ClientRoute<'_> {
    fn drop(&mut self) {
        let _ = self
            .0
            .topo
            .client
            .try_output("ip", &["route", "del", SERVICE_CIDR]);
    }
}

/// Where the source-NAT choices mean nothing.
pub fn snat_modes_expect(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Ours { mode: Mode::Ebpf } => Expect::NotApplicable(
            "the eBPF mode's socket programs rewrite a connection's destination at connect() \
             and never its source: there is no masquerade for masqueradeAll or detect-local to \
             decide (the external client's part needs the tc programs, not built yet)",
        ),
        Proxy::Ours {
            mode: Mode::Userspace,
        } => Expect::NotApplicable(
            "userspace mode relays every connection from the node's own address: there is no \
             masquerade for masqueradeAll or detect-local to decide",
        ),
        _ => Expect::Pass,
    }
}

/// Scenario 24: for each of [`SNAT_CASES`], node 1's proxy is restarted with its flags and a
/// new Service (endpoint n2-a, on another node) is reached from node 1's pods and from the
/// external client (which routes the service CIDR via node 1 here): the endpoint sees each pod's
/// own address or node 1's, as the case says, and node 1's for the client.
pub async fn snat_modes(lab: &Lab) -> Result<(), String> {
    // NodeCIDR reads the Node's podCIDR, which the lab's Nodes do not otherwise have.
    let nodes: Api<Node> = Api::all(lab.cluster.ns.client.clone());
    // Both families, as a dual-stack node's IPAM would give it.
    let (pod_cidr, pod_cidr6) = (lab.topo.nodes[0].pod_cidr(), lab.topo.nodes[0].pod_cidr6());
    let spec = json!({ "spec": { "podCIDR": pod_cidr, "podCIDRs": [pod_cidr, pod_cidr6] } });
    nodes
        .patch(
            &lab.cluster.node_names[0],
            &PatchParams::default(),
            &Patch::Merge(&spec),
        )
        .await
        .map_err(|e| format!("set node 1's podCIDR: {e}"))?;
    let router = lab.topo.nodes[0].ip.to_string();
    lab.topo
        .client
        .try_output("ip", &["route", "replace", SERVICE_CIDR, "via", &router])
        .map_err(|e| format!("client route to the service CIDR: {e}"))?;
    let _route = ClientRoute(lab);
    let node1 = IpAddr::V4(lab.topo.nodes[0].ip);
    let mut reconfigured: Option<Reconfigured<'_>> = None;
    for (k, case) in SNAT_CASES.iter().enumerate() {
        match &reconfigured {
            None if case.flags.is_empty() => {}
            None => reconfigured = Some(Reconfigured::new(lab, case.flags)),
            Some(r) => r.set(case.flags),
        }
        let name = format!("s24-{k}");
        let (ip, _) = fresh_service(lab, &name, json!({}), &["n2-a"]).await;
        let vip = addr(ip, 80);
        let mut want: Vec<(From<'_>, IpAddr)> = Vec::new();
        for pod in case.kept {
            let p = lab.pod(pod);
            want.push((From::Pod(p), IpAddr::V4(p.ip)));
        }
        for pod in case.snat {
            want.push((From::Pod(lab.pod(pod)), node1));
        }
        want.push((From::Client, node1));
        for (from, src) in want {
            with_settle(lab, startup(lab), source_seen(lab, from, vip, src))
                .await
                .map_err(|e| format!("{}: {e}", case.name))?;
        }
    }
    Ok(())
}

/// Waits until every connection from `from` to `vip` reaches n2-a with source address `src`.
async fn source_seen(
    lab: &Lab,
    from: From<'_>,
    vip: SocketAddr,
    src: IpAddr,
) -> Result<(), String> {
    let what = format!("{from} → {vip} seen from {src}");
    lab.eventually(&what, || async {
        let r = lab.all_reach(from, Proto::Tcp, vip, 3).await?;
        if r.iter().all(|r| r.pod == "n2-a" && r.src.ip() == src) {
            Ok(())
        } else {
            let seen: Vec<String> = r
                .iter()
                .map(|r| format!("{} saw {}", r.pod, r.src.ip()))
                .collect();
            Err(format!("{seen:?}"))
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Scenario 33

/// Who serves NodePorts on the node's loopback address, and how.
pub fn node_port_localhost_expect(proxy: Proxy) -> Expect {
    match proxy {
        // iptables mode DNATs them by default (route_localnet), in both proxies.
        Proxy::Upstream {
            mode: Mode::Iptables,
        }
        | Proxy::Ours {
            mode: Mode::Iptables,
        } => Expect::Pass,
        // Ours relays them with --nodeport-localhost.
        Proxy::Ours {
            mode: Mode::Nftables | Mode::Userspace,
        } => Expect::Pass,
        // The eBPF mode's connect programs balance NodePorts on loopback by default.
        Proxy::Ours { mode: Mode::Ebpf } => Expect::Pass,
        Proxy::Upstream {
            mode: Mode::Nftables,
        } => Expect::Fail("upstream's nftables mode does not serve NodePorts on localhost"),
        Proxy::Ours { mode: Mode::Ipvs } => Expect::Fail(
            "ipvs mode leaves loopback out of its NodePort addresses, as upstream's does",
        ),
        // Read from upstream's code, not seen in this lab yet: reported, not gating.
        Proxy::Upstream { mode: Mode::Ipvs } => Expect::Either(
            "upstream's ipvs mode leaves loopback out of its NodePort addresses (its code; \
             not yet seen in the UML lab)",
        ),
        Proxy::Upstream {
            mode: Mode::Userspace,
        } => Expect::NotApplicable(UPSTREAM_HAS_NO_USERSPACE),
        Proxy::Upstream { mode: Mode::Ebpf } => Expect::NotApplicable(UPSTREAM_HAS_NO_EBPF),
    }
}

/// Scenario 33: a process on node 1 reaches a NodePort Service (endpoint n2-a) at
/// 127.0.0.1:nodePort, over TCP and UDP. Ours in nftables and userspace mode is restarted
/// with `--nodeport-localhost`, which relays them; iptables mode serves them by default.
pub async fn node_port_localhost(lab: &Lab) -> Result<(), String> {
    let relays_them = matches!(
        lab.proxy,
        Proxy::Ours {
            mode: Mode::Nftables | Mode::Userspace
        }
    );
    let _node1 = relays_them.then(|| Reconfigured::new(lab, &["--nodeport-localhost"]));
    let svc = lab
        .cluster
        .apply_service(json!({ "metadata": { "name": "s33" }, "spec": {
            "type": "NodePort",
            "ports": [
                { "name": "t", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                { "name": "u", "port": 80, "targetPort": 8080, "protocol": "UDP" },
            ],
        }}))
        .await;
    let p = [("t", 8080, Proto::Tcp), ("u", 8080, Proto::Udp)];
    lab.cluster
        .apply_slice("s33-x", "s33", &p, &lab.endpoints(&["n2-a"]))
        .await;
    let loopback = IpAddr::from([127, 0, 0, 1]);
    for (index, proto) in [(0, Proto::Tcp), (1, Proto::Udp)] {
        let target = addr(loopback, node_port(&svc, index));
        let what = format!("{proto:?} from node 1 to {target} reaches n2-a");
        with_settle(
            lab,
            startup(lab),
            lab.eventually(&what, || async {
                let replies = lab.all_reach(From::Node(0), proto, target, 3).await?;
                match replies.iter().find(|r| r.pod != "n2-a") {
                    Some(r) => Err(format!("{} answered", r.pod)),
                    None => Ok(()),
                }
            }),
        )
        .await?;
    }
    Ok(())
}
