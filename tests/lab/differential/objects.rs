//! A [`World`] as the API objects a trial applies: each Service's manifest (metadata and spec),
//! its load balancer status, and its EndpointSlices, as JSON; and the whole world as YAML for a
//! report. Pure: node names are an argument.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::model::{Ep, EpNode, Families, Ingress, IpMode, Kind, ProxyLabel, Slice, Svc, Target};
use super::model::{World, node_of_pod};
use crate::lab::cluster::{Family, zone};
use crate::lab::topology::{pod_gateway, pod_gateway6};

/// The address of lab pod `name` in `family`: what `Lab::start` gives it.
pub fn pod_ip(name: &str, family: Family) -> IpAddr {
    let node = node_of_pod(name);
    let k = name
        .rsplit('-')
        .next()
        .and_then(|s| s.bytes().next())
        .map(|b| b - b'a')
        .unwrap_or_else(|| panic!("not a lab pod name: {name}"));
    match family {
        Family::V4 => {
            let [a, b, c, _] = pod_gateway(node).octets();
            IpAddr::from([a, b, c, 10 + k])
        }
        Family::V6 => {
            let s = pod_gateway6(node).segments();
            IpAddr::from([s[0], s[1], s[2], 0, 0, 0, 0, 0x10 + u16::from(k)])
        }
    }
}

/// The Service's manifest: `metadata.name`, labels and `spec`.
pub fn service(svc: &Svc) -> Value {
    let mut spec = serde_json::Map::new();
    let type_ = match svc.kind {
        Kind::ClusterIp | Kind::Headless => "ClusterIP",
        Kind::NodePort => "NodePort",
        Kind::LoadBalancer { .. } => "LoadBalancer",
        Kind::ExternalName => "ExternalName",
    };
    spec.insert("type".into(), json!(type_));
    match svc.kind {
        Kind::Headless => {
            spec.insert("clusterIP".into(), json!("None"));
        }
        Kind::ExternalName => {
            spec.insert("externalName".into(), json!("backend.example.com"));
        }
        Kind::LoadBalancer {
            allocate_node_ports,
        } => {
            spec.insert(
                "allocateLoadBalancerNodePorts".into(),
                json!(allocate_node_ports),
            );
        }
        Kind::ClusterIp | Kind::NodePort => {}
    }
    if svc.kind != Kind::ExternalName {
        let (policy, families) = match svc.families {
            Families::V4 => ("SingleStack", json!(["IPv4"])),
            Families::V6 => ("SingleStack", json!(["IPv6"])),
            Families::Dual => ("RequireDualStack", json!(["IPv4", "IPv6"])),
        };
        spec.insert("ipFamilyPolicy".into(), json!(policy));
        spec.insert("ipFamilies".into(), families);
    }
    let ports: Vec<Value> = svc
        .ports
        .iter()
        .map(|p| {
            let mut v = json!({
                "port": p.port,
                "protocol": p.proto.k8s(),
                "targetPort": match &p.target {
                    Target::Number(n) => json!(n),
                    Target::Named(name) => json!(name),
                },
            });
            if !p.name.is_empty() {
                v["name"] = json!(p.name);
            }
            v
        })
        .collect();
    spec.insert("ports".into(), json!(ports));
    if !svc.external_ips.is_empty() {
        let ips: Vec<String> = svc.external_ips.iter().map(ToString::to_string).collect();
        spec.insert("externalIPs".into(), json!(ips));
    }
    if !svc.source_ranges.is_empty() {
        spec.insert("loadBalancerSourceRanges".into(), json!(svc.source_ranges));
    }
    if svc.etp_applies() {
        spec.insert("externalTrafficPolicy".into(), json!("Local"));
    }
    if svc.itp_local {
        spec.insert("internalTrafficPolicy".into(), json!("Local"));
    }
    if let Some(timeout) = svc.affinity {
        spec.insert("sessionAffinity".into(), json!("ClientIP"));
        spec.insert(
            "sessionAffinityConfig".into(),
            json!({ "clientIP": { "timeoutSeconds": timeout } }),
        );
    }
    if let Some(d) = svc.distribution {
        spec.insert("trafficDistribution".into(), json!(d));
    }
    let mut metadata = json!({ "name": svc.name });
    if let Some(label) = svc.label {
        metadata["labels"] = label.json();
    }
    json!({ "metadata": metadata, "spec": Value::Object(spec) })
}

