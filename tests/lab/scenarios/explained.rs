//! `explain` over the lab: once a scenario has passed, the main packet of the scenario is
//! explained on a live node by our binary (`kube-proxy-rs explain`, in the node's namespace,
//! with the proxy's flags, listing the cluster from the API server and reading the kernel the
//! proxy programmed), and the answer must name the right Service port, the right outcome and
//! endpoints, the right masquerade and the right reason, with no drift between the kernel and
//! the plan. One table of expectations, [`PACKETS`], for every mode of ours: the modes differ
//! in their rules, not in what a packet meets.
//!
//! In every mode it traces what the kernel holds: iptables mode reads our chains back with
//! `iptables-save` of the flavour the proxy chose, the eBPF mode its pinned maps. Where a mode
//! differs by design, the row is read through it ([`expected`]): the relay (userspace) and
//! socket load balancing (ebpf) have one reason for every source. Packets from outside the
//! node meet the eBPF mode's tc programs, which answer as the table says.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use serde_json::Value;

use super::{cluster_ip, node_port};
use crate::lab::topology::{CLIENT_IP, OTHER_CLIENT_IP};
use crate::lab::{Lab, Proto, Proxy};

/// Where the packet goes: one of the Service's frontends.
#[derive(Clone, Copy, Debug)]
pub enum To {
    /// The Service's ClusterIP of the family, at `port`.
    ClusterIp(Family, u16, Proto),
    /// Node `node`'s IPv4 underlay address, at the node port of the Service's `index`th port.
    NodePort { node: usize, index: usize },
    /// A fixed address (an externalIP, a LoadBalancer ingress IP) at `port`.
    Address(Ipv4Addr, u16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// Where it comes from.
#[derive(Clone, Copy, Debug)]
pub enum From {
    /// A lab pod, from its address of the destination's family.
    Pod(&'static str),
    /// The node itself.
    Node,
    /// The external client's address.
    Client,
    /// The external client's other address (outside `loadBalancerSourceRanges`).
    OtherClient,
}

/// One scenario's main packet and what `explain` must say of it.
#[derive(Clone, Copy, Debug)]
pub struct Packet {
    pub scenario: u8,
    /// The node (index) whose kernel the packet meets.
    pub node: usize,
    /// The lab Service whose address `to` names.
    pub service: &'static str,
    pub to: To,
    pub from: From,
    /// The Service port `explain` names (`NAME:PORT` in the lab's namespace); `None`: no
    /// Service port has this frontend.
    pub port: Option<&'static str>,
    /// `forwarded`, `rejected`, `dropped` or `untouched`.
    pub verdict: &'static str,
    /// The pods a new connection may reach (when forwarded).
    pub endpoints: &'static [&'static str],
    /// Whether the source is rewritten (checked when forwarded).
    pub masquerade: bool,
    /// Words one of the reasons must contain.
    pub reason: &'static str,
}

const fn packet(scenario: u8, service: &'static str, to: To, from: From) -> Packet {
    Packet {
        scenario,
        node: 0,
        service,
        to,
        from,
        port: None,
        verdict: "forwarded",
        endpoints: &[],
        masquerade: false,
        reason: "",
    }
}

const fn v4(port: u16) -> To {
    To::ClusterIp(Family::V4, port, Proto::Tcp)
}

/// The main packets of the lab's scenarios, as node 1 (index 0) sees them unless `node` says
/// otherwise. Scenarios whose point is timing or state over time (18, 19, 20, 25, 29) are
/// explained in their end state.
pub const PACKETS: &[Packet] = &[
    Packet {
        port: Some("s01:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "internalTrafficPolicy Cluster: every usable endpoint (3)",
        ..packet(1, "s01", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s02:http"),
        endpoints: &["n1-a", "n2-a"],
        reason: "every usable endpoint (2)",
        ..packet(2, "s02", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s03:dns-udp"),
        endpoints: &["n1-a", "n2-a"],
        reason: "every usable endpoint (2)",
        ..packet(
            3,
            "s03",
            To::ClusterIp(Family::V4, 53, Proto::Udp),
            From::Pod("n1-b"),
        )
    },
    Packet {
        port: Some("s04:p"),
        endpoints: &["n1-a", "n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(4, "s04", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s05-vip:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: every usable endpoint (1)",
        ..packet(
            5,
            "s05-vip",
            To::Address(Ipv4Addr::new(198, 51, 100, 10), 80),
            From::Client,
        )
    },
    // ipMode Proxy: the load balancer's address is not the node's to capture.
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(
            5,
            "s05-proxy",
            To::Address(Ipv4Addr::new(198, 51, 100, 11), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s06:p"),
        endpoints: &["n3-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: every usable endpoint (1)",
        ..packet(
            6,
            "s06",
            To::Address(Ipv4Addr::new(203, 0, 113, 10), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s07:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "every usable endpoint (3)",
        ..packet(7, "s07", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s08:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(8, "s08", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s09:p"),
        verdict: "dropped",
        reason: "externalTrafficPolicy Local and no endpoint of",
        ..packet(9, "s09", To::NodePort { node: 0, index: 0 }, From::Client)
    },
    Packet {
        node: 1,
        port: Some("s09:p"),
        endpoints: &["n2-a"],
        reason: "externalTrafficPolicy Local: the client's address is kept",
        ..packet(9, "s09", To::NodePort { node: 1, index: 0 }, From::Client)
    },
    Packet {
        port: Some("s10:p"),
        endpoints: &["n1-a"],
        reason: "internalTrafficPolicy Local: only the endpoints on this node (1)",
        ..packet(10, "s10", v4(80), From::Pod("n1-b"))
    },
    Packet {
        node: 2,
        port: Some("s10:p"),
        verdict: "dropped",
        reason: "internalTrafficPolicy Local and no endpoint of",
        ..packet(10, "s10", v4(80), From::Pod("n3-b"))
    },
    Packet {
        port: Some("s11:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(11, "s11", v4(80), From::Pod("n1-a"))
    },
    Packet {
        port: Some("s11:u"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(
            11,
            "s11",
            To::ClusterIp(Family::V4, 80, Proto::Udp),
            From::Pod("n1-a"),
        )
    },
    Packet {
        port: Some("s12:p"),
        endpoints: &["n2-a"],
        reason: "terminating fallback",
        ..packet(12, "s12", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s13:p"),
        endpoints: &["n1-a"],
        reason: "topology: only endpoints hinted for this node's zone",
        ..packet(13, "s13", v4(80), From::Pod("n1-b"))
    },
    Packet {
        node: 1,
        port: Some("s14:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "hairpin",
        ..packet(14, "s14", v4(80), From::Pod("n2-a"))
    },
    Packet {
        port: Some("s15:p"),
        endpoints: &["n1-a", "n3-a"],
        reason: "every usable endpoint (2)",
        ..packet(15, "s15", v4(80), From::Pod("n1-b"))
    },
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(16, "s16", v4(80), From::Pod("n1-a"))
    },
    Packet {
        port: Some("s17:p"),
        verdict: "dropped",
        reason: "is outside the loadBalancerSourceRanges",
        ..packet(
            17,
            "s17",
            To::Address(Ipv4Addr::new(198, 51, 100, 12), 80),
            From::OtherClient,
        )
    },
    Packet {
        port: Some("s17:p"),
        endpoints: &["n2-a"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster",
        ..packet(
            17,
            "s17",
            To::Address(Ipv4Addr::new(198, 51, 100, 12), 80),
            From::Client,
        )
    },
    Packet {
        port: Some("s18:u"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(
            18,
            "s18",
            To::ClusterIp(Family::V4, 53, Proto::Udp),
            From::Pod("n1-b"),
        )
    },
    // After the restart the scenario leaves n3-a alone in the slice.
    Packet {
        port: Some("s19:p"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(19, "s19", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s29:one"),
        endpoints: &["n3-a"],
        reason: "every usable endpoint (1)",
        ..packet(29, "s29", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s21-dual:p"),
        endpoints: &["n2-a", "n3-b"],
        reason: "every usable endpoint (2)",
        ..packet(
            21,
            "s21-dual",
            To::ClusterIp(Family::V6, 80, Proto::Tcp),
            From::Pod("n1-b"),
        )
    },
    Packet {
        port: Some("s21-none:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(
            21,
            "s21-none",
            To::ClusterIp(Family::V6, 80, Proto::Tcp),
            From::Pod("n1-a"),
        )
    },
    // Labelled for another proxy: not ours to program.
    Packet {
        verdict: "untouched",
        reason: "is no frontend of any Service port on this node",
        ..packet(22, "s22-other", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s25:p"),
        verdict: "rejected",
        reason: "has no usable endpoint",
        ..packet(25, "s25", v4(80), From::Node)
    },
    Packet {
        port: Some("s26:p"),
        endpoints: &["n1-a", "n2-a", "n3-a"],
        reason: "every usable endpoint (3)",
        ..packet(26, "s26", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s20:p"),
        endpoints: &["n2-a"],
        reason: "every usable endpoint (1)",
        ..packet(20, "s20", v4(80), From::Pod("n1-b"))
    },
    Packet {
        port: Some("s23-a:p"),
        endpoints: &["n2-a", "n2-b"],
        masquerade: true,
        reason: "externalTrafficPolicy Cluster: the source is rewritten",
        ..packet(
            23,
            "s23-a",
            To::NodePort { node: 0, index: 0 },
            From::Client,
        )
    },
    // The lab's detect-local mode (its cluster CIDR): a pod of node 1 keeps its address.
    Packet {
        port: Some("s24-0:p"),
        endpoints: &["n2-a"],
        reason: "not masqueraded: the endpoint sees the client's address",
        ..packet(24, "s24-0", v4(80), From::Pod("n1-a"))
    },
];

/// Explains every packet of scenario `id` on the live lab (ours only: `explain` reads our
/// rules), each until it holds or the lab's settle time is over (a proxy just restarted by
/// the scenario may still be syncing). `Ok` at once for upstream's proxies.
pub async fn check(lab: &Lab, id: u8) -> Result<(), String> {
    if matches!(lab.proxy, Proxy::Upstream { .. }) {
        return Ok(());
    }
    for p in PACKETS.iter().filter(|p| p.scenario == id) {
        let (to, from) = resolve(lab, p)?;
        let what = format!("explain --to {to} --from {from} on node {}", p.node + 1);
        lab.eventually(&what, || async {
            let answer = ask(lab, p.node, &to, &from).await?;
            judge(lab, p, &answer)
        })
        .await?;
    }
    Ok(())
}

/// `--to` and `--from` of `p` on this lab.
fn resolve(lab: &Lab, p: &Packet) -> Result<(String, String), String> {
    let svc = lab
        .cluster
        .service(p.service)
        .ok_or_else(|| format!("the scenario wrote no Service {}", p.service))?;
    let family = match p.to {
        To::ClusterIp(f, ..) => f,
        _ => Family::V4,
    };
    let to = match p.to {
        To::ClusterIp(Family::V4, port, proto) => {
            format!("{}:{port}{}", cluster_ip(&svc), suffix(proto))
        }
        To::ClusterIp(Family::V6, port, proto) => {
            let ip = svc
                .spec
                .as_ref()
                .and_then(|s| s.cluster_ips.as_ref())
                .and_then(|ips| ips.iter().find(|ip| ip.contains(':')))
                .ok_or_else(|| format!("{} has no IPv6 ClusterIP", p.service))?;
            format!("[{ip}]:{port}{}", suffix(proto))
        }
        To::NodePort { node, index } => {
            format!("{}:{}", lab.topo.nodes[node].ip, node_port(&svc, index))
        }
        To::Address(ip, port) => format!("{ip}:{port}"),
    };
    let from = match p.from {
        From::Pod(name) if family == Family::V6 => lab.pod(name).ip6.to_string(),
        From::Pod(name) => lab.pod(name).ip.to_string(),
        From::Node => "node".to_owned(),
        From::Client => CLIENT_IP.to_string(),
        From::OtherClient => OTHER_CLIENT_IP.to_string(),
    };
    Ok((to, from))
}

fn suffix(proto: Proto) -> &'static str {
    match proto {
        Proto::Udp => "/udp",
        _ => "",
    }
}

/// Runs `kube-proxy-rs explain --output json` in node `node`'s namespace with the proxy's
/// flags, and parses its answer.
async fn ask(lab: &Lab, node: usize, to: &str, from: &str) -> Result<Value, String> {
    let ns = &lab.topo.nodes[node].ns;
    let mut cmd = ns.command(env!("CARGO_BIN_EXE_kube-proxy-rs"));
    cmd.arg("explain")
        .arg(format!(
            "--kubeconfig={}",
            lab.env.kube_proxy_kubeconfig.display()
        ))
        .args(lab.proxy.lab_flags(&lab.cluster.node_names[node]))
        // eBPF mode: the node's pin root, where its proxy's maps are.
        .args(
            lab.socket_lb
                .as_ref()
                .map(|s| s.proxy_flags(node))
                .unwrap_or_default(),
        )
        .args(["--to", to, "--from", from, "--output", "json"]);
    let out = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("running explain: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "explain exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "explain's JSON: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Whether `answer` says of `p` what the table says (read through the mode: [`expected`]).
fn judge(lab: &Lab, p: &Packet, answer: &Value) -> Result<(), String> {
    let p = &expected(lab, p);
    let brief = || serde_json::to_string(answer).unwrap_or_default();
    let rules_from = "kernel";
    if answer["rulesFrom"] != rules_from || answer["mode"] != lab.proxy.mode().as_str() {
        return Err(format!(
            "wanted {} rules from the {rules_from}: {}",
            lab.proxy.mode().as_str(),
            brief()
        ));
    }
    let port = answer["servicePort"]["name"].as_str();
    let want_port = p.port.map(|n| format!("{}/{n}", lab.cluster.ns.name));
    if port != want_port.as_deref() {
        return Err(format!(
            "named Service port {port:?}, wanted {want_port:?}: {}",
            brief()
        ));
    }
    let outcome = &answer["outcome"];
    if outcome["verdict"] != p.verdict {
        return Err(format!(
            "verdict {}, wanted {}: {}",
            outcome["verdict"],
            p.verdict,
            brief()
        ));
    }
    if p.verdict == "forwarded" {
        let reached: BTreeSet<IpAddr> = outcome["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["endpoint"].as_str()?.parse::<std::net::SocketAddr>().ok())
            .map(|a| a.ip())
            .collect();
        let v6 = matches!(p.to, To::ClusterIp(Family::V6, ..));
        let want: BTreeSet<IpAddr> = p
            .endpoints
            .iter()
            .map(|n| {
                let pod = lab.pod(n);
                if v6 {
                    IpAddr::V6(pod.ip6)
                } else {
                    IpAddr::V4(pod.ip)
                }
            })
            .collect();
        if reached != want {
            return Err(format!(
                "reaches {reached:?}, wanted {want:?} ({:?}): {}",
                p.endpoints,
                brief()
            ));
        }
        if outcome["masquerade"] != p.masquerade {
            return Err(format!(
                "masquerade {}, wanted {}: {}",
                outcome["masquerade"],
                p.masquerade,
                brief()
            ));
        }
    }
    let reasons: Vec<&str> = answer["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let want_reason = p.reason;
    if !reasons.iter().any(|r| r.contains(want_reason)) {
        return Err(format!(
            "no reason says {want_reason:?}: {reasons:?}: {}",
            brief()
        ));
    }
    let drift = answer["drift"].as_array().map_or(0, Vec::len);
    if drift > 0 {
        return Err(format!(
            "the kernel drifted from the plan: {}",
            answer["drift"]
        ));
    }
    Ok(())
}

/// Words of [`Packet::reason`] that say why the source is (not) rewritten.
const SOURCE_REASONS: [&str; 3] = ["the source is rewritten", "hairpin", "the client's address"];

/// Words of the eBPF mode's reason for every source: the socket is the backend's, nothing is
/// rewritten.
const SOCKET_REASON: &str = "no per-packet NAT";

/// The row as the lab's mode must answer it: the table's, except
/// - where the proxy relays (userspace): the source is always the node's, for one reason;
/// - socket load balancing (ebpf): nothing is ever rewritten (no masquerade, one reason for
///   every source); a packet from outside the node meets the tc programs, which rewrite the
///   source under externalTrafficPolicy Cluster and keep it under Local, as the table says.
fn expected(lab: &Lab, p: &Packet) -> Packet {
    let about_source = SOURCE_REASONS.iter().any(|r| p.reason.contains(r));
    let forwarded = p.verdict == "forwarded";
    if lab.relays() {
        return Packet {
            masquerade: true,
            reason: if forwarded && about_source {
                "relayed by the proxy"
            } else {
                p.reason
            },
            ..*p
        };
    }
    if lab.proxy.mode() == crate::lab::Mode::Ebpf {
        if matches!(p.from, From::Client | From::OtherClient) {
            return *p;
        }
        return Packet {
            masquerade: false,
            reason: if forwarded && about_source {
                SOCKET_REASON
            } else {
                p.reason
            },
            ..*p
        };
    }
    *p
}

/// Every table row names a scenario of the suite: a renumbered scenario cannot leave its
/// rows unchecked.
pub fn rows_name_scenarios(ids: &[u8]) -> Result<(), String> {
    let orphans: Vec<u8> = PACKETS
        .iter()
        .map(|p| p.scenario)
        .filter(|id| !ids.contains(id))
        .collect();
    if orphans.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "explain rows for scenarios not in the suite: {orphans:?}"
        ))
    }
}
