//! The metrics server on `metricsBindAddress` (default `127.0.0.1:10249`): `/metrics`, and, as
//! upstream serves them on the same port, `/healthz` (a plain `ok`), `/proxyMode` and `/configz`.
//!
//! Every route answers GET and HEAD only; any other method gets 405, so nothing on this port
//! can be asked to change state. The caller binds the listener, so it can log or report a bind
//! failure as it sees fit.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::extract::connect_info::Connected;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::IncomingStream;
use tokio::net::TcpListener;

use super::configz::configz;
use super::registry::{CONTENT_TYPE, Metrics};
use crate::config::Config;

/// Prometheus scrape.
pub const METRICS_PATH: &str = "/metrics";
/// The effective configuration as JSON.
pub const CONFIGZ_PATH: &str = "/configz";
/// The proxy mode's name, as plain text (`iptables`, `ipvs`, `nftables`).
pub const PROXY_MODE_PATH: &str = "/proxyMode";
/// Liveness of the metrics server itself: always `ok`.
pub const HEALTHZ_PATH: &str = "/healthz";

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
const JSON: &str = "application/json";

#[derive(Clone)]
struct Shared {
    metrics: Metrics,
    mode: &'static str,
    /// Rendered once: the configuration does not change while the proxy runs.
    configz: Arc<str>,
}

/// The routes, for [`serve`] or for tests that drive the router directly.
pub fn router(metrics: Metrics, config: &Config) -> Router {
    let shared = Shared {
        metrics,
        mode: config.mode.as_str(),
        configz: configz(config).to_string().into(),
    };
    Router::new()
        .route(METRICS_PATH, get(scrape))
        .route(CONFIGZ_PATH, get(show_config))
        .route(PROXY_MODE_PATH, get(proxy_mode))
        .route(HEALTHZ_PATH, get(ok))
        .with_state(shared)
}

/// The address a connection arrived at: the accepted socket's local address. Routes that answer
/// only over loopback read it (as `ConnectInfo<Arrival>`): with the server bound to a wildcard
/// address, a connection to `127.0.0.1` or `::1` arrives at loopback, one to the node's own
/// address does not, whoever made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival(pub Option<SocketAddr>);

impl Arrival {
    /// Whether the connection was made to a loopback address (an IPv4-mapped one included).
    pub fn is_loopback(&self) -> bool {
        self.0.is_some_and(|a| a.ip().to_canonical().is_loopback())
    }
}

impl Connected<IncomingStream<'_, TcpListener>> for Arrival {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Arrival(stream.io().local_addr().ok())
    }
}

/// Serves the metrics routes and those of `extra` on `listener` until the task is dropped or
/// accepting fails; every request carries its connection's [`Arrival`]. The configuration is
/// rendered before the future is returned, so it can be spawned.
pub fn serve(
    listener: TcpListener,
    metrics: Metrics,
    config: &Config,
    extra: Router,
) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
    let app = router(metrics, config)
        .merge(extra)
        .into_make_service_with_connect_info::<Arrival>();
    async move { axum::serve(listener, app).await }
}

fn with_type(content_type: &'static str, body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

async fn scrape(State(s): State<Shared>) -> Response {
    with_type(CONTENT_TYPE, s.metrics.encode())
}

async fn show_config(State(s): State<Shared>) -> Response {
    with_type(JSON, s.configz.to_string())
}

async fn proxy_mode(State(s): State<Shared>) -> Response {
    with_type(TEXT_PLAIN, s.mode)
}

async fn ok() -> Response {
    let mut response = with_type(TEXT_PLAIN, "ok");
    response.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}
