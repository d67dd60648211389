//! A long-lived TCP connection through a Service while the Service changes: what scenarios 29
//! (graceful termination) and 32 (syncs that do not touch the connection's endpoint) share.
//!
//! The Service has two ports: `one` (80 → 8080) for one-shot probes, and `session` (81 →
//! `echo::SESSION_PORT`), whose server keeps each connection open and answers every line; a
//! session cannot be probed with one-shot connects (its server waits for the client), so port
//! 80 says when both are programmed. Its only endpoint at first is n2-a.

use std::net::SocketAddr;

use serde_json::json;

use super::{cluster_ip, reaches_exactly};
use crate::lab::client::{From, Outcome, addr, replies, request};
use crate::lab::cluster::Endpoint;
use crate::lab::echo::SESSION_PORT;
use crate::lab::helper::Reply;
use crate::lab::{Lab, Proto};

/// The pod every session starts on.
pub const FIRST_POD: &str = "n2-a";

/// The Service's ports, as its slices name them.
pub const PORTS: [(&str, u16, Proto); 2] = [
    ("one", 8080, Proto::Tcp),
    ("session", SESSION_PORT, Proto::Tcp),
];

/// A session Service, programmed, with its slice `<name>-x` holding [`FIRST_POD`].
pub struct SessionService {
    pub name: &'static str,
    /// Its ClusterIP's port 80 (one-shot probes).
    pub vip: SocketAddr,
    /// Its ClusterIP's port 81 (the session).
    pub session_vip: SocketAddr,
}

impl SessionService {
    /// Creates the Service `name` and waits until n1-b reaches [`FIRST_POD`] through it.
    pub async fn start(lab: &Lab, name: &'static str) -> Result<Self, String> {
        let svc = lab
            .cluster
            .apply_service(json!({ "metadata": { "name": name }, "spec": { "ports": [
                { "name": "one", "port": 80, "targetPort": 8080, "protocol": "TCP" },
                { "name": "session", "port": 81, "targetPort": SESSION_PORT, "protocol": "TCP" },
            ]}}))
            .await;
        let s = SessionService {
            name,
            vip: addr(cluster_ip(&svc), 80),
            session_vip: addr(cluster_ip(&svc), 81),
        };
        s.set_endpoints(lab, lab.endpoints(&[FIRST_POD])).await;
        reaches_exactly(lab, client(lab), s.vip, 2, &[FIRST_POD]).await?;
        Ok(s)
    }

    /// Replaces the endpoints of its slice.
    pub async fn set_endpoints(&self, lab: &Lab, endpoints: Vec<Endpoint>) {
        lab.cluster
            .apply_slice(&format!("{}-x", self.name), self.name, &PORTS, &endpoints)
            .await;
    }

    /// Holds a session from n1-b while `change` runs (an exchange every 250 ms, for up to
    /// `secs_per_settle_sec` times the lab's settle time), ending it 12 exchanges (3 s) after
    /// the change is complete; fails when the change failed, an exchange failed, or one was
    /// answered by another pod than [`FIRST_POD`]. The session is reset at its end.
    pub async fn session_stays(
        &self,
        lab: &Lab,
        secs_per_settle_sec: u64,
        change: impl Future<Output = Result<(), String>>,
    ) -> Result<(), String> {
        let attempts = u32::try_from(lab.settle().as_secs() * secs_per_settle_sec * 4)
            .unwrap_or(u32::MAX)
            .max(24);
        let mut session = request(Proto::Tcp, self.session_vip, attempts);
        session.interval_ms = 250;
        session.same_socket = true;
        let (outcomes, changed) = lab
            .probe_during(client(lab), session, change, |o, done_at| {
                o.len() >= done_at + 12
            })
            .await;
        changed?;
        let answered = replies(&outcomes)
            .map_err(|e| format!("the session broke: {e}; all: {}", brief(&outcomes)))?;
        match answered.iter().find(|r| r.pod != FIRST_POD) {
            Some(r) => Err(format!(
                "the session moved to {}: {}",
                r.pod,
                brief(&outcomes)
            )),
            None => Ok(()),
        }
    }
}

/// Where the sessions and probes start.
pub fn client(lab: &Lab) -> From<'_> {
    From::Pod(lab.pod("n1-b"))
}

/// One letter per attempt: the answering pod's node digit, or `x` for a failure.
pub fn brief(outcomes: &[Outcome]) -> String {
    outcomes
        .iter()
        .map(|o| match o.as_ref().ok().and_then(|t| Reply::parse(t)) {
            Some(r) => r.pod.chars().nth(1).unwrap_or('?'),
            None => 'x',
        })
        .collect()
}
