//! IPv6 and dual-stack Services (scenario 21): the lab is dual-stack (every node, pod and the
//! external client has an IPv6 address beside its IPv4 one, see `topology.rs`), the API server's
//! service CIDR has an IPv6 range, and the proxies run with both families' cluster CIDRs.
//!
//! Every check sends real TCP and UDP. Without IPv6 rules each of them fails (seen with every
//! node's proxy stopped): an IPv6 ClusterIP is routed to the underlay router, which answers
//! "address unreachable" (a soft error to TCP, so the attempt times out); a NodePort on a node's
//! IPv6 address finds no listener ("refused", never a reply); a Service without endpoints is
//! "unreachable" instead of refused. With IPv6 rules but no IPv6 `--cluster-cidr`, pods' traffic
//! is masqueraded and the source check fails.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use super::{node_port, service};
use crate::lab::client::{From, addr, request};
use crate::lab::cluster::Family;
use crate::lab::helper::Reply;
use crate::lab::probe::Request;
use crate::lab::{Lab, Proto};

/// Both protocols on port 80 → 8080, the shape of every Service here.
const PORTS: [(&str, u16, Proto); 2] = [("p", 8080, Proto::Tcp), ("u", 8080, Proto::Udp)];

/// Scenario 21: an IPv6 single-stack ClusterIP from a pod on another node and from a node
/// (endpoints see the pod's own IPv6 address: no SNAT inside the IPv6 cluster CIDR); a
/// RequireDualStack Service on both ClusterIPs, each family reaching only its own slice's
/// endpoints; an IPv6 NodePort from the external client on every node's IPv6 address; an IPv6
/// Service without endpoints refused (TCP at its first SYN retransmission, see below).
pub async fn ipv6_and_dual_stack(lab: &Lab) -> Result<(), String> {
    single_stack(lab).await?;
    dual_stack(lab).await?;
    node_port_v6(lab).await?;
    no_endpoints_v6(lab).await
}

/// Scenario 34 (eBPF mode): scenario 21 without its IPv6 NodePort from the external client,
/// which needs the tc programs; so the eBPF mode's IPv6 and dual-stack socket balancing is
/// held to the rest of 21 while 21 itself is expected to fail.
pub async fn ipv6_from_inside(lab: &Lab) -> Result<(), String> {
    single_stack(lab).await?;
    dual_stack(lab).await?;
    no_endpoints_v6(lab).await
}

async fn single_stack(lab: &Lab) -> Result<(), String> {
    let svc = apply(lab, "s21-v6", json!({ "ipFamilies": ["IPv6"] })).await;
    let ips = family_ips(&svc, &[Family::V6])?;
    let eps = ["n1-a", "n3-a"];
    slice(lab, Family::V6, "s21-v6", &eps).await;
    let vip = addr(ips[0], 80);
    let client = lab.pod("n2-b");
    for proto in [Proto::Tcp, Proto::Udp] {
        let replies = reaches(lab, From::Pod(client), proto, vip, &eps).await?;
        // Userspace mode relays from the node: the endpoint never sees the pod's address.
        let source_ok = |src: IpAddr| (src == IpAddr::V6(client.ip6)) != lab.relays();
        if let Some(r) = replies.iter().find(|r| !source_ok(r.src.ip())) {
            return Err(format!(
                "{proto:?} from pod n2-b to {vip}: {} saw source {}; the pod's own is {} \
                 (relayed: {})",
                r.pod,
                r.src.ip(),
                client.ip6,
                lab.relays()
            ));
        }
        reaches(lab, From::Node(1), proto, vip, &eps).await?;
    }
    Ok(())
}

async fn dual_stack(lab: &Lab) -> Result<(), String> {
    let svc = apply(
        lab,
        "s21-dual",
        json!({ "ipFamilyPolicy": "RequireDualStack" }),
    )
    .await;
    let ips = family_ips(&svc, &[Family::V4, Family::V6])?;
    // Different endpoints per family, so a proxy that mixes the families' slices shows.
    let (eps4, eps6) = (["n1-b", "n2-a"], ["n2-a", "n3-b"]);
    slice(lab, Family::V4, "s21-dual", &eps4).await;
    slice(lab, Family::V6, "s21-dual", &eps6).await;
    let from = From::Pod(lab.pod("n3-a"));
    for proto in [Proto::Tcp, Proto::Udp] {
        reaches(lab, from, proto, addr(ips[0], 80), &eps4).await?;
        reaches(lab, from, proto, addr(ips[1], 80), &eps6).await?;
    }
    Ok(())
}

async fn node_port_v6(lab: &Lab) -> Result<(), String> {
    let extra = json!({ "ipFamilies": ["IPv6"], "type": "NodePort" });
    let svc = apply(lab, "s21-np", extra).await;
    family_ips(&svc, &[Family::V6])?;
    let eps = ["n1-a", "n2-a"];
    slice(lab, Family::V6, "s21-np", &eps).await;
    let (tcp, udp) = (node_port(&svc, 0), node_port(&svc, 1));
    for ip in lab.node_ip6s() {
        reaches(lab, From::Client, Proto::Tcp, addr(ip, tcp), &eps).await?;
        reaches(lab, From::Client, Proto::Udp, addr(ip, udp), &eps).await?;
    }
    Ok(())
}

