//! The control plane of `testenv/` is real: its EndpointSlice controller
//! reacts to our objects, and upstream kube-proxy, our peer in benchmarks,
//! programs nftables from it inside a network namespace.

use support::testenv;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use serde_json::json;
use testenv::{NetNs, TestEnv, TestNode};

#[tokio::test]
async fn api_server_is_the_pinned_release() {
    let env = TestEnv::shared();
    let info = env
        .client()
        .await
        .apiserver_version()
        .await
        .expect("/version");
    assert_eq!(
        (info.major.as_str(), info.minor.as_str()),
        ("1", "37"),
        "{info:?}"
    );
    assert!(
        info.git_version.starts_with("v1.37."),
        "{}",
        info.git_version
    );
}

/// The API server's service CIDR is dual-stack with IPv4 first: a Service that names no family
/// stays single-stack IPv4, an IPv6 single-stack Service gets one IPv6 ClusterIP, and dual-stack
/// Services get one of each, in the order their `ipFamilies` ask for (the primary family first
/// when they do not say).
#[tokio::test]
async fn api_server_allocates_ipv6_and_dual_stack_cluster_ips() {
    let env = TestEnv::shared();
    let ns = env.namespace("families").await;
    let v4: ipnet::IpNet = "10.96.0.0/12".parse().unwrap();
    let v6: ipnet::IpNet = "fd00:10:96::/108".parse().unwrap();
    let cases: [(&str, serde_json::Value, &[ipnet::IpNet], &[&str]); 5] = [
        ("plain", json!({}), &[v4], &["IPv4"]),
        (
            "v6-single",
            json!({ "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv6"] }),
            &[v6],
            &["IPv6"],
        ),
        (
            "prefer-dual",
            json!({ "ipFamilyPolicy": "PreferDualStack" }),
            &[v4, v6],
            &["IPv4", "IPv6"],
        ),
        (
            "require-dual",
            json!({ "ipFamilyPolicy": "RequireDualStack" }),
            &[v4, v6],
            &["IPv4", "IPv6"],
        ),
        (
            "require-dual-v6-first",
            json!({ "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"] }),
            &[v6, v4],
            &["IPv6", "IPv4"],
        ),
    ];
    for (name, families, want_ranges, want_families) in cases {
        let mut spec = json!({
            "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }]
        });
        spec.as_object_mut()
            .unwrap()
            .extend(families.as_object().unwrap().clone());
        let svc = ns
            .create_service(json!({ "metadata": { "name": name }, "spec": spec }))
            .await;
        let spec = svc.spec.expect("spec");
        let ips: Vec<std::net::IpAddr> = spec
            .cluster_ips
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|ip| ip.parse().expect("a ClusterIP address"))
            .collect();
        assert_eq!(ips.len(), want_ranges.len(), "{name}: clusterIPs {ips:?}");
        for (ip, range) in ips.iter().zip(want_ranges) {
            assert!(range.contains(ip), "{name}: {ip} is not in {range}");
        }
        assert_eq!(
            spec.cluster_ip.as_deref(),
            Some(ips[0].to_string().as_str()),
            "{name}: clusterIP is the first of clusterIPs"
        );
        assert_eq!(
            spec.ip_families.unwrap_or_default(),
            want_families.to_vec(),
            "{name}: ipFamilies"
        );
    }
}

/// Service `web` (selector app=web, port 80 -> 8080) with `ips.len()` ready
/// Pods on `node`.
async fn web_service(ns: &testenv::TestNamespace, node: &str, ips: &[&str]) -> String {
    let svc = ns
        .create_service(json!({
            "metadata": { "name": "web" },
            "spec": {
                "selector": { "app": "web" },
                "ports": [{ "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP" }]
            }
        }))
        .await;
    for (i, ip) in ips.iter().enumerate() {
        ns.create_ready_pod(&format!("web-{i}"), node, json!({ "app": "web" }), ip, 8080)
            .await;
    }
    svc.spec
        .and_then(|s| s.cluster_ip)
        .expect("the API server allocates a ClusterIP")
}

/// Ready endpoint addresses of Service `name` over all its EndpointSlices.
async fn ready_addresses(
    ns: &testenv::TestNamespace,
    name: &str,
) -> Result<BTreeSet<String>, String> {
    let slices = ns
        .api::<EndpointSlice>()
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(|e| e.to_string())?;
    Ok(slices
        .items
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
        .flat_map(|e| e.addresses.iter().cloned())
        .collect())
}

