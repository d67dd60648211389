//! Scenarios of a proxy that carries the connection itself (userspace mode), and one
//! every mode must pass: an endpoint that refuses is skipped and the client still connects;
//! an endpoint that does not answer within the dial timeout is skipped; a long-lived
//! connection survives a sync that does not touch its endpoint; a relay listener's own port is
//! reached only through a Service's frontends.
//!
//! The broken endpoints are pods' addresses at ports of their own (in a slice of their own,
//! the same service port), so the pods stay usable for every other scenario: nothing listens
//! on the refusing one, and the silent one's pod drops its SYNs (a table of ours in that pod's
//! namespace, removed afterwards).

use std::time::Duration;

use serde_json::json;

use super::report::Expect;
use super::session::{self, SessionService};
use super::{cluster_ip, reaches_exactly, service};
use crate::lab::client::{From, addr, request};
use crate::lab::topology::CLIENT_IP;
use crate::lab::{Lab, Mode, Proto, Proxy};
use crate::testenv::NetNs;

/// Where a proxy cannot try a second endpoint: a NAT rule (or a connect() program) sends a
/// connection to one.
pub fn relay_only(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Ours {
            mode: Mode::Userspace,
        } => Expect::Pass,
        _ => Expect::NotApplicable(
            "a NAT rule (or in eBPF mode a connect() program) sends each connection to one \
             endpoint and cannot try another: only a proxy that carries the connection \
             (userspace mode) can",
        ),
    }
}

/// Port of n3-a where nothing listens (scenario 30).
const REFUSING_PORT: u16 = 8098;
/// Port of n3-a whose SYNs its pod drops (scenario 31).
const SILENT_PORT: u16 = 8097;