async fn no_endpoints_v6(lab: &Lab) -> Result<(), String> {
    let svc = apply(lab, "s21-none", json!({ "ipFamilies": ["IPv6"] })).await;
    let ips = family_ips(&svc, &[Family::V6])?;
    slice(lab, Family::V6, "s21-none", &[]).await;
    let target = addr(ips[0], 80);
    let from = From::Pod(lab.pod("n1-a"));
    for proto in [Proto::Tcp, Proto::Udp] {
        // On this kernel (6.18) an ICMPv6 error that comes back while connect() still holds its
        // socket is only a soft error (`TcpExtLockDroppedIcmps`), and through veths the whole
        // round trip runs inside the connect call: a TCP connection is refused at its first SYN
        // retransmission, a second later (IPv4 is refused at once). So each attempt may take 3 s.
        let slow = Request {
            timeout_ms: 3000,
            ..request(proto, target, 3)
        };
        lab.eventually(&format!("{proto:?} to {target} is refused"), || async {
            let outcomes = lab.probe_with(from, slow.clone()).await;
            if outcomes
                .iter()
                .all(|o| o.as_ref().err().is_some_and(|e| e == "refused"))
            {
                Ok(())
            } else {
                Err(format!(
                    "{proto:?} from {from} to {target}: wanted refused, got {outcomes:?}"
                ))
            }
        })
        .await?;
    }
    Ok(())
}

/// Creates Service `name` with [`PORTS`] and the fields of `extra` in its spec (single-stack
/// unless `extra` sets `ipFamilyPolicy`).
async fn apply(lab: &Lab, name: &str, mut extra: serde_json::Value) -> Service {
    if let Some(fields) = extra.as_object_mut() {
        fields
            .entry("ipFamilyPolicy")
            .or_insert_with(|| json!("SingleStack"));
        fields.insert(
            "ports".into(),
            json!([
                { "name": "p", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                { "name": "u", "port": 80, "targetPort": 8080, "protocol": "UDP" },
            ]),
        );
    }
    lab.cluster
        .apply_service(service(name, 80, 8080, extra))
        .await
}

/// Writes `service`'s slice of `family` with [`PORTS`] and the pods `pods` as its endpoints.
async fn slice(lab: &Lab, family: Family, service: &str, pods: &[&str]) {
    let endpoints = match family {
        Family::V4 => lab.endpoints(pods),
        Family::V6 => lab.endpoints6(pods),
    };
    let name = format!("{service}-{}", family.k8s().to_lowercase());
    lab.cluster
        .apply_slice_of(family, &name, service, &PORTS, &endpoints)
        .await;
}

/// The Service's ClusterIPs, checked to be of `want`'s families in that order.
fn family_ips(svc: &Service, want: &[Family]) -> Result<Vec<IpAddr>, String> {
    let name = svc.metadata.name.as_deref().unwrap_or("?");
    let ips: Vec<IpAddr> = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ips.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let got: Vec<Family> = ips.iter().map(|ip| Family::of(*ip)).collect();
    if got == want {
        Ok(ips)
    } else {
        Err(format!(
            "service {name}: the API server allocated ClusterIPs {ips:?}, wanted families {want:?}"
        ))
    }
}

/// Waits until 20 attempts over `proto` from `from` to `target` are all answered, by exactly the
/// pods in `want`, each on its address of `target`'s family and on target port 8080.
async fn reaches(
    lab: &Lab,
    from: From<'_>,
    proto: Proto,
    target: SocketAddr,
    want: &[&str],
) -> Result<Vec<Reply>, String> {
    let what = format!("{proto:?} {from} → {target} reaches {want:?}");
    let want: BTreeSet<&str> = want.iter().copied().collect();
    lab.eventually(&what, || async {
        let replies = lab.all_reach(from, proto, target, 20).await?;
        let pods: BTreeSet<&str> = replies.iter().map(|r| r.pod.as_str()).collect();
        if pods != want {
            return Err(format!("answered by {pods:?}"));
        }
        let wrong = replies.iter().find(|r| {
            let pod = lab.pod(&r.pod);
            let pod_ip = match target {
                SocketAddr::V4(_) => IpAddr::from(pod.ip),
                SocketAddr::V6(_) => IpAddr::from(pod.ip6),
            };
            // The IPv4 UDP server is a wildcard socket, which knows no local address.
            let wildcard = target.is_ipv4() && proto == Proto::Udp && r.dst.ip().is_unspecified();
            r.proto != proto || r.dst.port() != 8080 || (r.dst.ip() != pod_ip && !wildcard)
        });
        match wrong {
            Some(r) => Err(format!("answered as {r:?}")),
            None => Ok(replies),
        }
    })
    .await
}
