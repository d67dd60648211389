//! Traffic from outside the cluster: NodePorts, LoadBalancer ingress IPs, externalIPs, external
//! traffic policies with their health check, and source ranges.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::{node_port, reaches_exactly, service};
use crate::lab::client::{From, addr, request};
use crate::lab::topology::CLIENT_IP;
use crate::lab::{Lab, Proto};

/// Scenario 4: A NodePort answers on every node's IP, from outside and from a pod.
pub async fn node_ports(lab: &Lab) -> Result<(), String> {
    let svc = lab
        .cluster
        .apply_service(service("s04", 80, 8080, json!({ "type": "NodePort" })))
        .await;
    let eps = ["n1-a", "n2-a"];
    lab.cluster
        .apply_slice(
            "s04-x",
            "s04",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&eps),
        )
        .await;
    let np = node_port(&svc, 0);
    for ip in lab.node_ips() {
        reaches_exactly(lab, From::Client, addr(ip, np), 20, &eps).await?;
        reaches_exactly(lab, From::Pod(lab.pod("n3-a")), addr(ip, np), 20, &eps).await?;
    }
    Ok(())
}

/// Scenario 5: An ingress IP with ipMode VIP is captured on the nodes; one with ipMode Proxy is not.
pub async fn load_balancer(lab: &Lab) -> Result<(), String> {
    let p = [("p", 8080, Proto::Tcp)];
    let lb = json!({ "type": "LoadBalancer" });
    lab.cluster
        .apply_service(service("s05-vip", 80, 8080, lb.clone()))
        .await;
    lab.cluster
        .apply_slice("s05-vip-x", "s05-vip", &p, &lab.endpoints(&["n2-a"]))
        .await;
    lab.cluster
        .set_lb_ingress(
            "s05-vip",
            json!([{ "ip": "198.51.100.10", "ipMode": "VIP" }]),
        )
        .await;
    let proxied = lab
        .cluster
        .apply_service(service("s05-proxy", 80, 8080, lb))
        .await;
    lab.cluster
        .apply_slice("s05-proxy-x", "s05-proxy", &p, &lab.endpoints(&["n2-a"]))
        .await;
    lab.cluster
        .set_lb_ingress(
            "s05-proxy",
            json!([{ "ip": "198.51.100.11", "ipMode": "Proxy" }]),
        )
        .await;

    let vip = addr([198, 51, 100, 10], 80);
    reaches_exactly(lab, From::Client, vip, 5, &["n2-a"]).await?;
    reaches_exactly(lab, From::Pod(lab.pod("n3-a")), vip, 5, &["n2-a"]).await?;
    // The Proxy-mode Service itself is programmed (its NodePort works through node 1, where the
    // client routes the ingress IPs), but its ingress IP is left to the load balancer.
    let np = addr(lab.node_ips()[0], node_port(&proxied, 0));
    reaches_exactly(lab, From::Client, np, 2, &["n2-a"]).await?;
    let proxy_ip = addr([198, 51, 100, 11], 80);
    lab.all_fail(From::Client, Proto::Tcp, proxy_ip, 2, &[])
        .await?;
    lab.all_fail(From::Pod(lab.pod("n3-a")), Proto::Tcp, proxy_ip, 2, &[])
        .await
}

/// Scenario 6: An externalIP is captured for outside clients and for pods.
pub async fn external_ips(lab: &Lab) -> Result<(), String> {
    let extra = json!({ "externalIPs": ["203.0.113.10"] });
    lab.cluster
        .apply_service(service("s06", 80, 8080, extra))
        .await;
    lab.cluster
        .apply_slice(
            "s06-x",
            "s06",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&["n3-a"]),
        )
        .await;
    let target = addr([203, 0, 113, 10], 80);
    reaches_exactly(lab, From::Client, target, 5, &["n3-a"]).await?;
    reaches_exactly(lab, From::Pod(lab.pod("n1-a")), target, 5, &["n3-a"]).await
}

