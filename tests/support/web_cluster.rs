//! The smallest cluster the process-level tests give the proxy through `--manifests`: the Node
//! `node-a` (InternalIP 10.0.0.11, pod CIDR 10.244.1.0/24), the Service `web` (ClusterIP
//! 10.96.1.10, TCP 80 → 8080) with one ready endpoint, the pod 10.244.1.10 on node-a, and
//! optionally `empty` (10.96.1.20, the same port) without endpoints.

#![allow(dead_code)] // each test binary uses a part

use std::path::Path;

/// The Node, `web` and its slice.
pub const WEB: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [10.244.1.0/24]}
status: {addresses: [{type: InternalIP, address: 10.0.0.11}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.1.10
  clusterIPs: [10.96.1.10]
  ipFamilies: [IPv4]
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 8080}]
endpoints:
  - addresses: [10.244.1.10]
    conditions: {ready: true, serving: true, terminating: false}
    nodeName: node-a
"#;

/// The Service `empty`, without endpoints.
pub const EMPTY: &str = r#"---
apiVersion: v1
kind: Service
metadata: {name: empty, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.1.20
  clusterIPs: [10.96.1.20]
  ipFamilies: [IPv4]
  ports: [{name: http, protocol: TCP, port: 80, targetPort: 8080}]
"#;

/// Writes the cluster into `dir` as `cluster.yaml`; with `empty`, `empty` too.
pub fn write(dir: &Path, empty: bool) {
    let text = if empty {
        format!("{WEB}{EMPTY}")
    } else {
        WEB.to_owned()
    };
    std::fs::write(dir.join("cluster.yaml"), text).expect("write manifests");
}
