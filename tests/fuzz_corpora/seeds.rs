//! Writes the seeds of the API list targets (`fuzz/corpus/json_list/`, `protobuf_list/`):
//! the objects of `examples/cluster` as the API server sends their lists, JSON lists of each
//! kind and protobuf lists of Services and EndpointSlices (the envelope `k8s\0` + a
//! `runtime.Unknown` holding the list). The netlink seeds come from the kernel itself
//! (`fuzz/capture-seeds`); the other targets' seeds are the repository's files as they are.
//! Run by hand, not in the suite: `cargo test --test fuzz_corpora -- --ignored`.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::api::discovery::v1 as pb_discovery;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime as pb_runtime;
use k8s_pb::apimachinery::pkg::util::intstr as pb_intstr;
use kube_proxy_rs::cluster::source::api::protobuf_objects::FromProtobuf;
use kube_proxy_rs::cluster::source::api::protobuf_split::Splitter;
use kube_proxy_rs::cluster::source::lean::{EndpointSlice, Service};
use kube_proxy_rs::cluster::source::{Object, manifests};
use prost::Message as _;

fn example_objects() -> Vec<Object> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cluster");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("examples/cluster")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "json"))
        .collect();
    paths.sort();
    let mut objects = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("a manifest");
        objects.extend(manifests::parse(&text, &path.display().to_string()).objects);
    }
    objects
}

fn json_list(kind: &str, api_version: &str, items: Vec<serde_json::Value>) -> Vec<u8> {
    let list = serde_json::json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": {"resourceVersion": "48151623"},
        "items": items,
    });
    serde_json::to_vec(&list).expect("JSON")
}

