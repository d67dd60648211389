//! The proxy's core (API source → sync runner → a probe dataplane) against the real control
//! plane of `testenv/`, plus a private kube-apiserver on the shared etcd that tests may kill,
//! restart and run with their own flags (the shared one must stay up for other tests).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube_proxy_rs::cluster::source::api::{self, Reachability};
use kube_proxy_rs::cluster::{Changes, Features, Snapshot, Tracker};
use kube_proxy_rs::config::ClientConnection;
use kube_proxy_rs::dataplane::{Dataplane, SyncError, SyncReport};
use kube_proxy_rs::sync::{Periods, Runner, Status};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::testenv::{ChildGuard, TestEnv, scratch_dir, unique_name, wait_for};

/// The dataplane as an observation point: it keeps the snapshot of the last sync and counts
/// syncs. It programs nothing and never fails.
struct Probe(Arc<Mutex<Seen>>);

#[derive(Default)]
pub struct Seen {
    pub snapshot: Option<Snapshot>,
    pub syncs: u64,
}

impl Dataplane for Probe {
    fn mode(&self) -> &'static str {
        "probe"
    }

    fn sync(&mut self, s: &Snapshot, _: &Changes, full: bool) -> Result<SyncReport, SyncError> {
        let mut seen = self.0.lock().unwrap();
        seen.snapshot = Some(s.clone());
        seen.syncs += 1;
        Ok(SyncReport {
            full,
            families: Vec::new(),
            netlink_messages: 0,
        })
    }
}

/// A client connection to `kubeconfig`, optionally to another server (`--master`).
pub fn connection(kubeconfig: &Path, master: Option<String>) -> ClientConnection {
    ClientConnection {
        kubeconfig: Some(kubeconfig.to_owned()),
        master,
        qps: 200.0,
        burst: 400,
        ..ClientConnection::default()
    }
}

/// A running source and runner. Stopped on drop.
pub struct Live {
    pub status: watch::Receiver<Status>,
    pub reachability: Reachability,
    pub seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

impl Live {
    pub async fn start(connection: &ClientConnection, periods: Periods) -> Live {
        Live::start_listing(connection, periods, api::Lists::Classic).await
    }

    /// [`Live::start`] with lists read as `lists` says.
    pub async fn start_listing(
        connection: &ClientConnection,
        periods: Periods,
        lists: api::Lists,
    ) -> Live {
        let node = unique_name("node");
        // As the proxy runs it: on the source's own thread, lists encoded as the connection's
        // content type says.
        let (events, reachability, _client) =
            api::watch_on_own_thread(connection.clone(), node.clone(), lists)
                .await
                .expect("client");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let runner = Runner::new(
            Tracker::new(&node, Features::default()),
            Box::new(Probe(seen.clone())),
            periods,
        );
        let status = runner.status();
        let task = tokio::spawn(runner.run(events));
        Live {
            status,
            reachability,
            seen,
            task,
        }
    }

    /// Every service port of namespace `ns` in the last synced snapshot, with its endpoints
    /// (`ip:port`, ready ones only) in the first family.
    pub fn ports_in(&self, ns: &str) -> BTreeMap<String, Vec<String>> {
        let seen = self.seen.lock().unwrap();
        let Some(snapshot) = &seen.snapshot else {
            return BTreeMap::new();
        };
        snapshot
            .ports
            .iter()
            .filter(|(name, _)| &*name.service.namespace == ns)
            .map(|(name, state)| {
                let eps = state
                    .families
                    .first()
                    .map(|f| {
                        f.endpoints
                            .iter()
                            .filter(|e| e.ready)
                            .map(|e| format!("{}:{}", e.ip, e.port))
                            .collect()
                    })
                    .unwrap_or_default();
                (name.to_string(), eps)
            })
            .collect()
    }

    /// Waits until the model of `ns` equals `want`.
    pub async fn converges(&self, ns: &str, want: &[(&str, &[&str])], timeout: Duration) {
        let want: BTreeMap<String, Vec<String>> = want
            .iter()
            .map(|(port, eps)| {
                (
                    port.to_string(),
                    eps.iter().map(|e| e.to_string()).collect(),
                )
            })
            .collect();
        wait_for(
            &format!("the model of {ns} to be {want:?}"),
            timeout,
            || {
                let got = self.ports_in(ns);
                let want = want.clone();
                async move {
                    if got == want {
                        Ok(())
                    } else {
                        Err(format!("{got:?}"))
                    }
                }
            },
        )
        .await
    }

    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A kube-apiserver of our own on the shared etcd, with the shared certificates, so the admin
/// kubeconfig works against it with `--master`. Killed (by pid) on drop.
pub struct PrivateApiServer {
    env: TestEnv,
    port: u16,
    flags: Vec<String>,
    dir: PathBuf,
    guard: Option<ChildGuard>,
    starts: u32,
}

impl PrivateApiServer {
    pub async fn start(env: &TestEnv, flags: &[&str]) -> PrivateApiServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let dir = scratch_dir().join(unique_name("apiserver"));
        std::fs::create_dir_all(&dir).expect("apiserver dir");
        let mut server = PrivateApiServer {
            env: env.clone(),
            port,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            dir,
            guard: None,
            starts: 0,
        };
        server.restart().await;
        server
    }

