//! Scenarios of the eBPF mode alone: what balancing at connect() means for the
//! node, beyond reaching the endpoints every mode reaches; and the frontends that the shared
//! scenarios reach only from outside first (where the eBPF mode needs tc), from inside.

use serde_json::json;

use super::report::Expect;
use super::{cluster_ip, node_port, reaches_exactly, service};
use crate::lab::client::{From, addr};
use crate::lab::{Lab, Mode, Proto, Proxy};
use crate::testenv::NetNs;

/// Applies to ours in eBPF mode only.
pub fn ebpf_only(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Ours { mode: Mode::Ebpf } => Expect::Pass,
        _ => Expect::NotApplicable(
            "socket load balancing (eBPF mode) only: every other mode translates a ClusterIP \
             connection with NAT in the node's conntrack, or relays it, by design",
        ),
    }
}

/// Applies to ours in eBPF mode only: the part of a shared scenario (21; 4-6) sent from inside
/// the nodes, which that scenario already covers in every other mode.
pub fn inside_part_for_ebpf(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Ours { mode: Mode::Ebpf } => Expect::Pass,
        _ => Expect::NotApplicable(
            "the part of scenario 21 (or 4-6) sent from inside the nodes, which that scenario \
             covers in this mode; run apart only for the eBPF mode, which fails the shared \
             scenario at its traffic from outside (tc not built yet)",
        ),
    }
}

/// A table of ours in a node's namespace while it lives: a rule that matches on conntrack
/// state, which makes the kernel track connections in that namespace (a namespace without
/// such a rule tracks nothing, and an empty conntrack table would prove nothing).
struct Tracking<'a> {
    ns: &'a NetNs,
}

const TRACKING_TABLE: &str = "kprs-lab-tracking";

impl<'a> Tracking<'a> {
    fn new(ns: &'a NetNs) -> Result<Tracking<'a>, String> {
        let script = format!(
            "table inet {TRACKING_TABLE} {{\n chain forward {{\n  type filter hook forward \
             priority 0;\n  ct state new counter\n }}\n}}\n"
        );
        ns.try_output_fed("nft", &["-f", "-"], &script)
            .map_err(|e| format!("nft in node 1: {e}"))?;
        Ok(Tracking { ns })
    }
}

impl Drop for Tracking<'_> {
    fn drop(&mut self) {
        let _ = self
            .ns
            .try_output("nft", &["delete", "table", "inet", TRACKING_TABLE]);
    }
}

