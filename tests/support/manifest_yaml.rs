//! YAML documents of the objects tests give the proxy as manifests (`--manifests`, or
//! `load_manifests`): a Node, a Service with one port and the EndpointSlice of its endpoints,
//! the Service and slice in `default`. A test joins them with [`documents`] and spells only
//! what it varies. Used by the tests and support modules that write manifests, and by
//! `examples/userspace_relay.rs`.

/// One port of a Service: its name and protocol, the Service's port, the pods' port and, for a
/// NodePort Service, the node port.
#[derive(Clone, Copy)]
pub struct Port {
    pub name: &'static str,
    pub protocol: &'static str,
    pub port: u16,
    pub target: u16,
    pub node_port: Option<u16>,
}

/// `http`: TCP 80 → 8080.
pub const HTTP: Port = Port {
    name: "http",
    protocol: "TCP",
    port: 80,
    target: 8080,
    node_port: None,
};

/// `dns`: UDP 53 → 5353.
pub const DNS: Port = Port {
    name: "dns",
    protocol: "UDP",
    port: 53,
    target: 5353,
    node_port: None,
};

/// Spec lines of a ClusterIP Service of IPv4 alone, as the API server fills them in.
pub const CLUSTER_IP_V4: &str = "  type: ClusterIP\n  ipFamilies: [IPv4]\n";

/// Spec lines of ClientIP session affinity for 60 s.
pub const STICKY: &str =
    "  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}\n";

impl Port {
    /// The same port on the nodes' `node_port` too.
    pub const fn on_node_port(self, node_port: u16) -> Port {
        Port {
            node_port: Some(node_port),
            ..self
        }
    }
}

/// The documents as one manifest file's text.
pub fn documents(docs: &[String]) -> String {
    docs.join("---\n")
}

/// The Node `name` with `internal_ip`, and `pod_cidr` when given.
pub fn node(name: &str, internal_ip: &str, pod_cidr: Option<&str>) -> String {
    let spec = pod_cidr.map_or(String::new(), |c| format!("spec: {{podCIDRs: [{c}]}}\n"));
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n{spec}\
         status: {{addresses: [{{type: InternalIP, address: {internal_ip}}}]}}\n"
    )
}

/// The Service `name` at `cluster_ip` with `port`; `spec` is more lines of its spec (its type,
/// families, policies), each indented by two spaces and ended by a newline.
pub fn service(name: &str, cluster_ip: &str, port: Port, spec: &str) -> String {
    let Port {
        name: port_name,
        protocol,
        port,
        target,
        node_port,
    } = port;
    let node_port = node_port.map_or(String::new(), |n| format!(", nodePort: {n}"));
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n\
         {spec}  clusterIP: {cluster_ip}\n  clusterIPs: [{cluster_ip}]\n  \
         ports: [{{name: {port_name}, protocol: {protocol}, port: {port}, targetPort: {target}{node_port}}}]\n"
    )
}

/// The EndpointSlice `<service>-1` of the Service `service` on `port`'s pod port; `endpoints`
/// are its list's items ([`ready`], [`serving_on`]), last in the document, so that a test may
/// append to the list.
pub fn slice(service: &str, port: Port, endpoints: &str) -> String {
    let Port {
        name,
        protocol,
        target,
        ..
    } = port;
    format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-1\n  \
         namespace: default\n  labels: {{kubernetes.io/service-name: {service}}}\n\
         addressType: IPv4\nports: [{{name: {name}, protocol: {protocol}, port: {target}}}]\n\
         endpoints:\n{endpoints}"
    )
}

/// An endpoint at `address`, ready, on no node named.
pub fn ready(address: &str) -> String {
    format!("  - addresses: [\"{address}\"]\n    conditions: {{ready: true}}\n")
}

/// An endpoint at `address` on the node `node`, ready.
pub fn ready_on(address: &str, node: &str) -> String {
    format!(
        "  - addresses: [\"{address}\"]\n    conditions: {{ready: true}}\n    nodeName: {node}\n"
    )
}

/// An endpoint at `address` on the node `node`, ready and serving, not terminating.
pub fn serving_on(address: &str, node: &str) -> String {
    format!(
        "  - addresses: [{address}]\n    \
         conditions: {{ready: true, serving: true, terminating: false}}\n    nodeName: {node}\n"
    )
}

/// An endpoint at `address` on the node `node`, terminating but still serving.
pub fn terminating_on(address: &str, node: &str) -> String {
    format!(
        "  - addresses: [{address}]\n    \
         conditions: {{ready: false, serving: true, terminating: true}}\n    nodeName: {node}\n"
    )
}

/// The object document `doc` (from [`service`]) with the annotation `key: value`.
pub fn with_annotation(doc: &str, key: &str, value: &str) -> String {
    doc.replacen(
        "namespace: default}",
        &format!("namespace: default, annotations: {{{key}: {value}}}}}"),
        1,
    )
}
