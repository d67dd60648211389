//! The lab's in-namespace processes: the pod echo server and the traffic probe, run by re-executing
//! this very test binary inside a network namespace.
//!
//! Why re-execute the test binary: it is already built by `cargo test`, so the lab needs no extra
//! `[[bin]]` or example, no python and no netcat on the machine. The test binary runs exactly one
//! libtest test, [`ENTRY_TEST`], with [`SPEC_VAR`] holding a JSON [`Spec`]; that test calls
//! [`run_if_requested`], which serves or probes and never returns to libtest for an echo server.
//! Without the variable the entry test is a no-op that passes.
//!
//! Output protocol: every result line a probe prints starts with [`RESULT_PREFIX`] followed by one
//! JSON object, so libtest's own lines are easy to tell apart.

use std::net::{Ipv6Addr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::{echo, probe};

/// The environment variable that turns the entry test into a lab process.
pub const SPEC_VAR: &str = "KPRS_LAB_HELPER";

/// The libtest name of the test that [`run_if_requested`] runs in (see `tests/lab_scenarios.rs`).
pub const ENTRY_TEST: &str = "lab_helper_process";

/// Prefix of every machine-readable line a probe prints.
pub const RESULT_PREFIX: &str = "LAB-RESULT ";

/// What a lab process should do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Spec {
    /// Serve TCP and UDP on `ports` (every IPv4 address, and the pod's IPv6 address `ip6`),
    /// answering each connection or datagram with one [`echo::reply_line`].
    Echo {
        pod: String,
        ports: Vec<u16>,
        ip6: Ipv6Addr,
    },
    /// Open `count` connections (or datagram exchanges) to `target` and print one result each.
    Probe(probe::Request),
    /// As [`Spec::Probe`], but stop early once this process's stdin closes.
    ProbeUntilStdinCloses(probe::Request),
    /// Run many probes, `concurrency` at once, and print one indexed result per attempt.
    ProbeBatch {
        items: Vec<probe::BatchItem>,
        concurrency: usize,
    },
}

/// Runs the lab process described by [`SPEC_VAR`], if it is set; returns at once otherwise.
pub fn run_if_requested() {
    #[allow(
        clippy::disallowed_methods,
        reason = "the lab process reads its role from the environment"
    )]
    let Ok(text) = std::env::var(SPEC_VAR) else {
        return;
    };
    let spec: Spec =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad {SPEC_VAR} ({e}): {text}"));
    match spec {
        Spec::Echo { pod, ports, ip6 } => echo::serve(&pod, &ports, ip6),
        Spec::Probe(request) => probe::run(&request),
        Spec::ProbeUntilStdinCloses(request) => probe::run_until_stdin_closes(&request),
        Spec::ProbeBatch { items, concurrency } => probe::run_batch(&items, concurrency),
    }
}

/// Which transport a probe or an echo reply used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    /// The Kubernetes spelling (`TCP`, `UDP`).
    pub fn k8s(self) -> &'static str {
        match self {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }
}

/// What an echo server said: which pod answered, on which local port, and the peer it saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub pod: String,
    pub proto: Proto,
    /// The client address as the pod saw it (after any SNAT).
    pub src: SocketAddr,
    /// The pod's own address and port the connection arrived on (after DNAT).
    pub dst: SocketAddr,
}

impl Reply {
    /// Parses `pod=NAME proto=tcp src=IP:PORT dst=IP:PORT`.
    pub fn parse(line: &str) -> Option<Reply> {
        let mut pod = None;
        let mut proto = None;
        let mut src = None;
        let mut dst = None;
        for word in line.split_whitespace() {
            let (k, v) = word.split_once('=')?;
            match k {
                "pod" => pod = Some(v.to_owned()),
                "proto" => proto = serde_json::from_value(serde_json::json!(v)).ok(),
                "src" => src = v.parse().ok(),
                "dst" => dst = v.parse().ok(),
                _ => {}
            }
        }
        Some(Reply {
            pod: pod?,
            proto: proto?,
            src: src?,
            dst: dst?,
        })
    }
}
