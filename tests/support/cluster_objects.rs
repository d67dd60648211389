//! Guards for the API objects a test creates in the control plane: a namespace of its own
//! (with its Services, Pods and EndpointSlices) and Nodes, each deleted when its guard drops, so
//! also when the test panics. Part of `testenv.rs`, which re-exports it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::testenv::{TestEnv, unique_name};

/// Deletes, on drop, an object created through the API. Runs the delete on
/// its own thread and runtime, so it works from `Drop` inside any test.
fn delete_on_own_runtime(env: &TestEnv, what: String, f: impl AsyncDelete + Send + 'static) {
    let env = env.clone();
    let res = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let client = env.client().await;
            tokio::time::timeout(Duration::from_secs(20), f.delete(client)).await
        })
    })
    .join();
    match res {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("testenv: cleanup: delete {what}: {e}"),
        Ok(Err(_)) => eprintln!("testenv: cleanup: delete {what}: timed out"),
        Err(_) => eprintln!("testenv: cleanup: delete {what}: panicked"),
    }
}

trait AsyncDelete {
    fn delete(self, client: Client) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

struct DeleteNamespace(String);
impl AsyncDelete for DeleteNamespace {
    async fn delete(self, client: Client) -> Result<(), kube::Error> {
        // Without a namespace controller nothing would empty the namespace,
        // and a kube-proxy watching a reused testenv would keep seeing its
        // Services. Pods go at once: no kubelet is there to confirm.
        let services = Api::<Service>::namespaced(client.clone(), &self.0);
        for svc in services.list(&ListParams::default()).await?.items {
            if let Some(name) = svc.metadata.name {
                ignore_not_found(
                    services
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ()),
                )?;
            }
        }
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(client.clone(), &self.0)
            .delete_collection(&now, &ListParams::default())
            .await?;
        Api::<EndpointSlice>::namespaced(client.clone(), &self.0)
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        ignore_not_found(
            Api::<Namespace>::all(client)
                .delete(&self.0, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
    }
}

struct DeleteNode(String);
impl AsyncDelete for DeleteNode {
    async fn delete(self, client: Client) -> Result<(), kube::Error> {
        ignore_not_found(
            Api::<Node>::all(client)
                .delete(&self.0, &DeleteParams::default())
                .await
                .map(|_| ()),
        )
    }
}

fn ignore_not_found(r: Result<(), kube::Error>) -> Result<(), kube::Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// A namespace of one test. Its client defaults to this namespace.
///
/// Dropping it deletes its Services, Pods and EndpointSlices, then the
/// namespace. testenv runs no namespace controller, so the namespace itself
/// stays `Terminating` until `testenv/down`; names are unique, so that does
/// not get in anyone's way.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    env: TestEnv,
}

impl TestNamespace {
    /// Creates a namespace named by [`unique_name`] from `prefix`, with a client that defaults
    /// to it.
    pub async fn create(env: &TestEnv, prefix: &str) -> TestNamespace {
        let name = unique_name(prefix);
        let client = env.client().await;
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "kube-proxy-rs.test/owner": "testenv" } }
        }))
        .unwrap();
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        let client = env.client_in(Some(&name)).await;
        TestNamespace {
            name,
            client,
            env: env.clone(),
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Creates a Service from JSON (`metadata.namespace` is filled in).
    pub async fn create_service(&self, mut svc: serde_json::Value) -> Service {
        svc["metadata"]["namespace"] = json!(self.name);
        let svc: Service = serde_json::from_value(svc).expect("Service JSON");
        self.api::<Service>()
            .create(&PostParams::default(), &svc)
            .await
            .unwrap_or_else(|e| panic!("create service: {e}"))
    }

    /// Creates a Pod bound to `node` with `labels`, then patches its status
    /// to Running and Ready with `ip`, as a kubelet would. No container runs.
    pub async fn create_ready_pod(
        &self,
        name: &str,
        node: &str,
        labels: serde_json::Value,
        ip: &str,
        container_port: u16,
    ) -> Pod {
        let pods = self.api::<Pod>();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "namespace": self.name, "labels": labels },
            "spec": {
                "nodeName": node,
                "containers": [{
                    "name": "app",
                    "image": "example.invalid/app:1",
                    "ports": [{ "containerPort": container_port, "protocol": "TCP" }]
                }]
            }
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
        self.set_pod_ready(name, ip, true).await
    }

    /// Patches a Pod's status as a kubelet would: Running, with `ip`, and the
    /// Ready condition set to `ready`.
    pub async fn set_pod_ready(&self, name: &str, ip: &str, ready: bool) -> Pod {
        let status = if ready { "True" } else { "False" };
        let now = rfc3339_now();
        let patch = json!({
            "status": {
                "phase": "Running",
                "podIP": ip,
                "podIPs": [{ "ip": ip }],
                "startTime": now,
                "conditions": [
                    { "type": "PodScheduled", "status": "True", "lastTransitionTime": now },
                    { "type": "Initialized", "status": "True", "lastTransitionTime": now },
                    { "type": "ContainersReady", "status": status, "lastTransitionTime": now },
                    { "type": "Ready", "status": status, "lastTransitionTime": now }
                ]
            }
        });
        self.api::<Pod>()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("patch status of pod {name}: {e}"))
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        delete_on_own_runtime(
            &self.env,
            format!("namespace {}", self.name),
            DeleteNamespace(self.name.clone()),
        );
    }
}

