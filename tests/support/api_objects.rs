//! Objects the API-source tests create: a selectorless Service and the JSON of an
//! EndpointSlice for it, in a [`TestNamespace`] of the control plane (`testenv.rs`).

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

use crate::testenv::TestNamespace;

/// A selectorless Service with one TCP port named `http`.
pub async fn service(ns: &TestNamespace, name: &str, labels: serde_json::Value) -> Service {
    ns.create_service(json!({
        "metadata": { "name": name, "labels": labels },
        "spec": { "ports": [{ "name": "http", "port": 80, "protocol": "TCP" }] }
    }))
    .await
}

pub fn slice_json(ns: &str, service: &str, name: &str, ips: &[&str]) -> serde_json::Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": { "kubernetes.io/service-name": service },
        },
        "addressType": "IPv4",
        "ports": [{ "name": "http", "port": 8080, "protocol": "TCP" }],
        "endpoints": ips.iter().map(|ip| json!({
            "addresses": [ip], "conditions": { "ready": true }
        })).collect::<Vec<_>>(),
    })
}