/// Scenarios 30 and 31: a Service on port 80 whose endpoint n2-a (at 8080, its echo server)
/// answers; once node 1's proxy relays to it, a second slice adds n3-a at `broken`, where no
/// connection can be made. From then on every connection from n1-b must be answered by n2-a,
/// at once: each probe is judged on its own (no retrying until it holds), until node 1's
/// relay has counted a failed dial, which shows the broken endpoint was in its rotation.
async fn broken_endpoint_is_skipped(lab: &Lab, name: &str, broken: u16) -> Result<(), String> {
    let svc = lab
        .cluster
        .apply_service(service(name, 80, 8080, json!({})))
        .await;
    let good = [("p", 8080, Proto::Tcp)];
    let good_slice = format!("{name}-good");
    lab.cluster
        .apply_slice(&good_slice, name, &good, &lab.endpoints(&["n2-a"]))
        .await;
    let vip = addr(cluster_ip(&svc), 80);
    let from = From::Pod(lab.pod("n1-b"));
    reaches_exactly(lab, from, vip, 2, &["n2-a"]).await?;
    let before = dial_failures(lab).await?;
    let bad = [("p", broken, Proto::Tcp)];
    lab.cluster
        .apply_slice(
            &format!("{name}-bad"),
            name,
            &bad,
            &lab.endpoints(&["n3-a"]),
        )
        .await;
    let deadline = tokio::time::Instant::now() + lab.settle();
    loop {
        let replies = lab.all_reach(from, Proto::Tcp, vip, 4).await?;
        if let Some(r) = replies.iter().find(|r| r.pod != "n2-a") {
            return Err(format!("{} answered on a broken endpoint", r.pod));
        }
        let now = dial_failures(lab).await?;
        if now > before {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "node 1's relay never dialled the broken endpoint ({now} failed dials)"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Node 1's `kubeproxy_rs_userspace_dial_failures_total`, summed over its listeners.
async fn dial_failures(lab: &Lab) -> Result<f64, String> {
    let mut scrape = request(Proto::Tcp, "127.0.0.1:10249".parse().unwrap(), 1);
    scrape.send = Some("GET /metrics HTTP/1.0\r\n\r\n".to_owned());
    let text = lab.probe_with(From::Node(0), scrape).await.remove(0)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("kubeproxy_rs_userspace_dial_failures_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Scenario 30: one of two endpoints refuses (nothing listens on its port): the relay tries the
/// other, and every connection succeeds.
pub async fn refusing_endpoint_skipped(lab: &Lab) -> Result<(), String> {
    broken_endpoint_is_skipped(lab, "s30", REFUSING_PORT).await
}

/// Drops TCP SYNs to one port inside a pod's namespace while it lives.
struct SilentPort<'a> {
    ns: &'a NetNs,
}

const SILENT_TABLE: &str = "kprs-lab-silent";

impl<'a> SilentPort<'a> {
    fn new(ns: &'a NetNs, port: u16) -> Result<SilentPort<'a>, String> {
        let script = format!(
            "table inet {SILENT_TABLE} {{\n chain input {{\n  type filter hook input priority 0;\n  \
             tcp dport {port} drop\n }}\n}}\n"
        );
        ns.try_output_fed("nft", &["-f", "-"], &script)
            .map_err(|e| format!("nft in the pod: {e}"))?;
        Ok(SilentPort { ns })
    }
}

impl Drop for SilentPort<'_> {
    fn drop(&mut self) {
        let _ = self
            .ns
            .try_output("nft", &["delete", "table", "inet", SILENT_TABLE]);
    }
}

/// Scenario 31: one of two endpoints does not answer (its pod drops the SYNs): the relay gives
/// up on it after the dial timeout and dials the other, and every connection succeeds within
/// the probe's one-second attempt timeout.
pub async fn silent_endpoint_skipped(lab: &Lab) -> Result<(), String> {
    let _silent = SilentPort::new(&lab.pod("n3-a").ns, SILENT_PORT)?;
    broken_endpoint_is_skipped(lab, "s31", SILENT_PORT).await
}

/// Scenario 32: a long-lived TCP connection (a session on `echo::SESSION_PORT`) to n2-a keeps
/// working, on n2-a, through syncs that change its Service (n3-a joins) and another Service
/// (created), neither of which touches n2-a.
pub async fn long_lived_survives_sync(lab: &Lab) -> Result<(), String> {
    let s = SessionService::start(lab, "s32").await?;
    let from = session::client(lab);
    let change = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        s.set_endpoints(lab, lab.endpoints(&[session::FIRST_POD, "n3-a"]))
            .await;
        reaches_exactly(lab, from, s.vip, 6, &[session::FIRST_POD, "n3-a"]).await?;
        let other = lab
            .cluster
            .apply_service(service("s32-other", 80, 8080, json!({})))
            .await;
        lab.cluster
            .apply_slice(
                "s32-other-x",
                "s32-other",
                &[("p", 8080, Proto::Tcp)],
                &lab.endpoints(&["n3-b"]),
            )
            .await;
        reaches_exactly(lab, from, addr(cluster_ip(&other), 80), 2, &["n3-b"]).await
    };
    s.session_stays(lab, 1, change).await
}

/// The LoadBalancer ingress IP of scenario 37.
const S37_VIP: [u8; 4] = [198, 51, 100, 38];

/// Scenario 37: a relay listener is reached only through the frontends the redirect rules send
/// to it. A ClusterIP-only Service and a LoadBalancer whose source ranges admit the client's
/// primary address only (both with endpoint n2-a) are served on their frontends; then every
/// listener of theirs on node 1, dialled at node 1's address and the listener's port, is
/// refused from outside (the admitted address and the excluded one), from a pod on node 1 and
/// one on node 3, and from node 1 itself (its address and loopback); the frontends still serve.
pub async fn relay_ports_only_through_frontends(lab: &Lab) -> Result<(), String> {
    let p = [("p", 8080, Proto::Tcp)];
    let internal = lab
        .cluster
        .apply_service(service("s37", 80, 8080, json!({})))
        .await;
    lab.cluster
        .apply_slice("s37-x", "s37", &p, &lab.endpoints(&["n2-a"]))
        .await;
    let ranged = json!({
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": [format!("{CLIENT_IP}/32")],
    });
    lab.cluster
        .apply_service(service("s37-lb", 80, 8080, ranged))
        .await;
    lab.cluster
        .apply_slice("s37-lb-x", "s37-lb", &p, &lab.endpoints(&["n2-a"]))
        .await;
    let vip_ip = std::net::Ipv4Addr::from(S37_VIP).to_string();
    lab.cluster
        .set_lb_ingress("s37-lb", json!([{ "ip": vip_ip, "ipMode": "VIP" }]))
        .await;
    let cluster_vip = addr(cluster_ip(&internal), 80);
    let lb_vip = addr(S37_VIP, 80);
    let frontends_serve = || async {
        reaches_exactly(lab, From::Pod(lab.pod("n1-b")), cluster_vip, 2, &["n2-a"]).await?;
        reaches_exactly(lab, From::Node(0), cluster_vip, 2, &["n2-a"]).await?;
        reaches_exactly(lab, From::Client, lb_vip, 2, &["n2-a"]).await?;
        lab.all_fail(From::OtherClient, Proto::Tcp, lb_vip, 2, &[])
            .await
    };
    frontends_serve().await?;

    let ports = lab
        .eventually("node 1's listeners of s37 and s37-lb", || async {
            let ports = relay_ports(lab, 0, "/s37")?;
            if ports.len() < 2 {
                return Err(format!(
                    "listener ports {ports:?}: fewer than the two Services"
                ));
            }
            Ok(ports)
        })
        .await?;
    let node1 = lab.topo.nodes[0].ip;
    for port in ports {
        let direct = addr(node1, port);
        for from in [
            From::Client,
            From::OtherClient,
            From::Pod(lab.pod("n1-b")),
            From::Pod(lab.pod("n3-a")),
            From::Node(0),
        ] {
            lab.all_fail(from, Proto::Tcp, direct, 2, &["refused"])
                .await?;
        }
        let loopback = addr([127, 0, 0, 1], port);
        lab.all_fail(From::Node(0), Proto::Tcp, loopback, 2, &["refused"])
            .await?;
    }
    frontends_serve().await
}

/// The ports of node `index`'s relay listeners whose names contain `name` (the comments of
/// our table's `relay-ports` set: `<namespace>/<service>:<port> <family> <endpoints>`).
fn relay_ports(lab: &Lab, index: usize, name: &str) -> Result<Vec<u16>, String> {
    let ns = &lab.topo.nodes[index].ns;
    let text = ns
        .try_output(
            "nft",
            &["-j", "list", "set", "ip", "kube-proxy-rs", "relay-ports"],
        )
        .map_err(|e| format!("nft on node {}: {e}", index + 1))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("nft's JSON: {e}: {text}"))?;
    let elements = json["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["set"]["elem"].as_array())
        .flatten();
    let mut ports = Vec::new();
    for element in elements {
        let comment = element["elem"]["comment"].as_str().unwrap_or("");
        let concat = &element["elem"]["val"]["concat"];
        let port = concat
            .as_array()
            .and_then(|c| c.last())
            .and_then(serde_json::Value::as_u64)
            .and_then(|p| u16::try_from(p).ok());
        if let (true, Some(port)) = (comment.contains(name), port) {
            ports.push(port);
        }
    }
    Ok(ports)
}