    /// Its port on `127.0.0.1`, the same across restarts.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// SIGKILL by pid, as a crash.
    pub fn kill(&mut self) {
        drop(self.guard.take());
    }

    /// Starts it (again) on the same port and waits until it serves.
    pub async fn restart(&mut self) {
        self.kill();
        self.starts += 1;
        let pki = |f: &str| self.env.state_dir.join("pki").join(f).display().to_string();
        let mut cmd = Command::new(self.env.bin("kube-apiserver"));
        cmd.args([
            format!("--etcd-servers={}", etcd_url(&self.env)),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={}", self.port),
            format!("--cert-dir={}", self.dir.display()),
            format!("--tls-cert-file={}", pki("apiserver.crt")),
            format!("--tls-private-key-file={}", pki("apiserver.key")),
            format!("--client-ca-file={}", pki("ca.crt")),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", pki("sa.pub")),
            format!("--service-account-signing-key-file={}", pki("sa.key")),
            format!("--service-cluster-ip-range={}", self.env.service_cidr),
            "--authorization-mode=RBAC".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ]);
        cmd.args(&self.flags);
        // A post-start hook of the API server can fail for good when it races the shared
        // control plane's own server over the same etcd (the Service IP repair controller's
        // "already exists"); the server then never turns ready. A real node's kubelet would
        // restart it; so does this, twice at most.
        for attempt in 1..=3 {
            let name = format!("private-apiserver-{}-{}-{attempt}", self.port, self.starts);
            self.guard = Some(ChildGuard::spawn(&name, &mut cmd));
            let log = self.guard.as_ref().expect("started").log.clone();
            match self.ready_within(Duration::from_secs(60)).await {
                Ok(()) => return,
                Err(last) if attempt < 3 => {
                    eprintln!(
                        "{name} not ready within 60 s (log {}): {last}; starting it again",
                        log.display()
                    );
                    self.kill();
                }
                Err(last) => panic!(
                    "{name} not ready within 60 s, three times (log {}): {last}",
                    log.display()
                ),
            }
        }
    }

    /// Waits until `/readyz` answers `ok`; the last answer when it did not within `timeout`.
    async fn ready_within(&self, timeout: Duration) -> Result<(), String> {
        let connection = connection(&self.env.kubeconfig, Some(self.url()));
        let (client, _) = api::client(&connection).await.expect("client");
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let ready = client
                .request_text(http::Request::get("/readyz").body(Vec::new()).unwrap())
                .await;
            let last = match ready {
                Ok(text) if text.trim() == "ok" => return Ok(()),
                Ok(text) => text,
                Err(e) => e.to_string(),
            };
            if std::time::Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The shared etcd's client URL, from the control plane's `state.json`.
pub fn etcd_url(env: &TestEnv) -> String {
    let path = env.state_dir.join("state.json");
    let text = std::fs::read_to_string(&path).expect("state.json");
    let state: serde_json::Value = serde_json::from_str(&text).expect("state.json is JSON");
    state["etcd_client_url"]
        .as_str()
        .expect("etcd_client_url")
        .to_owned()
}

/// Compacts etcd's history up to its current revision through the etcd gRPC gateway, so any
/// watch resuming from an older resourceVersion gets 410 Gone. Returns the revision.
pub async fn compact_etcd(env: &TestEnv) -> i64 {
    let url = etcd_url(env);
    // `/` as the key: the response header carries the store's current revision.
    let range = etcd_post(&url, "/v3/kv/range", r#"{"key":"Lw==","limit":1}"#).await;
    let revision: i64 = range["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {range}"));
    let body = format!(r#"{{"revision":"{revision}","physical":true}}"#);
    etcd_post(&url, "/v3/kv/compaction", &body).await;
    revision
}

/// One HTTP/1.1 POST with a JSON body to etcd's plain-HTTP client port.
async fn etcd_post(base: &str, path: &str, body: &str) -> serde_json::Value {
    let authority = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .unwrap_or_else(|e| panic!("connect to etcd at {authority}: {e}"));
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write to etcd");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read from etcd");
    let (head, payload) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "etcd {path}: {head}\n{payload}"
    );
    // The gateway may answer chunked; the JSON object sits between the first `{` and last `}`.
    let json = match (payload.find('{'), payload.rfind('}')) {
        (Some(a), Some(b)) => &payload[a..=b],
        _ => panic!("etcd {path}: no JSON in {payload}"),
    };
    serde_json::from_str(json).unwrap_or_else(|e| panic!("etcd {path}: {e}: {json}"))
}
