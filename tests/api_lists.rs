//! Lists read as protobuf against a real kube-apiserver (`testenv/`): the objects their
//! items decode to are those the same lists give as JSON.

use support::testenv;

use support::api_objects;

use api_objects::slice_json;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube_proxy_rs::cluster::source::api::list_watch;
use kube_proxy_rs::cluster::source::api::protobuf_objects::{DecodeError, FromProtobuf};
use kube_proxy_rs::cluster::source::lean;
use serde_json::json;
use testenv::TestEnv;

/// Protobuf list items read, counted to show the lists really came as protobuf.
static PROTOBUF_ITEMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn counted<K: FromProtobuf>(item: &[u8]) -> Result<K, DecodeError> {
    PROTOBUF_ITEMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    K::from_protobuf(item)
}

/// The objects of one list of namespace `ns`, asked for as protobuf or as JSON.
async fn listed<K>(client: &kube::Client, ns: &str, protobuf: bool) -> Vec<K>
where
    K: kube::Resource + FromProtobuf + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Send + 'static,
    K::DynamicType: Default,
{
    use futures::StreamExt as _;
    use kube::runtime::watcher::Event as W;
    let selectors = list_watch::Selectors {
        labels: None,
        fields: Some(format!("metadata.namespace={ns}")),
    };
    let decoder = protobuf.then_some(counted::<K> as list_watch::ProtobufDecoder<K>);
    let mut events = std::pin::pin!(list_watch::events::<K>(client.clone(), selectors, decoder));
    let mut objects = Vec::new();
    loop {
        match events.next().await.expect("the stream never ends") {
            Ok(W::Init) => {}
            Ok(W::InitApply(object)) => objects.push(object),
            Ok(W::InitDone) => return objects,
            other => panic!("listing: {other:?}"),
        }
    }
}

#[tokio::test]
async fn lists_read_as_protobuf_give_the_objects_their_json_gives() {
    let env = TestEnv::shared();
    let ns = env.namespace("src-protobuf").await;
    let last_applied = json!({"metadata": {"annotations": {
        "kubectl.kubernetes.io/last-applied-configuration": "{\"a\": \"long\"}",
        "endpoints.kubernetes.io/last-change-trigger-time": "2026-12-06T01:02:03Z",
    }}});
    let services = [
        json!({
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP",
                     "appProtocol": "http"},
                    {"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"},
                ],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
                "internalTrafficPolicy": "Local",
                "trafficDistribution": "PreferClose",
            }
        }),
        json!({
            "metadata": {"name": "edge", "annotations": last_applied["metadata"]["annotations"]},
            "spec": {
                "type": "LoadBalancer",
                "ports": [{"port": 443, "protocol": "TCP"}],
                "externalTrafficPolicy": "Local",
                "externalIPs": ["192.0.2.7"],
                "loadBalancerSourceRanges": ["198.51.100.0/24"],
                "allocateLoadBalancerNodePorts": true,
            }
        }),
        json!({
            "metadata": {"name": "plain-np"},
            "spec": {"type": "NodePort", "ports": [{"port": 8080}]}
        }),
        json!({
            "metadata": {"name": "headless"},
            "spec": {"clusterIP": "None", "ports": [{"port": 9000}]}
        }),
        json!({
            "metadata": {"name": "away"},
            "spec": {"type": "ExternalName", "externalName": "example.invalid"}
        }),
        json!({
            "metadata": {"name": "both"},
            "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}
        }),
    ];
    for service in services {
        ns.create_service(service).await;
    }
    ns.api::<Service>()
        .patch_status(
            "edge",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [
                {"ip": "192.0.2.10", "ipMode": "VIP",
                 "ports": [{"port": 443, "protocol": "TCP", "error": "Pending"}]},
                {"hostname": "lb.example.invalid"},
            ]}}})),
        )
        .await
        .expect("load balancer status");

    let mut slices = vec![
        slice_json(&ns.name, "web", "web-a", &["10.5.0.1", "10.5.0.2"]),
        slice_json(&ns.name, "web", "web-empty", &[]),
    ];
    slices[0]["metadata"]["annotations"] = last_applied["metadata"]["annotations"].clone();
    slices[0]["endpoints"] = json!([
        {"addresses": ["10.5.0.1"], "conditions": {"ready": true, "serving": true,
         "terminating": false}, "nodeName": "node-a", "zone": "z1", "hostname": "web-0",
         "hints": {"forZones": [{"name": "z1"}]},
         "targetRef": {"kind": "Pod", "namespace": ns.name, "name": "web-0"}},
        {"addresses": ["10.5.0.2"], "conditions": {"ready": false, "serving": true,
         "terminating": true}},
        {"addresses": ["10.5.0.3"], "conditions": {}},
    ]);
    slices[1].as_object_mut().unwrap().remove("ports");
    slices.push(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-v6", "namespace": ns.name,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv6",
        "ports": [{"port": 8080, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"},
                  {"name": "dns", "port": 5353, "protocol": "UDP"}],
        "endpoints": [{"addresses": ["fd00::5"], "conditions": {"ready": true}}],
    }));
    for slice in slices {
        let slice: EndpointSlice = serde_json::from_value(slice).unwrap();
        ns.api::<EndpointSlice>()
            .create(&PostParams::default(), &slice)
            .await
            .expect("create slice");
    }

    let client = env.client().await;
    let json_services: Vec<lean::Service> = listed(&client, &ns.name, false).await;
    let json_slices: Vec<lean::EndpointSlice> = listed(&client, &ns.name, false).await;
    assert_eq!(PROTOBUF_ITEMS.load(std::sync::atomic::Ordering::Relaxed), 0);
    let protobuf_services: Vec<lean::Service> = listed(&client, &ns.name, true).await;
    let protobuf_slices: Vec<lean::EndpointSlice> = listed(&client, &ns.name, true).await;
    assert_eq!(
        PROTOBUF_ITEMS.load(std::sync::atomic::Ordering::Relaxed),
        6 + 3,
        "every item of both lists came as protobuf"
    );
    assert_eq!((json_services.len(), json_slices.len()), (6, 3));
    assert_eq!(protobuf_services, json_services);
    assert_eq!(protobuf_slices, json_slices);
    let named = |name: &str| {
        json_services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("service {name} listed"))
    };
    let edge = named("edge");
    assert!(
        edge.status
            .as_ref()
            .unwrap()
            .load_balancer
            .as_ref()
            .unwrap()
            .ingress
            .is_some(),
        "the test's premise: the status is set"
    );
    let both = named("both");
    assert_eq!(
        both.spec
            .as_ref()
            .unwrap()
            .cluster_ips
            .as_ref()
            .map(Vec::len),
        Some(2),
        "the test's premise: a dual-stack Service"
    );

    // An error answered in protobuf reads as the API server's Status, not as bytes.
    let bad = list_watch::Selectors {
        labels: None,
        fields: Some("spec.nothing=x".into()),
    };
    let decoder = Some(counted::<lean::Service> as list_watch::ProtobufDecoder<lean::Service>);
    let mut refused = std::pin::pin!(list_watch::events(client.clone(), bad, decoder));
    match futures::StreamExt::next(&mut refused).await {
        Some(Err(kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(status)))) => {
            assert_eq!(status.code, 400, "{status:?}");
            assert!(
                status.message.contains("spec.nothing") && status.reason == "BadRequest",
                "{status:?}"
            );
        }
        other => panic!("a refused list: {other:?}"),
    }
}
