//! Scenarios about which endpoints a connection may use: session affinity, internal traffic
//! policy, terminating endpoints and zone hints.

use std::time::Duration;

use serde_json::json;

use super::report::Expect;
use super::{cluster_ip, reaches_exactly, service};
use crate::lab::client::{From, addr, pods_of};
use crate::lab::{Lab, Mode, Proto, Proxy};

/// Why a proxy is expected not to let the affinity timeout expire.
pub fn session_affinity_expect(proxy: Proxy) -> Expect {
    if proxy.mode() == Mode::Ipvs {
        Expect::Fail(
            "IPVS keeps a persistence template while any connection it controls is in IPVS's \
             table, and a closed TCP connection stays there for IPVS's FIN_WAIT/TIME_WAIT \
             timeout (2 min unless --ipvs-tcpfin-timeout), so a 2 s affinity timeout does not \
             expire between connections 3 s apart",
        )
    } else {
        Expect::Pass
    }
}

/// Scenario 7: ClientIP affinity sticks; turning it off spreads; on again sticks; the timeout expires.
pub async fn session_affinity(lab: &Lab) -> Result<(), String> {
    let sticky = json!({
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": { "clientIP": { "timeoutSeconds": 2 } },
    });
    let svc = lab
        .cluster
        .apply_service(service("s07", 80, 8080, sticky.clone()))
        .await;
    let eps = ["n1-a", "n2-a", "n3-a"];
    lab.cluster
        .apply_slice(
            "s07-x",
            "s07",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&eps),
        )
        .await;
    let vip = addr(cluster_ip(&svc), 80);
    let from = From::Pod(lab.pod("n1-b"));
    let one_pod = || async {
        let replies = lab.all_reach(from, Proto::Tcp, vip, 10).await?;
        let pods = pods_of(&replies);
        if pods.len() == 1 {
            Ok(pods.into_iter().next().unwrap_or_default())
        } else {
            Err(format!("answered by {pods:?}"))
        }
    };
    lab.eventually("connections stick to one endpoint", one_pod)
        .await?;

    lab.cluster
        .apply_service(service(
            "s07",
            80,
            8080,
            json!({ "sessionAffinity": "None" }),
        ))
        .await;
    lab.eventually("without affinity, connections spread", || async {
        let replies = lab.all_reach(from, Proto::Tcp, vip, 20).await?;
        let pods = pods_of(&replies);
        if pods.len() > 1 {
            Ok(())
        } else {
            Err(format!("answered by {pods:?}"))
        }
    })
    .await?;

    lab.cluster
        .apply_service(service("s07", 80, 8080, sticky))
        .await;
    let first = lab
        .eventually("with affinity again, connections stick", one_pod)
        .await?;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let replies = lab.all_reach(from, Proto::Tcp, vip, 1).await?;
        if replies[0].pod != first {
            return Ok(());
        }
    }
    Err(format!(
        "after 10 idle periods past the 2s timeout, still always {first}"
    ))
}

/// Scenario 10: Local internal policy: pods reach only their own node's endpoints; none local, no service.
pub async fn itp_local(lab: &Lab) -> Result<(), String> {
    let svc = lab
        .cluster
        .apply_service(service("s10", 80, 8080, json!({})))
        .await;
    let eps = ["n1-a", "n2-a"];
    lab.cluster
        .apply_slice(
            "s10-x",
            "s10",
            &[("p", 8080, Proto::Tcp)],
            &lab.endpoints(&eps),
        )
        .await;
    let vip = addr(cluster_ip(&svc), 80);
    // First with the Cluster policy, so node 3 is known to have the Service.
    reaches_exactly(lab, From::Pod(lab.pod("n3-b")), vip, 20, &eps).await?;
    let local = json!({ "internalTrafficPolicy": "Local" });
    lab.cluster
        .apply_service(service("s10", 80, 8080, local))
        .await;
    reaches_exactly(lab, From::Pod(lab.pod("n1-b")), vip, 20, &["n1-a"]).await?;
    reaches_exactly(lab, From::Pod(lab.pod("n2-b")), vip, 20, &["n2-a"]).await?;
    lab.eventually(
        "node 3, without a local endpoint, has no service",
        || async {
            lab.all_fail(From::Pod(lab.pod("n3-b")), Proto::Tcp, vip, 2, &[])
                .await
        },
    )
    .await
}

/// Scenario 12: Ready endpoints are preferred; with only serving+terminating ones left, traffic flows.
pub async fn terminating(lab: &Lab) -> Result<(), String> {
    let svc = lab
        .cluster
        .apply_service(service("s12", 80, 8080, json!({})))
        .await;
    let p = [("p", 8080, Proto::Tcp)];
    let mixed = vec![
        lab.endpoint(lab.pod("n1-a")),
        lab.endpoint(lab.pod("n2-a")).terminating(),
    ];
    lab.cluster.apply_slice("s12-x", "s12", &p, &mixed).await;
    let vip = addr(cluster_ip(&svc), 80);
    let from = From::Pod(lab.pod("n3-b"));
    reaches_exactly(lab, from, vip, 20, &["n1-a"]).await?;
    let only = vec![lab.endpoint(lab.pod("n2-a")).terminating()];
    lab.cluster.apply_slice("s12-x", "s12", &p, &only).await;
    reaches_exactly(lab, from, vip, 10, &["n2-a"]).await
}

/// Scenario 13: trafficDistribution PreferSameZone with hints keeps each zone's traffic in the zone.
pub async fn topology(lab: &Lab) -> Result<(), String> {
    let extra = json!({ "trafficDistribution": "PreferSameZone" });
    let svc = lab
        .cluster
        .apply_service(service("s13", 80, 8080, extra))
        .await;
    let eps: Vec<_> = ["n1-a", "n2-a", "n3-a"]
        .iter()
        .map(|n| lab.endpoint(lab.pod(n)).hinted())
        .collect();
    lab.cluster
        .apply_slice("s13-x", "s13", &[("p", 8080, Proto::Tcp)], &eps)
        .await;
    let vip = addr(cluster_ip(&svc), 80);
    // Node 1 is zone-a alone; nodes 2 and 3 share zone-b.
    reaches_exactly(lab, From::Pod(lab.pod("n1-b")), vip, 20, &["n1-a"]).await?;
    for client in ["n2-b", "n3-b"] {
        let from = From::Pod(lab.pod(client));
        reaches_exactly(lab, from, vip, 20, &["n2-a", "n3-a"]).await?;
    }
    Ok(())
}
