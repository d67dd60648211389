//! Scenarios of ipvs mode alone: each scheduler sends connections where its
//! algorithm says. They do not apply to the rule-based modes, and those that pick a scheduler
//! per Service (our annotation `ipvs.kube-proxy-rs.io/scheduler`) do not apply to upstream,
//! whose scheduler is one per node (`--ipvs-scheduler`; the lab runs every proxy with `rr`).

use serde_json::json;

use super::report::Expect;
use super::{cluster_ip, node_port, reaches_exactly, service};
use crate::lab::client::{From, addr, pods_of};
use crate::lab::helper::Reply;
use crate::lab::{Lab, Mode, Proto, Proxy};

const SCHEDULER: &str = "ipvs.kube-proxy-rs.io/scheduler";
const SCHEDULER_FLAGS: &str = "ipvs.kube-proxy-rs.io/scheduler-flags";
const ENDPOINTS: [&str; 3] = ["n1-a", "n2-a", "n3-a"];

/// Applies to every proxy in ipvs mode.
pub fn ipvs_only(proxy: Proxy) -> Expect {
    if proxy.mode() == Mode::Ipvs {
        Expect::Pass
    } else {
        Expect::NotApplicable("IPVS schedulers: ipvs mode only")
    }
}

/// Applies to ours in ipvs mode: the scheduler is chosen per Service by our annotation.
pub fn ours_ipvs_only(proxy: Proxy) -> Expect {
    match proxy {
        Proxy::Ours { mode: Mode::Ipvs } => Expect::Pass,
        Proxy::Upstream { mode: Mode::Ipvs } => Expect::NotApplicable(
            "upstream has one scheduler per node (--ipvs-scheduler), not one per Service",
        ),
        _ => Expect::NotApplicable("IPVS schedulers: ipvs mode only"),
    }
}

/// A ClusterIP Service `name` on port 80 over [`ENDPOINTS`], with `annotations`.
async fn three_endpoint_service(
    lab: &Lab,
    name: &str,
    spec: serde_json::Value,
    annotations: serde_json::Value,
) -> k8s_openapi::api::core::v1::Service {
    let mut svc = service(name, 80, 8080, spec);
    svc["metadata"]["annotations"] = annotations;
    let svc = lab.cluster.apply_service(svc).await;
    lab.cluster
        .apply_slice(
            &format!("{name}-x"),
            name,
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&ENDPOINTS),
        )
        .await;
    svc
}

fn sequence(replies: &[Reply]) -> Vec<&str> {
    replies.iter().map(|r| r.pod.as_str()).collect()
}

/// Scenario 26: round robin (the lab's scheduler): nine connections in a row from one pod go to
/// the three endpoints in turn, each three times, never the same one twice in a row.
pub async fn round_robin(lab: &Lab) -> Result<(), String> {
    let svc = three_endpoint_service(lab, "s26", json!({}), json!({})).await;
    let vip = addr(cluster_ip(&svc), 80);
    let from = From::Pod(lab.pod("n1-b"));
    reaches_exactly(lab, from, vip, 9, &ENDPOINTS).await?;
    lab.eventually(
        "connections in a row take the endpoints in turn",
        || async {
            let replies = lab.all_reach(from, Proto::Tcp, vip, 9).await?;
            let seq = sequence(&replies);
            let repeats = seq.windows(2).any(|w| w[0] == w[1]);
            let even = ENDPOINTS
                .iter()
                .all(|p| seq.iter().filter(|s| *s == p).count() == 3);
            if !repeats && even {
                Ok(())
            } else {
                Err(format!("rr gave {seq:?}"))
            }
        },
    )
    .await
}

/// Scenario 27: source hashing chosen live: a Service on the node's rr spreads one pod's
/// connections; annotated `sh`, each of three sources (pods on every node) keeps all its
/// connections on one endpoint; the annotation removed, one pod's connections spread again.
pub async fn source_hashing_live(lab: &Lab) -> Result<(), String> {
    let svc = three_endpoint_service(lab, "s27", json!({}), json!({})).await;
    let vip = addr(cluster_ip(&svc), 80);
    let spreads = |stage: &'static str| async move {
        lab.eventually(stage, || async {
            let replies = lab
                .all_reach(From::Pod(lab.pod("n1-b")), Proto::Tcp, vip, 9)
                .await?;
            match pods_of(&replies).len() {
                1 => Err(format!("all on {:?}", sequence(&replies))),
                _ => Ok(()),
            }
        })
        .await
    };
    spreads("rr, before the annotation: connections spread").await?;

    three_endpoint_service(lab, "s27", json!({}), json!({ SCHEDULER: "sh" })).await;
    lab.eventually("sh: every source keeps to one endpoint", || async {
        for source in ["n1-b", "n2-b", "n3-b"] {
            let replies = lab
                .all_reach(From::Pod(lab.pod(source)), Proto::Tcp, vip, 10)
                .await?;
            if pods_of(&replies).len() != 1 {
                return Err(format!("{source} went to {:?}", sequence(&replies)));
            }
        }
        Ok(())
    })
    .await?;

    three_endpoint_service(lab, "s27", json!({}), json!({})).await;
    spreads("the annotation removed: rr again, connections spread").await
}

/// Scenario 28: Maglev hashing of the source address alone (`mh` with `mh-fallback`, no
/// `mh-port`) picks the same endpoint on two nodes: the external client's connections to a
/// NodePort on node 1 and on node 2 all reach one pod, the pick of two independent proxies.
pub async fn maglev_same_on_two_nodes(lab: &Lab) -> Result<(), String> {
    let svc = three_endpoint_service(
        lab,
        "s28",
        json!({ "type": "NodePort" }),
        json!({ SCHEDULER: "mh", SCHEDULER_FLAGS: "mh-fallback" }),
    )
    .await;
    let np = node_port(&svc, 0);
    let [node1, node2] = [lab.topo.nodes[0].ip, lab.topo.nodes[1].ip];
    lab.eventually("mh: one endpoint for the client on both nodes", || async {
        let mut seen = Vec::new();
        for node in [node1, node2] {
            let replies = lab
                .all_reach(From::Client, Proto::Tcp, addr(node, np), 6)
                .await?;
            seen.extend(replies.into_iter().map(|r| (node, r.pod)));
        }
        let pods: std::collections::BTreeSet<&String> = seen.iter().map(|(_, p)| p).collect();
        if pods.len() == 1 {
            Ok(())
        } else {
            Err(format!("the client reached {seen:?}"))
        }
    })
    .await
}