/// Scenario 8: Cluster policy: any node forwards; crossing nodes, the endpoint sees a node's address.
pub async fn etp_cluster(lab: &Lab) -> Result<(), String> {
    let svc = lab
        .cluster
        .apply_service(service("s08", 80, 8080, json!({ "type": "NodePort" })))
        .await;
    lab.cluster
        .apply_slice(
            "s08-x",
            "s08",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&["n2-a"]),
        )
        .await;
    let np = node_port(&svc, 0);
    let node_addrs = node_addresses(lab);
    for (i, ip) in lab.node_ips().into_iter().enumerate() {
        let target = addr(ip, np);
        reaches_exactly(lab, From::Client, target, 3, &["n2-a"]).await?;
        let replies = lab.all_reach(From::Client, Proto::Tcp, target, 5).await?;
        if let Some(r) = replies.iter().find(|r| r.src.ip() == IpAddr::V4(CLIENT_IP)) {
            return Err(format!(
                "via node {}: the endpoint saw the client's address: {r:?}",
                i + 1
            ));
        }
        if i != 1 && !replies.iter().all(|r| node_addrs.contains(&r.src.ip())) {
            return Err(format!(
                "via node {}: the endpoint saw {replies:?}, not a node",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Scenario 9: Local policy: the endpoint sees the client; nodes without a local endpoint do not forward;
/// the health check node port answers 200 with the local count there, 503 elsewhere.
pub async fn etp_local(lab: &Lab) -> Result<(), String> {
    // A LoadBalancer (without an ingress IP it is reached on its NodePort): only those get a
    // healthCheckNodePort.
    let lb = json!({ "type": "LoadBalancer", "externalTrafficPolicy": "Local" });
    let svc = lab
        .cluster
        .apply_service(service("s09", 80, 8080, lb))
        .await;
    lab.cluster
        .apply_slice(
            "s09-x",
            "s09",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&["n2-a"]),
        )
        .await;
    let np = node_port(&svc, 0);
    let ips = lab.node_ips();
    let local = addr(ips[1], np);
    // Userspace mode keeps the endpoint choice but not the client's address: the relay dials
    // from node 2.
    let what = if lab.relays() {
        "only the local endpoint answers, relayed from node 2"
    } else {
        "the endpoint sees the client's own address"
    };
    lab.eventually(what, || async {
        let replies = lab.all_reach(From::Client, Proto::Tcp, local, 5).await?;
        let source_ok = |src: IpAddr| (src == IpAddr::V4(CLIENT_IP)) != lab.relays();
        match replies
            .iter()
            .find(|r| !source_ok(r.src.ip()) || r.pod != "n2-a")
        {
            Some(r) => Err(format!("{r:?}")),
            None => Ok(()),
        }
    })
    .await?;
    for i in [0, 2] {
        let target = addr(ips[i], np);
        lab.eventually(&format!("node {} does not forward", i + 1), || async {
            lab.all_fail(From::Client, Proto::Tcp, target, 2, &[]).await
        })
        .await?;
    }

    let hc = health_check_port(&svc)?;
    for (i, want) in [(0, "503"), (1, "200"), (2, "503")] {
        let target = addr(ips[i], hc);
        lab.eventually(
            &format!("health check of node {} says {want}", i + 1),
            || async {
                let mut req = request(Proto::Tcp, target, 1);
                req.send = Some("GET / HTTP/1.0\r\n\r\n".to_owned());
                let text = match lab.probe_with(From::Client, req).await.remove(0) {
                    Ok(t) => t,
                    Err(e) => return Err(e),
                };
                let status = text.split_whitespace().nth(1).unwrap_or("");
                let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
                let count_ok = want != "200" || compact.contains("\"localEndpoints\":1");
                if status == want && count_ok {
                    Ok(())
                } else {
                    Err(text)
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Scenario 17: A LoadBalancer with source ranges lets the allowed client in and drops another.
pub async fn source_ranges(lab: &Lab) -> Result<(), String> {
    let extra = json!({
        "type": "LoadBalancer",
        "loadBalancerSourceRanges": [format!("{CLIENT_IP}/32")],
    });
    lab.cluster
        .apply_service(service("s17", 80, 8080, extra))
        .await;
    lab.cluster
        .apply_slice(
            "s17-x",
            "s17",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&["n2-a"]),
        )
        .await;
    lab.cluster
        .set_lb_ingress("s17", json!([{ "ip": "198.51.100.12", "ipMode": "VIP" }]))
        .await;
    let vip = addr([198, 51, 100, 12], 80);
    reaches_exactly(lab, From::Client, vip, 3, &["n2-a"]).await?;
    lab.all_fail(From::OtherClient, Proto::Tcp, vip, 2, &[])
        .await
}

/// Every address of every node: underlay and pod gateway.
fn node_addresses(lab: &Lab) -> Vec<IpAddr> {
    lab.topo
        .nodes
        .iter()
        .flat_map(|n| [IpAddr::V4(n.ip), IpAddr::V4(n.pod_gateway)])
        .collect()
}

fn health_check_port(svc: &Service) -> Result<u16, String> {
    svc.spec
        .as_ref()
        .and_then(|s| s.health_check_node_port)
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| "no healthCheckNodePort allocated".to_owned())
}
