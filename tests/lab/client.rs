//! Traffic from any lab namespace: runs a probe (see `probe.rs`) there and returns what each
//! attempt got, plus the checks scenarios are written in ("all of these reach a pod",
//! "eventually this fails").
//!
//! Checks return `Result<_, String>` with what was seen, so a scenario reads as a list of `?`s and
//! its failure message says which step failed and why.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::Lab;
use super::helper::{ENTRY_TEST, Proto, RESULT_PREFIX, Reply, SPEC_VAR, Spec};
use super::pods::Pod;
use super::probe::{Attempt, BatchAttempt, BatchItem, Request};
use super::topology::OTHER_CLIENT_IP;
use crate::testenv::NetNs;

/// Where traffic starts.
#[derive(Clone, Copy)]
pub enum From<'a> {
    Pod(&'a Pod),
    /// The external client, from its primary address.
    Client,
    /// The external client, from its second address.
    OtherClient,
    /// A node namespace itself (host network).
    Node(usize),
}

impl std::fmt::Display for From<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            From::Pod(p) => write!(f, "pod {}", p.name),
            From::Client => write!(f, "the external client"),
            From::OtherClient => write!(f, "the external client's other address"),
            From::Node(i) => write!(f, "node {}", i + 1),
        }
    }
}

/// What one attempt got: the server's text, or the error kind (`refused`, `timeout`, …).
pub type Outcome = Result<String, String>;

/// Per-attempt timeout of ordinary probes: the lab's round trips take microseconds.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(1000);

impl Lab {
    /// The node whose cgroup a client in `from` belongs to (eBPF mode): a pod's node, or the
    /// node itself; none for the external client.
    fn node_of(from: From<'_>) -> Option<usize> {
        match from {
            From::Pod(p) => Some(p.node),
            From::Node(i) => Some(i),
            From::Client | From::OtherClient => None,
        }
    }

    fn netns<'a>(&'a self, from: From<'a>) -> &'a NetNs {
        match from {
            From::Pod(p) => &p.ns,
            From::Client | From::OtherClient => &self.topo.client,
            From::Node(i) => &self.topo.nodes[i].ns,
        }
    }

    /// Runs `request` from `from` (its `bind` is set for [`From::OtherClient`]).
    pub async fn probe_with(&self, from: From<'_>, request: Request) -> Vec<Outcome> {
        self.attempts(from, request)
            .await
            .into_iter()
            .map(|a| a.reply.ok_or_else(|| a.error.unwrap_or_default()))
            .collect()
    }

