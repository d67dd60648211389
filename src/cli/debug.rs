//! The running proxy's read-only debug endpoints, served beside `/metrics`, so `kubectl exec`
//! or a port-forward can ask the proxy itself what it knows:
//! - `GET /debug/services[?service=NS/NAME][&output=json]`: every service port of the model
//!   (the `plan` report: frontends, the endpoints chosen per policy, why others were left out);
//! - `GET /debug/explain?to=ADDR:PORT[/udp][&from=pod|node|outside|ADDR][&in_interface=IF]
//!   [&output=json]`: `explain` of one packet, over what this node's kernel holds;
//! - `GET /debug/status[?service=NS/NAME[:PORT]][&output=json]`: `status`, every service port
//!   with its frontends, endpoints programmed and in the model, policies, health check and
//!   drift, and the runner's last sync;
//! - `GET /debug/`: an index of the above.
//!
//! They answer only connections made to a loopback address (`127.0.0.1`, `::1`): with the
//! metrics server on its default `127.0.0.1:10249` that is every connection; bound to a
//! wildcard (`0.0.0.0:10249`, for a scraper on another host), a connection to the node's own
//! address gets 403 on `/debug` while `/metrics` answers, so what they reveal of the node's
//! Services and rules stays on the node. GET and HEAD only; any other method gets 405.
//!
//! The model comes from the runner ([`Peek`]), never from the tracker directly; the work runs
//! on a blocking thread. Bad parameters get 400 and one line naming the parameter; every value
//! in an answer is escaped by the renderers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use super::explain::{self, Request};
use super::plan;
use super::status::{self, Runtime, SyncSummary};
use crate::cluster::{IpFamily, ServiceKey};
use crate::config::Config;
use crate::health::service::Serving;
use crate::metrics::server::Arrival;
use crate::sync::{Peek, Status};

pub const SERVICES_PATH: &str = "/debug/services";
pub const EXPLAIN_PATH: &str = "/debug/explain";
pub const STATUS_PATH: &str = "/debug/status";
pub const INDEX_PATH: &str = "/debug/";

/// What `/debug/` answers: every endpoint this server has, with its parameters.
pub const INDEX: &str = "\
kube-proxy-rs debug endpoints (read-only; add output=json for JSON):
/debug/services[?service=NS/NAME]
    every service port of the proxy's model: frontends, the endpoints chosen per policy, why
    others were left out (what `kube-proxy-rs plan` prints)
/debug/explain?to=ADDR:PORT[/tcp|udp|sctp][&from=pod|node|outside|ADDR][&in_interface=IF]
    where the first packet of one connection goes on this node, and why, over the rules in the
    kernel (what `kube-proxy-rs explain` prints)
/debug/status[?service=NS/NAME[:PORT]]
    every service port with its frontends, endpoints programmed and in the model, policies,
    health check and drift, and the last sync (what `kube-proxy-rs status` prints)
Beside them: /metrics, /healthz, /configz, /proxyMode.
";

/// Query strings longer than this are refused before they are parsed.
const MAX_QUERY: usize = 1024;

/// What the running proxy shares with its debug endpoints.
#[derive(Clone)]
pub struct Handles {
    /// The runner's model.
    pub peek: Peek,
    pub config: Arc<Config>,
    /// The runner's syncs.
    pub sync: watch::Receiver<Status>,
    /// How each Service health check is served.
    pub health_checks: watch::Receiver<Arc<BTreeMap<ServiceKey, Serving>>>,
}

type Shared = Handles;

/// Why an endpoint refuses a request (400): one line naming the parameter, or why the packet
/// cannot be explained.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("output: expected table or json")]
    Output,
    #[error("query: longer than {MAX_QUERY} bytes")]
    TooLong,
    #[error("to: required (ADDRESS:PORT[/tcp|udp|sctp])")]
    NoDestination,
    #[error(transparent)]
    Request(#[from] explain::request::Error),
    #[error(transparent)]
    Service(#[from] status::BadService),
    #[error(transparent)]
    Explain(#[from] explain::live::Error),
}

/// The debug routes, to merge into the metrics server's.
pub fn router(handles: Handles) -> Router {
    Router::new()
        .route(SERVICES_PATH, get(services))
        .route(EXPLAIN_PATH, get(explain_one))
        .route(STATUS_PATH, get(status_all))
        .route(INDEX_PATH, get(index))
        .route("/debug", get(index))
        .route_layer(middleware::from_fn(loopback_only))
        .with_state(handles)
}

/// What a connection that did not arrive at a loopback address is told.
pub const NOT_LOOPBACK: &str =
    "the /debug endpoints answer only over loopback: ask 127.0.0.1 or ::1 on the node\n";

/// Passes requests whose connection arrived at a loopback address; 403 for the rest, and for
/// a server that does not record arrivals.
async fn loopback_only(request: axum::extract::Request, next: Next) -> Response {
    let arrived = request
        .extensions()
        .get::<ConnectInfo<Arrival>>()
        .is_some_and(|ConnectInfo(a)| a.is_loopback());
    if arrived {
        next.run(request).await
    } else {
        (StatusCode::FORBIDDEN, NOT_LOOPBACK).into_response()
    }
}

type Params = Query<HashMap<String, String>>;

async fn index() -> Response {
    typed(false, INDEX.to_owned())
}

async fn services(State(s): State<Shared>, Query(q): Params) -> Response {
    if let Some(bad) = too_long(&q) {
        return bad;
    }
    let json = match output(&q) {
        Ok(j) => j,
        Err(e) => return bad_request(e),
    };
    let Some(snapshot) = s.peek.snapshot().await else {
        return unavailable();
    };
    let service = q.get("service").cloned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut report = plan::report(&snapshot, &[], &[]);
        drop(snapshot);
        if let Some(wanted) = &service {
            let prefix = format!("{wanted}:");
            report
                .service_ports
                .retain(|p| p.name == *wanted || p.name.starts_with(&prefix));
        }
        if json {
            plan::render_json(&report)
        } else {
            plan::render_table(&report)
        }
    })
    .await;
    match answer {
        Ok(body) => typed(json, body),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the report failed\n").into_response(),
    }
}

