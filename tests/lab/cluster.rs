//! The lab's cluster objects: Nodes whose addresses are the node namespaces' IPs (an IPv4 and an
//! IPv6 InternalIP each, IPv4 first: dual-stack nodes whose primary family is IPv4), and the
//! Services and EndpointSlices scenarios write, in the real API server from `testenv/`, mirrored
//! as JSON into a manifest directory for proxies that read `--manifests DIR`.
//!
//! EndpointSlices are written directly (Services have no selector): scenarios need exact control
//! over conditions, ports split across slices and hints, and no controller delay. Writes use
//! server-side apply, so creating and changing an object is the same call.

#![allow(
    clippy::disallowed_methods,
    reason = "lab seam: mirrors objects into a directory"
)]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use super::helper::Proto;
use super::topology::NodeNet;
use crate::testenv::{TestEnv, TestNamespace, TestNode, unique_name};

/// Field manager of every lab write.
const MANAGER: &str = "kube-proxy-rs-lab";
/// `endpointslice.kubernetes.io/managed-by` of the lab's slices, so controllers leave them alone.
const SLICE_OWNER: &str = "lab.kube-proxy-rs.test";

/// Zone label value of node `index`: node 1 alone in `zone-a`, the others in `zone-b`.
pub fn zone(index: usize) -> &'static str {
    if index == 0 { "zone-a" } else { "zone-b" }
}

/// The lab's API objects. Dropping it deletes the namespace's objects and the Nodes.
pub struct Cluster {
    pub ns: TestNamespace,
    /// Node object names, by node index.
    pub node_names: Vec<String>,
    nodes: Vec<TestNode>,
    pub manifests: PathBuf,
    /// The last version of each Service written, kept after it is deleted, so a check can
    /// still name a deleted Service's address ([`Cluster::service`]).
    written: RefCell<BTreeMap<String, Service>>,
}

/// An IP family, as a slice's `addressType` or a Service's `ipFamilies` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The family of `ip`.
    pub fn of(ip: std::net::IpAddr) -> Family {
        if ip.is_ipv4() { Family::V4 } else { Family::V6 }
    }

    /// `IPv4` or `IPv6`
    pub fn k8s(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }
}

/// One endpoint of a slice.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub ip: String,
    pub node: String,
    pub zone: String,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `hints.forZones`
    pub hint_zones: Vec<String>,
}

impl Endpoint {
    pub fn terminating(mut self) -> Self {
        self.ready = false;
        self.serving = true;
        self.terminating = true;
        self
    }

    pub fn hinted(mut self) -> Self {
        self.hint_zones = vec![self.zone.clone()];
        self
    }
}

impl Cluster {
    /// Creates a namespace named after `prefix` and one Node per node namespace.
    pub async fn create(
        env: &TestEnv,
        prefix: &str,
        nodes: &[NodeNet],
        manifests: &Path,
    ) -> Cluster {
        std::fs::create_dir_all(manifests).expect("manifest dir");
        let ns = env.namespace(prefix).await;
        let mut guards = Vec::new();
        let mut node_names = Vec::new();
        let api = Api::<Node>::all(ns.client.clone());
        for node in nodes {
            let name = unique_name(&format!("{prefix}-n{}", node.index + 1));
            let ips = [node.ip.to_string(), node.ip6.to_string()];
            let ips = ips.each_ref().map(String::as_str);
            let labels = json!({ "topology.kubernetes.io/zone": zone(node.index) });
            let guard = TestNode::create_labelled(env, &name, &ips, labels).await;
            let obj = api
                .get(&name)
                .await
                .unwrap_or_else(|e| panic!("read node {name}: {e}"));
            mirror(manifests, "node", &name, &obj);
            guards.push(guard);
            node_names.push(name);
        }
        Cluster {
            ns,
            node_names,
            nodes: guards,
            manifests: manifests.to_owned(),
            written: RefCell::default(),
        }
    }