/// A Node object (cluster-scoped), deleted on drop. Nothing runs on it; it
/// is what kube-proxy's `--hostname-override` names.
pub struct TestNode {
    pub name: String,
    env: TestEnv,
}

impl TestNode {
    /// Creates Node `name` with InternalIP `ip` and a Ready condition.
    pub async fn create(env: &TestEnv, name: &str, ip: &str) -> TestNode {
        TestNode::create_with_ips(env, name, &[ip]).await
    }

    /// Creates Node `name` with an InternalIP for each of `ips` (the first is the primary, as
    /// a kubelet lists them: one per family on a dual-stack node) and a Ready condition.
    pub async fn create_with_ips(env: &TestEnv, name: &str, ips: &[&str]) -> TestNode {
        TestNode::create_labelled(env, name, ips, json!({})).await
    }

    /// [`TestNode::create_with_ips`] with `labels` (a JSON object) on the Node from its
    /// creation, so no reader ever sees it without them (a label patched on afterwards can
    /// be missed by a proxy whose first list came from a watch cache just behind).
    pub async fn create_labelled(
        env: &TestEnv,
        name: &str,
        ips: &[&str],
        labels: serde_json::Value,
    ) -> TestNode {
        let nodes = Api::<Node>::all(env.client().await);
        let mut all =
            json!({ "kubernetes.io/hostname": name, "kube-proxy-rs.test/owner": "testenv" });
        if let (Some(all), Some(extra)) = (all.as_object_mut(), labels.as_object()) {
            all.extend(extra.clone());
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": all }
        }))
        .unwrap();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("create node {name}: {e}"));
        // Built before the patch, so that the guard deletes the Node even if
        // the patch fails.
        let guard = TestNode {
            name: name.to_owned(),
            env: env.clone(),
        };
        let now = rfc3339_now();
        let mut addresses: Vec<serde_json::Value> = ips
            .iter()
            .map(|ip| json!({ "type": "InternalIP", "address": ip }))
            .collect();
        addresses.push(json!({ "type": "Hostname", "address": name }));
        let status = json!({ "status": {
            "addresses": addresses,
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "lastHeartbeatTime": now, "lastTransitionTime": now
            }]
        }});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap_or_else(|e| panic!("patch status of node {name}: {e}"));
        guard
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        delete_on_own_runtime(
            &self.env,
            format!("node {}", self.name),
            DeleteNode(self.name.clone()),
        );
    }
}

/// The current time in whole seconds, RFC 3339, as the API wants it.
pub fn rfc3339_now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    k8s_openapi::jiff::Timestamp::from_second(now)
        .expect("timestamp")
        .to_string()
}
