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
use std::net::IpAddr;

use serde_json::Value;

mod packets;

pub use packets::{Family, From, PACKETS, Packet, To};

use super::{cluster_ip, node_port};
use crate::lab::topology::{CLIENT_IP, OTHER_CLIENT_IP};
use crate::lab::{Lab, Proto, Proxy};

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
            let answer = lab.explain(p.node, &["--to", &to, "--from", &from]).await?;
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

impl Lab {
    /// Runs `kube-proxy-rs explain` in node `node`'s namespace with the proxy's flags (its
    /// kubeconfig, its mode's flags, the eBPF mode's pin root), then `args`, then
    /// `--output json`, and parses its answer.
    pub async fn explain(&self, node: usize, args: &[&str]) -> Result<Value, String> {
        let ns = &self.topo.nodes[node].ns;
        let mut cmd = ns.command(crate::layout::kube_proxy_rs_binary());
        cmd.arg("explain")
            .arg(format!(
                "--kubeconfig={}",
                self.env.kube_proxy_kubeconfig.display()
            ))
            .args(self.proxy.lab_flags(&self.cluster.node_names[node]))
            // eBPF mode: the node's pin root, where its proxy's maps are.
            .args(
                self.socket_lb
                    .as_ref()
                    .map(|s| s.proxy_flags(node))
                    .unwrap_or_default(),
            )
            .args(args)
            .args(["--output", "json"]);
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
    // The nftables mode drops a ClusterIP no Service of ours holds (a deleted Service's,
    // another proxy's): an address of the cluster's Service CIDRs, as upstream's nftables
    // mode drops it; the other modes leave it to the node's routes.
    if lab.proxy.mode() == crate::lab::Mode::Nftables
        && p.verdict == "untouched"
        && matches!(p.to, To::ClusterIp(..))
    {
        return Packet {
            verdict: "dropped",
            reason: "in the Service CIDR",
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
