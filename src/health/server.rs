//! The proxy health server: `/healthz` and `/livez` on `healthzBindAddress` (default
//! `0.0.0.0:10256`).
//!
//! `/livez` answers whether the proxy keeps its rules current; `/healthz` additionally whether
//! this Node should receive traffic (kubelet probes use the former, cloud load balancers the
//! latter). Both count their answers in `kubeproxy_proxy_{healthz,livez}_total{code}`. They
//! answer GET and HEAD only; any other method gets 405. The caller binds the listener, so it
//! can log or report a bind failure as it sees fit.
//!
//! The same two answers are also served under `/kube-proxy-rs/` ([`OURS_HEALTHZ_PATH`],
//! [`OURS_LIVEZ_PATH`]), paths upstream kube-proxy's health server answers with 404: a kubelet
//! probe that asks there can only be answered by this proxy, never by another proxy holding
//! the port on the same node (upstream kube-proxy during a node-by-node migration, while this
//! one keeps retrying its bind).

use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use tokio::net::TcpListener;

use super::response::{self, Answer};
use super::shared::SharedHealth;
use crate::metrics::{Metrics, Probe};

/// Whether the proxy keeps its rules current and this Node may receive traffic.
pub const HEALTHZ_PATH: &str = "/healthz";
/// Whether the proxy keeps its rules current; the Node's state does not count.
pub const LIVEZ_PATH: &str = "/livez";
/// [`HEALTHZ_PATH`] under a prefix only kube-proxy-rs serves (the DaemonSet's readiness probe).
pub const OURS_HEALTHZ_PATH: &str = "/kube-proxy-rs/healthz";
/// [`LIVEZ_PATH`] under a prefix only kube-proxy-rs serves (the DaemonSet's liveness probe).
pub const OURS_LIVEZ_PATH: &str = "/kube-proxy-rs/livez";

#[derive(Clone)]
struct Shared {
    health: SharedHealth,
    metrics: Metrics,
}

/// The routes, for [`serve`] or for tests that drive the router directly.
pub fn router(health: SharedHealth, metrics: Metrics) -> Router {
    Router::new()
        .route(HEALTHZ_PATH, get(healthz))
        .route(LIVEZ_PATH, get(livez))
        .route(OURS_HEALTHZ_PATH, get(healthz))
        .route(OURS_LIVEZ_PATH, get(livez))
        .with_state(Shared { health, metrics })
}

/// Serves `/healthz` and `/livez` on `listener` until the task is dropped or accepting fails.
pub async fn serve(
    listener: TcpListener,
    health: SharedHealth,
    metrics: Metrics,
) -> std::io::Result<()> {
    axum::serve(listener, router(health, metrics)).await
}

async fn healthz(State(s): State<Shared>) -> Answer {
    let now = now();
    let answer = response::proxy(&s.health.status(now), Some(s.health.node_eligible()), now);
    s.metrics.count_probe(Probe::Healthz, answer.code.as_u16());
    answer
}

async fn livez(State(s): State<Shared>) -> Answer {
    let now = now();
    let answer = response::proxy(&s.health.status(now), None, now);
    s.metrics.count_probe(Probe::Livez, answer.code.as_u16());
    answer
}

/// The current wall time: answers are about "now", and `currentTime` reports it.
#[allow(clippy::disallowed_methods)] // the server's edge: the one place health reads the clock
pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}