#[tokio::test]
async fn endpointslice_controller_writes_slices_for_ready_pods() {
    let env = TestEnv::shared();
    let node = TestNode::create(env, &testenv::unique_name("node"), "192.0.2.10").await;
    let ns = env.namespace("slices").await;
    web_service(&ns, &node.name, &["10.244.1.10", "10.244.1.11"]).await;

    let want: BTreeSet<String> = ["10.244.1.10", "10.244.1.11"].map(String::from).into();
    testenv::wait_for(
        "EndpointSlices with both pods ready",
        Duration::from_secs(30),
        || async {
            let got = ready_addresses(&ns, "web").await?;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;

    // The controller follows readiness: one pod turns unready.
    ns.set_pod_ready("web-1", "10.244.1.11", false).await;
    let want: BTreeSet<String> = ["10.244.1.10"].map(String::from).into();
    testenv::wait_for(
        "EndpointSlices with one pod ready",
        Duration::from_secs(30),
        || async {
            let got = ready_addresses(&ns, "web").await?;
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;

    // The slice is the controller's, with the Service's port and the node.
    let slices = ns
        .api::<EndpointSlice>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let slice = slices
        .items
        .iter()
        .find(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .map(String::as_str)
                == Some("web")
        })
        .expect("a slice for web");
    assert_eq!(
        slice
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .get("endpointslice.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("endpointslice-controller.k8s.io")
    );
    let port = &slice.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.port),
        (Some("http"), Some(8080))
    );
    assert!(
        slice
            .endpoints
            .iter()
            .all(|e| e.node_name.as_deref() == Some(node.name.as_str()))
    );
}

#[tokio::test]
async fn upstream_kube_proxy_programs_nftables_in_a_netns() {
    testenv::require_root();
    let env = TestEnv::shared();
    let node = TestNode::create(env, &testenv::unique_name("kp-node"), "192.0.2.20").await;
    let ns = env.namespace("upstream-kp").await;
    let cluster_ip = web_service(&ns, &node.name, &["10.244.2.10", "10.244.2.11"]).await;

    let netns = NetNs::new("kprs-up");
    let netns_name = netns.name.clone();
    let bridge = testenv::bridge_apiserver(env, &netns);
    let mut kube_proxy = testenv::spawn_upstream_kube_proxy(env, &netns, &node.name, &[]);
    let pid = kube_proxy.pid();

    let table = testenv::wait_for(
        "upstream kube-proxy to program the Service into table ip kube-proxy",
        Duration::from_secs(60),
        || {
            if let Some(status) = kube_proxy.exited() {
                panic!("kube-proxy exited ({status}):\n{}", kube_proxy.log_tail(30));
            }
            let res = netns
                .try_output("nft", &["list", "table", "ip", "kube-proxy"])
                .map_err(|e| e.to_string());
            let cluster_ip = cluster_ip.clone();
            async move {
                let table = res?;
                let programmed = table.contains(&cluster_ip)
                    && table.contains("10.244.2.10")
                    && table.contains("10.244.2.11");
                if programmed { Ok(table) } else { Err(table) }
            }
        },
    )
    .await;
    // The Service's ClusterIP is in the service-ips verdict map, pointing at
    // the Service's chain, which DNATs to both endpoints (1.37 puts them in
    // one `numgen random mod 2 map`; older releases used a chain each).
    assert!(
        table
            .lines()
            .any(|l| l.contains(&format!("{cluster_ip} . tcp . 80 : goto service-"))),
        "no service-ips element for {cluster_ip}:\n{table}\n--- kube-proxy log:\n{}",
        kube_proxy.log_tail(40)
    );
    for ip in ["10.244.2.10", "10.244.2.11"] {
        assert!(
            table.contains(&format!("{ip} . 8080"))
                || table.contains(&format!("dnat to {ip}:8080")),
            "no DNAT to {ip}:8080:\n{table}"
        );
    }

    // Stop kube-proxy and remove the namespace: nothing is left behind.
    drop(kube_proxy);
    drop(bridge);
    drop(netns);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "kube-proxy (pid {pid}) still running"
    );
    assert!(
        !NetNs::exists(&netns_name),
        "netns {netns_name} still exists"
    );
}