    /// Runs `request` from `from`: every attempt with what it got and how long it took.
    pub async fn attempts(&self, from: From<'_>, mut request: Request) -> Vec<Attempt> {
        if matches!(from, From::OtherClient) {
            request.bind = Some(IpAddr::V4(OTHER_CLIENT_IP));
        }
        let (stdout, stderr) = self.run_helper(from, &Spec::Probe(request.clone())).await;
        let attempts: Vec<Attempt> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(RESULT_PREFIX))
            .map(|l| serde_json::from_str(l).expect("attempt JSON"))
            .collect();
        assert_eq!(
            attempts.len(),
            request.count as usize,
            "probe from {from} to {} printed {} results:\n{stdout}\n{stderr}",
            request.target,
            attempts.len(),
        );
        attempts
    }

    /// Runs many probes from `from` in one process, `concurrency` at once (see
    /// `probe::run_batch`): each item's attempts, by item. An item may have fewer attempts
    /// than its count when it stopped early.
    pub async fn probe_batch(
        &self,
        from: From<'_>,
        mut items: Vec<BatchItem>,
        concurrency: usize,
    ) -> Vec<Vec<Attempt>> {
        if matches!(from, From::OtherClient) {
            for item in &mut items {
                item.request.bind = Some(IpAddr::V4(OTHER_CLIENT_IP));
            }
        }
        let mut by_item = vec![Vec::new(); items.len()];
        let spec = Spec::ProbeBatch { items, concurrency };
        let (stdout, stderr) = self.run_helper(from, &spec).await;
        for line in stdout.lines().filter_map(|l| l.strip_prefix(RESULT_PREFIX)) {
            let a: BatchAttempt = serde_json::from_str(line).expect("batch attempt JSON");
            by_item[a.item].push(a.attempt);
        }
        if by_item.iter().any(Vec::is_empty) {
            panic!("probe batch from {from}: an item printed no attempt:\n{stdout}\n{stderr}");
        }
        by_item
    }

    /// Runs the lab process `spec` in `from`'s namespace (and, in eBPF mode, its node's
    /// cgroup) to its end; its stdout and stderr.
    async fn run_helper(&self, from: From<'_>, spec: &Spec) -> (String, String) {
        let out = self
            .helper_command(from, spec)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("run probe");
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The command that runs the lab process `spec` in `from`'s namespace (and, in eBPF mode,
    /// its node's cgroup), killed when dropped.
    fn helper_command(&self, from: From<'_>, spec: &Spec) -> tokio::process::Command {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = self.netns(from).command(exe);
        cmd.args([
            ENTRY_TEST,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(SPEC_VAR, serde_json::to_string(spec).unwrap());
        if let (Some(lb), Some(node)) = (&self.socket_lb, Self::node_of(from)) {
            cmd = lb.join(node, &cmd);
        }
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        cmd
    }

    /// Runs `request` from `from` while `during` runs, and ends it early once `during` has
    /// finished and `enough` holds of the attempts so far (given how many were made before
    /// `during` finished); it runs to its count when that never happens. A stream sized for a
    /// slow machine so ends as soon as its answer is known. What every attempt made got, and
    /// what `during` returned.
    pub async fn probe_during<T>(
        &self,
        from: From<'_>,
        mut request: Request,
        during: impl Future<Output = T>,
        enough: impl Fn(&[Outcome], usize) -> bool,
    ) -> (Vec<Outcome>, T) {
        if matches!(from, From::OtherClient) {
            request.bind = Some(IpAddr::V4(OTHER_CLIENT_IP));
        }
        let target = request.target;
        let mut child = self
            .helper_command(from, &Spec::ProbeUntilStdinCloses(request))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run probe");
        let mut stdin = child.stdin.take();
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut stderr = child.stderr.take().expect("stderr");
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        let mut during = std::pin::pin!(during);
        let mut finished: Option<(T, usize)> = None;
        let mut attempts = Vec::new();
        let mut stdout = String::new();
        loop {
            tokio::select! {
                out = &mut during, if finished.is_none() => finished = Some((out, attempts.len())),
                line = lines.next_line() => match line {
                    Ok(Some(line)) => {
                        if let Some(json) = line.strip_prefix(RESULT_PREFIX) {
                            let a: Attempt = serde_json::from_str(json).expect("attempt JSON");
                            attempts.push(a.reply.ok_or_else(|| a.error.unwrap_or_default()));
                        }
                        stdout.push_str(&line);
                        stdout.push('\n');
                    }
                    Ok(None) | Err(_) => break,
                },
            }
            if let Some((_, at)) = &finished
                && stdin.is_some()
                && enough(&attempts, *at)
            {
                // Closing stdin tells the probe to stop.
                stdin = None;
            }
        }
        drop(stdin);
        let _ = child.wait().await;
        let result = match finished {
            Some((out, _)) => out,
            None => during.await,
        };
        assert!(
            !attempts.is_empty(),
            "probe from {from} to {target} printed no result:\n{stdout}\n{}",
            stderr.await.unwrap_or_default()
        );
        (attempts, result)
    }

    /// `count` connections (TCP) or exchanges (UDP) from `from` to `target`.
    pub async fn probe(
        &self,
        from: From<'_>,
        proto: Proto,
        target: SocketAddr,
        count: u32,
    ) -> Vec<Outcome> {
        self.probe_with(from, request(proto, target, count)).await
    }

    /// Every one of `count` attempts reached a pod; their replies.
    pub async fn all_reach(
        &self,
        from: From<'_>,
        proto: Proto,
        target: SocketAddr,
        count: u32,
    ) -> Result<Vec<Reply>, String> {
        let outcomes = self.probe(from, proto, target, count).await;
        replies(&outcomes).map_err(|e| format!("{proto:?} from {from} to {target}: {e}"))
    }

    /// Every one of `count` attempts failed, with one of `kinds` (any failure when empty).
    pub async fn all_fail(
        &self,
        from: From<'_>,
        proto: Proto,
        target: SocketAddr,
        count: u32,
        kinds: &[&str],
    ) -> Result<(), String> {
        let outcomes = self.probe(from, proto, target, count).await;
        let bad: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| match o {
                Ok(_) => true,
                Err(kind) => !kinds.is_empty() && !kinds.contains(&kind.as_str()),
            })
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "{proto:?} from {from} to {target}: wanted every attempt to fail ({kinds:?}), got {bad:?}"
            ))
        }
    }

    /// Polls `check` until it succeeds or [`Lab::settle`] passes; the last error otherwise.
    pub async fn eventually<T, F, Fut>(&self, what: &str, mut check: F) -> Result<T, String>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = tokio::time::Instant::now() + self.settle();
        loop {
            match check().await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(format!("{what}: not within {:?}: {e}", self.settle()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

/// A probe request with the ordinary timeout and no pause between attempts.
pub fn request(proto: Proto, target: SocketAddr, count: u32) -> Request {
    Request {
        proto,
        target,
        count,
        timeout_ms: u64::try_from(ATTEMPT_TIMEOUT.as_millis()).unwrap(),
        bind: None,
        send: None,
        interval_ms: 0,
        same_socket: false,
    }
}

/// The echo replies of `outcomes`, or what went wrong with the first attempt that got none.
pub fn replies(outcomes: &[Outcome]) -> Result<Vec<Reply>, String> {
    outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| match o {
            Ok(text) => Reply::parse(text)
                .ok_or_else(|| format!("attempt {i}: not an echo reply: {text:?}")),
            Err(kind) => Err(format!("attempt {i} of {}: {kind}", outcomes.len())),
        })
        .collect()
}

/// The pods that answered.
pub fn pods_of(replies: &[Reply]) -> BTreeSet<String> {
    replies.iter().map(|r| r.pod.clone()).collect()
}

/// `Ok` when `got` equals `want` (pod names), with both in the error otherwise.
pub fn expect_pods(what: &str, replies: &[Reply], want: &[&str]) -> Result<(), String> {
    let got = pods_of(replies);
    let want: BTreeSet<String> = want.iter().map(|s| (*s).to_owned()).collect();
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: answered by {got:?}, wanted {want:?}"))
    }
}

/// `ip:port`
pub fn addr(ip: impl Into<IpAddr>, port: u16) -> SocketAddr {
    SocketAddr::new(ip.into(), port)
}