/// `status.loadBalancer.ingress`, or `None` when the Service has none.
pub fn ingress(svc: &Svc) -> Option<Value> {
    if svc.ingress.is_empty() {
        return None;
    }
    let entries: Vec<Value> = svc
        .ingress
        .iter()
        .map(|i| match i {
            Ingress::Ip(ip, mode) => json!({
                "ip": ip.to_string(),
                "ipMode": match mode { IpMode::Vip => "VIP", IpMode::Proxy => "Proxy" },
            }),
            Ingress::Hostname(h) => json!({ "hostname": h }),
        })
        .collect();
    Some(json!(entries))
}

/// The slice as an EndpointSlice's `addressType`, `ports` and `endpoints` (metadata is the
/// cluster's to add). `node_names` are the lab's Node names by index.
pub fn slice(slice: &Slice, node_names: &[String]) -> Value {
    let ports: Vec<Value> = slice
        .ports
        .iter()
        .map(|p| json!({ "name": p.name, "port": p.port, "protocol": p.proto.k8s() }))
        .collect();
    let endpoints: Vec<Value> = slice
        .endpoints
        .iter()
        .map(|e| endpoint(e, slice.family, node_names))
        .collect();
    let mut v = json!({
        "addressType": slice.family.k8s(),
        "ports": ports,
        "endpoints": endpoints,
    });
    if let Some(label) = slice.label {
        v["metadata"] = json!({ "labels": label.json() });
    }
    v
}

fn endpoint(e: &Ep, family: Family, node_names: &[String]) -> Value {
    let node = node_of_pod(&e.pod);
    let mut conditions = serde_json::Map::new();
    for (key, value) in [
        ("ready", e.ready),
        ("serving", e.serving),
        ("terminating", e.terminating),
    ] {
        if let Some(v) = value {
            conditions.insert(key.into(), json!(v));
        }
    }
    let mut v = json!({
        "addresses": [pod_ip(&e.pod, family).to_string()],
        "zone": zone(node),
        "conditions": Value::Object(conditions),
        "targetRef": { "kind": "Pod", "name": e.pod },
    });
    if e.node == EpNode::Own {
        v["nodeName"] = json!(node_names[node]);
    }
    let mut hints = serde_json::Map::new();
    if !e.hints.zones.is_empty() {
        let zones: Vec<Value> = e.hints.zones.iter().map(|z| json!({ "name": z })).collect();
        hints.insert("forZones".into(), json!(zones));
    }
    if !e.hints.nodes.is_empty() {
        let nodes: Vec<Value> = e
            .hints
            .nodes
            .iter()
            .map(|&n| json!({ "name": node_names[n] }))
            .collect();
        hints.insert("forNodes".into(), json!(nodes));
    }
    if !hints.is_empty() {
        v["hints"] = Value::Object(hints);
    }
    v
}

/// The world as one YAML stream (`---` between objects), with the lab's node names written as
/// `node-1` … and the namespace left out: what a report prints for a minimal cluster.
pub fn yaml(world: &World) -> String {
    let node_names: Vec<String> = (1..=crate::lab::NODES)
        .map(|i| format!("node-{i}"))
        .collect();
    let mut docs = Vec::new();
    for svc in &world.services {
        let mut s = service(svc);
        s["apiVersion"] = json!("v1");
        s["kind"] = json!("Service");
        if let Some(ingress) = ingress(svc) {
            s["status"] = json!({ "loadBalancer": { "ingress": ingress } });
        }
        docs.push(s);
        for sl in &svc.slices {
            let mut v = slice(sl, &node_names);
            v["apiVersion"] = json!("discovery.k8s.io/v1");
            v["kind"] = json!("EndpointSlice");
            let mut labels = sl.label.map_or_else(|| json!({}), ProxyLabel::json);
            labels["kubernetes.io/service-name"] = json!(svc.name);
            v["metadata"] = json!({ "name": sl.name, "labels": labels });
            docs.push(v);
        }
    }
    docs.iter()
        .map(|d| serde_saphyr::to_string(d).unwrap_or_else(|e| format!("# {e}\n")))
        .collect::<Vec<_>>()
        .join("---\n")
}