/// The conntrack entries of `ns` matching `filter` (`conntrack -L` arguments), one a line.
fn conntrack(ns: &NetNs, filter: &[&str]) -> Result<Vec<String>, String> {
    let mut args = vec!["-L", "-p", "tcp"];
    args.extend_from_slice(filter);
    let out = ns
        .try_output("conntrack", &args)
        .map_err(|e| format!("conntrack {}: {e}", args.join(" ")))?;
    Ok(out
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// Scenario 35: a pod's connections to a ClusterIP (endpoint on another node) leave no
/// conntrack entry for the ClusterIP in its node's namespace, which does track them: the
/// socket was built against the endpoint at connect(), so the first SYN already carried the
/// endpoint's address, and the node forwarded it untranslated.
pub async fn no_conntrack_for_cluster_ip(lab: &Lab) -> Result<(), String> {
    let node1 = &lab.topo.nodes[0].ns;
    let svc = lab
        .cluster
        .apply_service(service("s35", 80, 8080, json!({})))
        .await;
    lab.cluster
        .apply_slice(
            "s35-x",
            "s35",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&["n2-a"]),
        )
        .await;
    let vip = addr(cluster_ip(&svc), 80);
    let client = lab.pod("n1-b");
    reaches_exactly(lab, From::Pod(client), vip, 5, &["n2-a"]).await?;
    // Programmed: now track, forget whatever attempts before the programming left (they
    // went to the ClusterIP untranslated), and connect again.
    let _tracking = Tracking::new(node1)?;
    let vip_ip = vip.ip().to_string();
    let _ = node1.try_output("conntrack", &["-D", "-d", &vip_ip]);
    lab.all_reach(From::Pod(client), Proto::Tcp, vip, 5).await?;

    let translated = conntrack(node1, &["-d", &vip_ip])?;
    if !translated.is_empty() {
        return Err(format!(
            "node 1 has conntrack entries for the ClusterIP {vip_ip}: {translated:?}"
        ));
    }
    let (src, endpoint) = (client.ip.to_string(), lab.pod("n2-a").ip.to_string());
    let direct = conntrack(node1, &["-s", &src, "-d", &endpoint, "--dport", "8080"])?;
    if direct.is_empty() {
        return Err(format!(
            "node 1 tracked no connection from {src} to {endpoint}:8080, so no entry for the \
             ClusterIP proves nothing"
        ));
    }
    Ok(())
}

/// The externalIP and LoadBalancer ingress IPs of scenario 36 (ipMode VIP, then Proxy).
const EXTERNAL_IP: [u8; 4] = [203, 0, 113, 36];
const LB_VIP: [u8; 4] = [198, 51, 100, 36];
const LB_PROXY: [u8; 4] = [198, 51, 100, 37];

/// Scenario 36: a LoadBalancer Service with an externalIP (endpoints on nodes 1 and 2) is
/// reached from a pod on node 3 and from node 3 itself on each frontend its programs own: the
/// NodePort on node 3's underlay address and on its pod gateway (`nodePortAddresses` is every
/// local address in this mode), the externalIP and the ingress IP of ipMode VIP; an ingress
/// IP of ipMode Proxy is not captured. (Scenarios 4-6 reach these first from the external
/// client, and a NodePort on another node's address is a packet arriving from outside there:
/// both need tc.)
pub async fn external_frontends_from_inside(lab: &Lab) -> Result<(), String> {
    let eps = ["n1-a", "n2-a"];
    let p = [("p", 8080, Proto::Tcp)];
    let lb = json!({
        "type": "LoadBalancer",
        "externalIPs": [std::net::Ipv4Addr::from(EXTERNAL_IP).to_string()],
    });
    let svc = lab
        .cluster
        .apply_service(service("s36", 80, 8080, lb))
        .await;
    lab.cluster
        .apply_slice("s36-x", "s36", &p, &lab.endpoints(&eps))
        .await;
    lab.cluster
        .set_lb_ingress(
            "s36",
            json!([{ "ip": std::net::Ipv4Addr::from(LB_VIP).to_string(), "ipMode": "VIP" }]),
        )
        .await;
    let proxied = json!({ "type": "LoadBalancer" });
    lab.cluster
        .apply_service(service("s36-proxy", 80, 8080, proxied))
        .await;
    lab.cluster
        .apply_slice("s36-proxy-x", "s36-proxy", &p, &lab.endpoints(&eps))
        .await;
    lab.cluster
        .set_lb_ingress(
            "s36-proxy",
            json!([{ "ip": std::net::Ipv4Addr::from(LB_PROXY).to_string(), "ipMode": "Proxy" }]),
        )
        .await;

    let node3 = &lab.topo.nodes[2];
    let np = node_port(&svc, 0);
    let frontends = [
        addr(node3.ip, np),
        addr(node3.pod_gateway, np),
        addr(EXTERNAL_IP, 80),
        addr(LB_VIP, 80),
    ];
    for from in [From::Pod(lab.pod("n3-a")), From::Node(2)] {
        for target in frontends {
            reaches_exactly(lab, from, target, 20, &eps).await?;
        }
    }
    lab.all_fail(
        From::Pod(lab.pod("n3-a")),
        Proto::Tcp,
        addr(LB_PROXY, 80),
        2,
        &[],
    )
    .await
}
