//! Test support: a real Kubernetes control plane (etcd, kube-apiserver and
//! kube-controller-manager with the EndpointSlice controllers) from `testenv/`,
//! plus guards for the things tests create around it: namespaces, Nodes,
//! network namespaces, and processes such as upstream kube-proxy.
//!
//! Include it from an integration test with
//! `#[path = "support/testenv.rs"] mod testenv;`.
//!
//! [`TestEnv::shared`] gives every test in one test binary the same control
//! plane. It reuses, in this order:
//! 1. the one in `$TESTENV_STATE` (started there by `testenv up --state` if it
//!    is not running yet, and then left running),
//! 2. one started by hand with `testenv/up` (state in `testenv/.state`),
//! 3. otherwise it starts a private one under `target/tmp/` that a watchdog
//!    tears down when the test binary exits, however it exits.
//!
//! Binaries come from `testenv/bin/` (`testenv/build`). When they are missing
//! every test that asks for the control plane fails with that message: it
//! never skips.
//!
//! Everything that a guard creates is removed in its `Drop`, so it also goes
//! away when a test panics.

#![allow(dead_code)] // each test binary uses a different part of this module
#![allow(
    clippy::disallowed_methods,
    reason = "test support is a seam: it starts processes, runs `ip`/`nft` and reads the wall clock"
)]

#[path = "host.rs"]
pub mod host;
pub use host::*;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// The repository root (where `testenv/` lives).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the Go binaries are built by `testenv/build`.
pub fn bin_dir() -> PathBuf {
    repo_root().join("testenv").join("bin")
}

/// A running control plane, as described by its `state.json`.
#[derive(Debug, Clone)]
pub struct TestEnv {
    /// `https://127.0.0.1:PORT`
    pub server: String,
    pub apiserver_port: u16,
    /// Admin (system:masters) kubeconfig.
    pub kubeconfig: PathBuf,
    /// Kubeconfig for the `system:kube-proxy` user: what a real kube-proxy has.
    pub kube_proxy_kubeconfig: PathBuf,
    /// `--service-cluster-ip-range` as the API server got it: `10.96.0.0/12,fd00:10:96::/108`
    /// (dual-stack, IPv4 the primary family).
    pub service_cidr: String,
    pub state_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// `kube-apiserver --version`, e.g. `Kubernetes v1.37.2`.
    pub version: String,
}

static SHARED: OnceLock<Result<TestEnv, String>> = OnceLock::new();

