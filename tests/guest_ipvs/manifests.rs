//! The manifests the guest's proxy reads (see `guest_ipvs.rs`).

use super::*;

/// `pair` and `sticky` (annotated with `scheduler`), both with the two server pods as
/// endpoints, the second one terminating when `terminating`; written in place, which the
/// proxy's directory watch sees.
pub(super) fn write_pair(dir: &std::path::Path, scheduler: &str, terminating: bool) {
    let mut yaml = String::new();
    for (name, ip, annotation) in [
        ("pair", PAIR_IP, String::new()),
        (
            "sticky",
            STICKY_IP,
            format!("  annotations:\n    ipvs.kube-proxy-rs.io/scheduler: {scheduler}\n"),
        ),
    ] {
        let second = if terminating {
            "{ready: false, serving: true, terminating: true}"
        } else {
            "{ready: true, serving: true, terminating: false}"
        };
        yaml.push_str(&format!(
            r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
{annotation}spec:
  clusterIP: {ip}
  clusterIPs: [{ip}]
  ipFamilies: [IPv4]
  ports:
  - name: http
    protocol: TCP
    port: {PORT}
    targetPort: {TARGET_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {name}-1
  namespace: default
  labels:
    kubernetes.io/service-name: {name}
addressType: IPv4
ports:
- name: http
  protocol: TCP
  port: {TARGET_PORT}
endpoints:
- addresses: [{SERVER_POD}]
  conditions: {{ready: true, serving: true, terminating: false}}
  nodeName: guest-node
- addresses: [{SECOND_SERVER_POD}]
  conditions: {second}
  nodeName: guest-node
---
"#
        ));
    }
    std::fs::write(dir.join("pair.yaml"), yaml).expect("write pair.yaml");
}

/// The cluster the guest's proxy reads: its Node, a NodePort Service with the server pod as
/// endpoint, and a Service without endpoints.
pub(super) fn manifests() -> String {
    format!(
        r#"apiVersion: v1
kind: Node
metadata:
  name: guest-node
status:
  addresses:
  - type: InternalIP
    address: {NODE_IP}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: NodePort
  clusterIP: {CLUSTER_IP}
  clusterIPs: [{CLUSTER_IP}]
  ipFamilies: [IPv4]
  ports:
  - name: http
    protocol: TCP
    port: {PORT}
    targetPort: {TARGET_PORT}
    nodePort: {NODE_PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  protocol: TCP
  port: {TARGET_PORT}
endpoints:
- addresses: [{SERVER_POD}]
  conditions: {{ready: true, serving: true, terminating: false}}
  nodeName: guest-node
---
apiVersion: v1
kind: Service
metadata:
  name: empty
  namespace: default
spec:
  clusterIP: {NO_ENDPOINTS_IP}
  clusterIPs: [{NO_ENDPOINTS_IP}]
  ipFamilies: [IPv4]
  ports:
  - name: http
    protocol: TCP
    port: {PORT}
    targetPort: {TARGET_PORT}
"#
    )
}