fn meta(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> pb_meta::ObjectMeta {
    pb_meta::ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn service_pb(s: &Service) -> pb_core::Service {
    let spec = s.spec.clone().unwrap_or_default();
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| pb_core::ServicePort {
            name: p.name,
            protocol: p.protocol,
            app_protocol: p.app_protocol,
            port: Some(p.port),
            target_port: p.target_port.map(|t| match t {
                IntOrString::Int(i) => pb_intstr::IntOrString {
                    r#type: Some(0),
                    int_val: Some(i),
                    str_val: None,
                },
                IntOrString::String(s) => pb_intstr::IntOrString {
                    r#type: Some(1),
                    int_val: None,
                    str_val: Some(s),
                },
            }),
            node_port: p.node_port,
        });
    let ingress = s
        .status
        .iter()
        .flat_map(|st| st.load_balancer.iter())
        .flat_map(|lb| lb.ingress.iter().flatten())
        .map(|i| pb_core::LoadBalancerIngress {
            ip: i.ip.clone(),
            hostname: i.hostname.clone(),
            ip_mode: i.ip_mode.clone(),
            ports: Vec::new(),
        });
    pb_core::Service {
        metadata: Some(meta(&s.metadata)),
        spec: Some(pb_core::ServiceSpec {
            r#type: spec.type_,
            cluster_ip: spec.cluster_ip,
            cluster_ips: spec.cluster_ips.unwrap_or_default(),
            external_ips: spec.external_ips.unwrap_or_default(),
            ports: ports.collect(),
            session_affinity: spec.session_affinity,
            session_affinity_config: spec.session_affinity_config.map(|c| {
                pb_core::SessionAffinityConfig {
                    client_ip: c.client_ip.map(|ip| pb_core::ClientIpConfig {
                        timeout_seconds: ip.timeout_seconds,
                    }),
                }
            }),
            external_traffic_policy: spec.external_traffic_policy,
            internal_traffic_policy: spec.internal_traffic_policy,
            health_check_node_port: spec.health_check_node_port,
            load_balancer_source_ranges: spec.load_balancer_source_ranges.unwrap_or_default(),
            allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports,
            traffic_distribution: spec.traffic_distribution,
            ..Default::default()
        }),
        status: Some(pb_core::ServiceStatus {
            load_balancer: Some(pb_core::LoadBalancerStatus {
                ingress: ingress.collect(),
            }),
            ..Default::default()
        }),
    }
}

fn slice_pb(s: &EndpointSlice) -> pb_discovery::EndpointSlice {
    pb_discovery::EndpointSlice {
        metadata: Some(meta(&s.metadata)),
        address_type: Some(s.address_type.clone()),
        endpoints: s
            .endpoints
            .iter()
            .map(|e| pb_discovery::Endpoint {
                addresses: e.addresses.clone(),
                conditions: e
                    .conditions
                    .as_ref()
                    .map(|c| pb_discovery::EndpointConditions {
                        ready: c.ready,
                        serving: c.serving,
                        terminating: c.terminating,
                    }),
                node_name: e.node_name.clone(),
                zone: e.zone.clone(),
                hints: e.hints.as_ref().map(|h| pb_discovery::EndpointHints {
                    for_zones: (h.for_zones.iter().flatten())
                        .map(|z| pb_discovery::ForZone {
                            name: Some(z.name.clone()),
                        })
                        .collect(),
                    for_nodes: (h.for_nodes.iter().flatten())
                        .map(|n| pb_discovery::ForNode {
                            name: Some(n.name.clone()),
                        })
                        .collect(),
                }),
                ..Default::default()
            })
            .collect(),
        ports: (s.ports.iter().flatten())
            .map(|p| pb_discovery::EndpointPort {
                name: p.name.clone(),
                protocol: p.protocol.clone(),
                port: p.port,
                app_protocol: p.app_protocol.clone(),
            })
            .collect(),
    }
}

/// A protobuf list body: `k8s\0`, then the `runtime.Unknown` whose `raw` is the list message
/// (field 1 its `ListMeta`, field 2 each item).
fn protobuf_list(api_version: &str, kind: &str, items: Vec<Vec<u8>>) -> Vec<u8> {
    let list_meta = pb_meta::ListMeta {
        resource_version: Some("48151623".to_owned()),
        ..Default::default()
    };
    let mut list = Vec::new();
    prost::encoding::message::encode(1, &list_meta, &mut list);
    for item in &items {
        prost::encoding::bytes::encode(2, item, &mut list);
    }
    let envelope = pb_runtime::Unknown {
        type_meta: Some(pb_runtime::TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw: Some(list),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = b"k8s\0".to_vec();
    body.extend(envelope.encode_to_vec());
    body
}

#[test]
#[allow(
    clippy::disallowed_methods,
    reason = "writing the corpus files is what this does"
)]
#[ignore = "writes fuzz/corpus seeds: cargo test --test fuzz_corpora -- --ignored"]
fn write_api_list_seeds() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut json: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    let (mut services, mut slices) = (Vec::new(), Vec::new());
    for object in example_objects() {
        let (list, value) = match &object {
            Object::Service(s) => {
                services.push(service_pb(s).encode_to_vec());
                ("ServiceList", serde_json::to_value(s))
            }
            Object::EndpointSlice(s) => {
                slices.push(slice_pb(s).encode_to_vec());
                ("EndpointSliceList", serde_json::to_value(s))
            }
            Object::Node(n) => ("NodeList", serde_json::to_value(n)),
            Object::ServiceCidr(c) => ("ServiceCIDRList", serde_json::to_value(c)),
        };
        json.entry(list).or_default().push(value.expect("JSON"));
    }
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).expect("the corpus directory");
        std::fs::write(dir.join(name), bytes).expect("a seed");
    };
    for (kind, items) in json {
        let api_version = match kind {
            "EndpointSliceList" => "discovery.k8s.io/v1",
            "ServiceCIDRList" => "networking.k8s.io/v1",
            _ => "v1",
        };
        let name = format!("examples-{}.json", kind.to_lowercase());
        write("json_list", &name, &json_list(kind, api_version, items));
    }
    // Every item reads back through the proxy's own splitter and decoder.
    let decoded = |body: &[u8], decode: fn(&[u8]) -> bool| {
        let mut splitter = Splitter::default();
        let mut items = 0;
        splitter
            .feed(body, |item| {
                assert!(decode(item), "a seed's item decodes");
                items += 1;
            })
            .expect("a whole list");
        assert!(
            splitter.finish().expect("a whole list").is_some(),
            "list metadata"
        );
        items
    };
    let count = (services.len(), slices.len());
    let services = protobuf_list("v1", "ServiceList", services);
    assert_eq!(
        decoded(&services, |i| Service::from_protobuf(i).is_ok()),
        count.0
    );
    write("protobuf_list", "examples-servicelist.pb", &services);
    let slices = protobuf_list("discovery.k8s.io/v1", "EndpointSliceList", slices);
    assert_eq!(
        decoded(&slices, |i| EndpointSlice::from_protobuf(i).is_ok()),
        count.1
    );
    write("protobuf_list", "examples-endpointslicelist.pb", &slices);
}
