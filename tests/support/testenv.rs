//! Test support: a real Kubernetes control plane (etcd, kube-apiserver and
//! kube-controller-manager with the EndpointSlice controllers) from `testenv/`,
//! plus guards for the things tests create around it: namespaces, Nodes,
//! network namespaces, and processes such as upstream kube-proxy.
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
//! away when a test panics. The guards for API objects are in `cluster_objects.rs`,
//! those for network namespaces and processes in `host.rs`; both are re-exported here.

pub use crate::cluster_objects::*;
pub use crate::host::{self, *};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub use crate::layout::repo_root;

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
            // A state directory of the caller's: inside a User-mode Linux guest (the lab in
            // UML), where start-up can outlast testenv's 3 minutes on a slow host.
            run(Command::new(&testenv)
                .arg("up")
                .arg("--timeout=10m")
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

    /// The control plane that `testenv up --state DIR` describes in `DIR/state.json`; also
    /// for callers that start their own (the scale harness's private control planes).
    pub fn load(dir: &Path) -> anyhow::Result<TestEnv> {
        let path = dir.join("state.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("read {}: {e}", path.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
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

    pub(super) async fn client_in(&self, namespace: Option<&str>) -> Client {
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
        TestNamespace::create(self, prefix).await
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
    bridge_apiserver_at(env, netns, env.apiserver_port)
}

/// [`bridge_apiserver`] to another API server of the host (a private one, or a relay in front
/// of one) listening on `127.0.0.1:<port>`: reachable in `netns` at that address.
pub fn bridge_apiserver_at(env: &TestEnv, netns: &NetNs, port: u16) -> ChildGuard {
    let mut child = Command::new(env.bin("testenv"))
        .arg("bridge")
        .arg(format!("--netns={}", netns.name))
        .arg(format!("--to=127.0.0.1:{port}"))
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