    /// Creates or changes a Service (`metadata.name` and `spec` are enough).
    pub async fn apply_service(&self, mut svc: Value) -> Service {
        svc["apiVersion"] = json!("v1");
        svc["kind"] = json!("Service");
        svc["metadata"]["namespace"] = json!(self.ns.name);
        let name = svc["metadata"]["name"].as_str().expect("name").to_owned();
        let obj = self
            .ns
            .api::<Service>()
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&svc),
            )
            .await
            .unwrap_or_else(|e| panic!("apply service {name}: {e}"));
        mirror(&self.manifests, "service", &name, &obj);
        self.written.borrow_mut().insert(name, obj.clone());
        obj
    }

    /// The last version of Service `name` this lab wrote (also once deleted).
    pub fn service(&self, name: &str) -> Option<Service> {
        self.written.borrow().get(name).cloned()
    }

    /// Sets `status.loadBalancer.ingress` of a Service, as a cloud controller would.
    pub async fn set_lb_ingress(&self, name: &str, ingress: Value) -> Service {
        let status = json!({ "status": { "loadBalancer": { "ingress": ingress } } });
        let obj = self
            .ns
            .api::<Service>()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("set load balancer status of {name}: {e}"));
        mirror(&self.manifests, "service", name, &obj);
        self.written
            .borrow_mut()
            .insert(name.to_owned(), obj.clone());
        obj
    }

    /// Creates or replaces IPv4 slice `name` of `service` with `ports` (name, port, protocol).
    pub async fn apply_slice(
        &self,
        name: &str,
        service: &str,
        ports: &[(&str, u16, Proto)],
        endpoints: &[Endpoint],
    ) -> EndpointSlice {
        self.apply_slice_of(Family::V4, name, service, ports, endpoints)
            .await
    }

    /// Creates or replaces slice `name` of `service` with `ports`, of address type `family`.
    pub async fn apply_slice_of(
        &self,
        family: Family,
        name: &str,
        service: &str,
        ports: &[(&str, u16, Proto)],
        endpoints: &[Endpoint],
    ) -> EndpointSlice {
        let ports: Vec<Value> = ports
            .iter()
            .map(|(n, p, proto)| json!({ "name": n, "port": p, "protocol": proto.k8s() }))
            .collect();
        let endpoints: Vec<Value> = endpoints.iter().map(endpoint_json).collect();
        let slice = json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": self.ns.name,
                "labels": {
                    "kubernetes.io/service-name": service,
                    "endpointslice.kubernetes.io/managed-by": SLICE_OWNER,
                },
            },
            "addressType": family.k8s(),
            "ports": ports,
            "endpoints": endpoints,
        });
        let obj = self
            .ns
            .api::<EndpointSlice>()
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&slice),
            )
            .await
            .unwrap_or_else(|e| panic!("apply slice {name}: {e}"));
        mirror(&self.manifests, "endpointslice", name, &obj);
        obj
    }

    /// Creates or replaces slice `name` of `service` from `body` (`addressType`, `ports`,
    /// `endpoints` as JSON, written as given: for conditions left out, hints, endpoints
    /// without a nodeName; and `metadata.labels` beside the lab's own).
    pub async fn apply_slice_json(&self, name: &str, service: &str, body: Value) -> EndpointSlice {
        let mut slice = body;
        let mut labels = slice["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels["kubernetes.io/service-name"] = json!(service);
        labels["endpointslice.kubernetes.io/managed-by"] = json!(SLICE_OWNER);
        slice["apiVersion"] = json!("discovery.k8s.io/v1");
        slice["kind"] = json!("EndpointSlice");
        slice["metadata"] = json!({
            "name": name,
            "namespace": self.ns.name,
            "labels": labels,
        });
        let obj = self
            .ns
            .api::<EndpointSlice>()
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&slice),
            )
            .await
            .unwrap_or_else(|e| panic!("apply slice {name}: {e}\n{slice:#}"));
        mirror(&self.manifests, "endpointslice", name, &obj);
        obj
    }

    pub async fn delete_service(&self, name: &str) {
        self.ns
            .api::<Service>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete service {name}: {e}"));
        unmirror(&self.manifests, "service", name);
    }

    pub async fn delete_slice(&self, name: &str) {
        self.ns
            .api::<EndpointSlice>()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete slice {name}: {e}"));
        unmirror(&self.manifests, "endpointslice", name);
    }

    /// The number of Node objects (kept alive by this value).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }
}

fn endpoint_json(e: &Endpoint) -> Value {
    let mut v = json!({
        "addresses": [e.ip],
        "nodeName": e.node,
        "zone": e.zone,
        "conditions": { "ready": e.ready, "serving": e.serving, "terminating": e.terminating },
    });
    if !e.hint_zones.is_empty() {
        let zones: Vec<Value> = e.hint_zones.iter().map(|z| json!({ "name": z })).collect();
        v["hints"] = json!({ "forZones": zones });
    }
    v
}

/// Writes `obj` as `<dir>/<kind>-<name>.json`, atomically (a hidden temporary file, then rename),
/// so a directory watcher never reads half a file.
fn mirror(dir: &Path, kind: &str, name: &str, obj: &impl Serialize) {
    let text = serde_json::to_string_pretty(obj).expect("object JSON");
    let tmp = dir.join(format!(".{kind}-{name}.json.tmp"));
    std::fs::write(&tmp, text).expect("write manifest");
    std::fs::rename(&tmp, dir.join(format!("{kind}-{name}.json"))).expect("rename manifest");
}

fn unmirror(dir: &Path, kind: &str, name: &str) {
    let _ = std::fs::remove_file(dir.join(format!("{kind}-{name}.json")));
}