async fn explain_one(State(s): State<Shared>, Query(q): Params) -> Response {
    if let Some(bad) = too_long(&q) {
        return bad;
    }
    let json = match output(&q) {
        Ok(j) => j,
        Err(e) => return bad_request(e),
    };
    let Some(to) = q.get("to") else {
        return bad_request(Refused::NoDestination);
    };
    let request = match Request::parse(
        to,
        q.get("from").map(String::as_str),
        q.get("in_interface").map(String::as_str),
    ) {
        Ok(r) => r,
        Err(e) => return bad_request(e.into()),
    };
    let Some(snapshot) = s.peek.snapshot().await else {
        return unavailable();
    };
    // Read after the snapshot: a change it holds is either programmed by now or pending here.
    let pending = s.sync.borrow().oldest_pending_since.map(|since| {
        let ms = tokio::time::Instant::now()
            .saturating_duration_since(since)
            .as_millis();
        format!(
            "changes queued {ms} ms ago are not programmed yet; a difference between the kernel \
             and this plan may be that sync's work, not drift"
        )
    });
    let config = s.config.clone();
    let answer = tokio::task::spawn_blocking(move || {
        // The running proxy programs this node's kernel: read it, whatever the objects' source.
        let e = explain::live::explain_on_node(&config, &snapshot, &request, false);
        drop(snapshot);
        e.map(|mut e| {
            e.pending_sync = pending;
            if json {
                explain::render::json(&e)
            } else {
                explain::render::text(&e)
            }
        })
    })
    .await;
    match answer {
        Ok(Ok(body)) => typed(json, body),
        Ok(Err(e)) => bad_request(e.into()),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "explain failed\n").into_response(),
    }
}

async fn status_all(State(s): State<Shared>, Query(q): Params) -> Response {
    if let Some(bad) = too_long(&q) {
        return bad;
    }
    let json = match output(&q) {
        Ok(j) => j,
        Err(e) => return bad_request(e),
    };
    let service = q.get("service").cloned();
    if let Some(bad) = service.as_deref().and_then(status::bad_service) {
        return bad_request(bad.into());
    }
    let Some(snapshot) = s.peek.snapshot().await else {
        return unavailable();
    };
    let runtime = Runtime {
        sync: SyncSummary::of(&s.sync.borrow(), tokio::time::Instant::now()),
        health_checks: (**s.health_checks.borrow()).clone(),
    };
    let config = s.config.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let (planned, node) = explain::live::plan_on_node(&config, &snapshot, false)?;
        // A family whose rules cannot be read (no ip6tables on the host, say) is shown as
        // planned, and the drift says why; the table fails only when neither can be read.
        let mut drift: Vec<String> = Vec::new();
        let mut failed = Vec::new();
        let read = IpFamily::ALL.map(|f| {
            match explain::live::read_family(&config, &snapshot, planned.as_ref(), f, None) {
                Ok(r) => Some(r),
                Err(e) => {
                    let why = crate::causes::one_line(&e);
                    drift.push(format!("{f} rules not read (shown as planned): {why}"));
                    failed.push(e);
                    None
                }
            }
        });
        if failed.len() == IpFamily::ALL.len() {
            return Err(failed.swap_remove(0));
        }
        let kernel = Some(IpFamily::ALL.map(|f| {
            read[f.index()]
                .as_ref()
                .map_or_else(|| planned.rules(f), |r| r.rules())
        }));
        drift.extend(read.iter().flatten().flat_map(|r| r.drift().to_vec()));
        let status = status::build(status::Inputs {
            snapshot: &snapshot,
            node: &node,
            planned: IpFamily::ALL.map(|f| planned.rules(f)),
            kernel,
            drift,
            runtime: &runtime,
            service: service.as_deref(),
        });
        Ok::<_, crate::dataplane::inspect::Error>(if json {
            status::render::json(&status)
        } else {
            status::render::text(&status, service.is_some())
        })
    })
    .await;
    match answer {
        Ok(Ok(body)) => typed(json, body),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}\n", crate::causes::one_line(&e)),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "status failed\n").into_response(),
    }
}

/// Whether `output=json` was asked for.
fn output(q: &HashMap<String, String>) -> Result<bool, Refused> {
    match q.get("output").map(String::as_str) {
        None | Some("table" | "text") => Ok(false),
        Some("json") => Ok(true),
        Some(_) => Err(Refused::Output),
    }
}

fn too_long(q: &HashMap<String, String>) -> Option<Response> {
    let size: usize = q.iter().map(|(k, v)| k.len() + v.len()).sum();
    (size > MAX_QUERY).then(|| bad_request(Refused::TooLong))
}

fn typed(json: bool, body: String) -> Response {
    let mut r = body.into_response();
    let kind = if json {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    r.headers_mut().insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// 400 with one line; the message quotes user input only through `{:?}` (escaped, clipped).
fn bad_request(refused: Refused) -> Response {
    let line: String = crate::causes::one_line(&refused)
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    (StatusCode::BAD_REQUEST, format!("{line}\n")).into_response()
}

fn unavailable() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "the proxy's model is not available (starting, or too many requests)\n",
    )
        .into_response()
}