impl TestEnv {
    /// The control plane shared by every test in this test binary, started on
    /// first use. Panics, with the reason, when it cannot be had.
    pub fn shared() -> &'static TestEnv {
        match SHARED.get_or_init(|| Self::acquire().map_err(|e| format!("{e:#}"))) {
            Ok(env) => env,
            Err(e) => panic!("testenv: no control plane: {e}"),
        }
    }

    fn acquire() -> anyhow::Result<TestEnv> {
        let bin = bin_dir();
        let missing: Vec<&str> = [
            "testenv",
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-proxy",
        ]
        .into_iter()
        .filter(|b| !bin.join(b).is_file())
        .collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "{} missing in {}: run `testenv/build` first (needs Go and the Go module proxy; see docs/testing.md)",
                missing.join(", "),
                bin.display()
            );
        }
        let testenv = bin.join("testenv");

        if let Some(dir) = std::env::var_os("TESTENV_STATE") {
            let dir = PathBuf::from(dir);
            run(Command::new(&testenv)
                .arg("up")
                .arg(format!("--state={}", dir.display())))?;
            return Self::load(&dir);
        }

        let by_hand = repo_root().join("testenv").join(".state");
        if by_hand.join("state.json").is_file() {
            let ok = Command::new(&testenv)
                .arg("status")
                .arg(format!("--state={}", by_hand.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                eprintln!(
                    "testenv: reusing the control plane in {}",
                    by_hand.display()
                );
                return Self::load(&by_hand);
            }
        }

        let dir = scratch_dir().join("state");
        let started = Instant::now();
        run(Command::new(&testenv)
            .arg("up")
            .arg("--quiet")
            .arg(format!("--state={}", dir.display()))
            .arg(format!("--exit-with={}", std::process::id())))?;
        eprintln!(
            "testenv: started a private control plane in {:.1}s ({})",
            started.elapsed().as_secs_f64(),
            dir.display()
        );
        Self::load(&dir)
    }

    fn load(dir: &Path) -> anyhow::Result<TestEnv> {
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("read {}: {e}", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text)?;
        let s = |k: &str| -> anyhow::Result<String> {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("{}: no {k}", path.display()))
        };
        Ok(TestEnv {
            server: s("server")?,
            apiserver_port: v["apiserver_port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| anyhow::anyhow!("{}: no apiserver_port", path.display()))?,
            kubeconfig: s("kubeconfig")?.into(),
            kube_proxy_kubeconfig: s("kube_proxy_kubeconfig")?.into(),
            service_cidr: s("service_cidr")?,
            state_dir: dir.to_owned(),
            bin_dir: s("bin_dir")?.into(),
            version: v["version"].as_str().unwrap_or_default().to_owned(),
        })
    }

    /// Path of a binary built by `testenv/build` (`kube-proxy`, `kubectl`, ...).
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// A fresh admin client. Make one per test: a client belongs to the
    /// tokio runtime it was made on, and each `#[tokio::test]` has its own.
    pub async fn client(&self) -> Client {
        self.client_in(None).await
    }

    async fn client_in(&self, namespace: Option<&str>) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("read {}: {e}", self.kubeconfig.display()));
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("kubeconfig");
        if let Some(ns) = namespace {
            config.default_namespace = ns.to_owned();
        }
        Client::try_from(config).expect("kube client")
    }

    /// A new namespace, deleted again when the guard drops. Its name starts
    /// with `prefix` and is unique across test binaries and runs.
    pub async fn namespace(&self, prefix: &str) -> TestNamespace {
        let name = unique_name(prefix);
        let client = self.client().await;
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "kube-proxy-rs.test/owner": "testenv" } }
        }))
        .unwrap();
        Api::<Namespace>::all(client)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
        let client = self.client_in(Some(&name)).await;
        TestNamespace {
            name,
            client,
            env: self.clone(),
        }
    }
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| anyhow::anyhow!("run {cmd:?}: {e}"))?;
    if !out.status.success() {
        anyhow::bail!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A DNS-1123 label: `prefix-<pid>-<n>-<time>`, at most 63 characters.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let mut p: String = prefix
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    p.truncate(30);
    let p = p.trim_matches('-');
    let p = if p.is_empty() { "t" } else { p };
    format!("{p}-{:x}-{n}-{:x}", std::process::id(), nanos & 0xffff)
}

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
        let nodes = Api::<Node>::all(env.client().await);
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": { "kubernetes.io/hostname": name, "kube-proxy-rs.test/owner": "testenv" }
            }
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

/// Polls `f` until it returns `Some`, or panics after `timeout` with `what`
/// and the last value of `last_seen`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match f().await {
            Ok(v) => return v,
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Makes the API server reachable inside `netns` at the same address as on
/// the host (`127.0.0.1:<port>`), so every kubeconfig of the testenv works
/// there unchanged. `testenv bridge` opens the listening socket inside the
/// namespace and dials the API server from the host namespace; no address
/// or route is added anywhere. Stops (by pid) on drop.
pub fn bridge_apiserver(env: &TestEnv, netns: &NetNs) -> ChildGuard {
    let mut child = Command::new(env.bin("testenv"))
        .arg("bridge")
        .arg(format!("--netns={}", netns.name))
        .arg(format!("--to=127.0.0.1:{}", env.apiserver_port))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start testenv bridge");
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    let n = BufReader::new(stdout).read_line(&mut line).unwrap_or(0);
    if n == 0 || !line.starts_with("bridge ready") {
        let _ = child.kill();
        let status = child.wait();
        panic!(
            "testenv bridge into {} did not start: {status:?}",
            netns.name
        );
    }
    ChildGuard {
        name: format!("bridge-{}", netns.name),
        log: PathBuf::from("/dev/null"),
        child,
    }
}

/// Starts upstream kube-proxy (from `testenv/bin`) inside `netns` in
/// nftables mode as node `node`, with the `system:kube-proxy` kubeconfig.
/// The API server must be reachable in the namespace ([`bridge_apiserver`]).
pub fn spawn_upstream_kube_proxy(
    env: &TestEnv,
    netns: &NetNs,
    node: &str,
    extra_args: &[&str],
) -> ChildGuard {
    let mut cmd = netns.command(env.bin("kube-proxy"));
    cmd.arg(format!(
        "--kubeconfig={}",
        env.kube_proxy_kubeconfig.display()
    ))
    .arg("--proxy-mode=nftables")
    .arg(format!("--hostname-override={node}"))
    // nf_conntrack_max cannot be changed inside a network namespace.
    .arg("--conntrack-max-per-core=0")
    .arg("--metrics-bind-address=127.0.0.1:10249")
    .arg("--healthz-bind-address=127.0.0.1:10256")
    .arg("--v=2")
    .args(extra_args);
    ChildGuard::spawn(&format!("kube-proxy-{}", netns.name), &mut cmd)
}
