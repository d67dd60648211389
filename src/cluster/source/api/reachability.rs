//! Whether the API server answers and accepts us: one state for the whole client, logged once
//! per change with the URL of the request that changed it and the cause, and published for
//! whoever follows it. The same layer counts every request by result ([`RequestCounts`]).
//!
//! Seen from the HTTP stack (a tower layer), not from the watch events: a watch that resumes
//! after an outage produces no event until something changes, but its request gets a response.
//! A transport error (refused, no such host, reset, timed out, TLS) is unreachable, with its
//! [`Cause`]; a 401 is the API server refusing our credentials; any other response is
//! reachable. A 403 concerns one resource (RBAC), not the client: it is logged once per
//! method and path until that path is allowed again. The state machines are pure; the layer
//! reads tokio's clock and logs transitions.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{Layer, Service};

use super::failure::{self, Cause};
use super::requests::{RequestCounts, host_label};
use crate::go_duration::GoDuration;

/// What logs and followers know about the API server connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// No request has completed yet.
    Unknown,
    /// The last request got a response.
    Reachable { since: Instant },
    /// The last request was answered 401: the API server does not accept our credentials.
    Unauthorized { since: Instant },
    /// The last request failed; watches retry with backoff and the model keeps its last state.
    Unreachable {
        since: Instant,
        cause: Cause,
        error: String,
    },
}

impl Health {
    /// Whether the API server answers, whatever it answers.
    pub fn reachable(&self) -> bool {
        matches!(self, Health::Reachable { .. } | Health::Unauthorized { .. })
    }
}

/// How one request ended, as the state machine sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered,
    Unauthorized,
    Failed { cause: Cause, error: String },
}

/// A change worth one log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    Connected,
    /// Unreachable, from reachable or for another cause than before.
    Lost {
        cause: Cause,
        error: String,
    },
    Unauthorized,
    /// Answering (and accepting us) again after `after` without.
    Restored {
        after: Duration,
    },
}

/// Folds one request outcome into `health`; returns the transition, if it was one. A failure
/// with the cause already known is no transition, whatever its text says.
pub fn observe(health: &mut Health, outcome: Outcome, now: Instant) -> Option<Transition> {
    let (next, transition) = match (&*health, outcome) {
        (Health::Reachable { .. }, Outcome::Answered)
        | (Health::Unauthorized { .. }, Outcome::Unauthorized) => return None,
        (Health::Unreachable { cause: was, .. }, Outcome::Failed { cause, .. })
            if *was == cause =>
        {
            return None;
        }
        (Health::Unknown, Outcome::Answered) => {
            (Health::Reachable { since: now }, Transition::Connected)
        }
        (Health::Unreachable { since, .. } | Health::Unauthorized { since }, Outcome::Answered) => {
            (
                Health::Reachable { since: now },
                Transition::Restored {
                    after: now.saturating_duration_since(*since),
                },
            )
        }
        (_, Outcome::Unauthorized) => (
            Health::Unauthorized { since: now },
            Transition::Unauthorized,
        ),
        (previous, Outcome::Failed { cause, error }) => {
            // A change of cause keeps the outage's start.
            let since = match previous {
                Health::Unreachable { since, .. } => *since,
                _ => now,
            };
            (
                Health::Unreachable {
                    since,
                    cause,
                    error: error.clone(),
                },
                Transition::Lost { cause, error },
            )
        }
    };
    *health = next;
    Some(transition)
}

/// The resources (method and path) the API server forbids us, each logged once.
#[derive(Debug, Default)]
pub struct Forbidden(BTreeSet<String>);

impl Forbidden {
    /// Folds the answer `status` to `method path`; `Some(true)` when the path just became
    /// forbidden, `Some(false)` when it is allowed again.
    pub fn observe(&mut self, method: &str, path: &str, status: http::StatusCode) -> Option<bool> {
        let key = format!("{method} {path}");
        if status == http::StatusCode::FORBIDDEN {
            return self.0.insert(key).then_some(true);
        }
        (status.is_success() && self.0.remove(&key)).then_some(false)
    }
}

/// The shared state, its publisher and the request counts; clone freely.
#[derive(Clone, Debug)]
pub struct Reachability {
    /// The server's URL, without a trailing `/`: requests carry only their path.
    server: Arc<str>,
    health: Arc<Mutex<Health>>,
    forbidden: Arc<Mutex<Forbidden>>,
    tx: Arc<watch::Sender<Health>>,
    requests: RequestCounts,
}

impl Reachability {
    /// The state of a client of the API server at `server`.
    pub fn new(server: &http::Uri) -> Reachability {
        let (tx, _) = watch::channel(Health::Unknown);
        Reachability {
            server: server.to_string().trim_end_matches('/').into(),
            health: Arc::new(Mutex::new(Health::Unknown)),
            forbidden: Arc::default(),
            tx: Arc::new(tx),
            requests: RequestCounts::new(&host_label(server)),
        }
    }

    /// Follows the health; the value changes only on transitions.
    pub fn subscribe(&self) -> watch::Receiver<Health> {
        self.tx.subscribe()
    }

    pub fn current(&self) -> Health {
        self.tx.borrow().clone()
    }

    /// The client's requests counted by result, for `rest_client_requests_total`.
    pub fn requests(&self) -> RequestCounts {
        self.requests.clone()
    }

    /// The full URL of a request whose URI holds its path and query.
    fn url(&self, uri: &http::Uri) -> String {
        match uri.path_and_query() {
            Some(p) => format!("{}{p}", self.server),
            None => self.server.to_string(),
        }
    }

    fn record(
        &self,
        method: &http::Method,
        uri: &http::Uri,
        answer: Result<http::StatusCode, Outcome>,
    ) {
        self.requests.record(method, answer.as_ref().ok().copied());
        if let Ok(status) = answer {
            let changed = self
                .forbidden
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .observe(method.as_str(), uri.path(), status);
            match changed {
                Some(true) => tracing::warn!(
                    url = %self.url(uri),
                    method = method.as_str(),
                    code = status.as_u16(),
                    "the API server forbids this request (403); check the proxy's RBAC; retrying with backoff"
                ),
                Some(false) => tracing::info!(
                    url = %self.url(uri),
                    method = method.as_str(),
                    "the API server allows this request again"
                ),
                None => {}
            }
        }
        let outcome = match answer {
            Ok(http::StatusCode::UNAUTHORIZED) => Outcome::Unauthorized,
            Ok(_) => Outcome::Answered,
            Err(failed) => failed,
        };
        let mut health = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(transition) = observe(&mut health, outcome, Instant::now()) else {
            return;
        };
        match transition {
            Transition::Connected => {
                tracing::info!(server = %self.server, "connected to the API server")
            }
            Transition::Lost { cause, error } => tracing::warn!(
                url = %self.url(uri),
                cause = cause.as_str(),
                err = %error,
                "cannot reach the API server; keeping the last known state and retrying with backoff"
            ),
            Transition::Unauthorized => tracing::warn!(
                url = %self.url(uri),
                code = 401,
                "the API server does not accept our credentials (401 Unauthorized); check the \
                 kubeconfig or service account token; retrying with backoff"
            ),
            Transition::Restored { after } => tracing::info!(
                server = %self.server,
                after = %GoDuration(after),
                "the API server answers again; watches resume or relist"
            ),
        }
        self.tx.send_replace(health.clone());
    }

    /// The layer that feeds this state from a client's requests.
    pub fn layer(&self) -> ObserveLayer {
        ObserveLayer {
            reach: self.clone(),
        }
    }
}

/// See [`Reachability::layer`].
#[derive(Clone, Debug)]
pub struct ObserveLayer {
    reach: Reachability,
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            reach: self.reach.clone(),
        }
    }
}

/// The service [`ObserveLayer`] makes.
#[derive(Clone, Debug)]
pub struct Observe<S> {
    inner: S,
    reach: Reachability,
}

impl<S, B, R> Service<http::Request<B>> for Observe<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    R: Send + 'static,
    S::Error: Into<tower::BoxError> + Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = BoxFuture<'static, Result<S::Response, tower::BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), tower::BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.method().clone();
        let uri = request.uri().clone();
        let response = self.inner.call(request);
        let reach = self.reach.clone();
        Box::pin(async move {
            let result = response.await.map_err(Into::into);
            let answer = match &result {
                Ok(r) => Ok(r.status()),
                Err(error) => Err(Outcome::Failed {
                    cause: failure::cause(&**error),
                    error: crate::causes::one_line(&**error),
                }),
            };
            reach.record(&method, &uri, answer);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(cause: Cause, error: &str) -> Outcome {
        Outcome::Failed {
            cause,
            error: error.into(),
        }
    }

    #[test]
    fn each_change_of_state_is_reported_once() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut h = Health::Unknown;
        assert_eq!(
            observe(&mut h, Outcome::Answered, at(0)),
            Some(Transition::Connected)
        );
        assert_eq!(observe(&mut h, Outcome::Answered, at(1)), None);
        let refused = failed(Cause::ConnectionRefused, "tcp connect error");
        assert_eq!(
            observe(&mut h, refused.clone(), at(2)),
            Some(Transition::Lost {
                cause: Cause::ConnectionRefused,
                error: "tcp connect error".into()
            })
        );
        // The same cause again, in other words: no line.
        let again = failed(Cause::ConnectionRefused, "tcp connect error, again");
        assert_eq!(observe(&mut h, again, at(5)), None);
        assert!(!h.reachable());
        let back = observe(&mut h, Outcome::Answered, at(9));
        assert_eq!(
            back,
            Some(Transition::Restored {
                after: Duration::from_secs(7)
            })
        );
        assert_eq!(h, Health::Reachable { since: at(9) });
    }

    #[test]
    fn another_cause_is_another_state_and_the_outage_keeps_its_start() {
        let t0 = Instant::now();
        let mut h = Health::Unknown;
        let refused = failed(Cause::ConnectionRefused, "refused");
        assert!(matches!(
            observe(&mut h, refused, t0),
            Some(Transition::Lost { .. })
        ));
        let tls = failed(Cause::Tls, "invalid peer certificate");
        assert_eq!(
            observe(&mut h, tls, t0 + Duration::from_secs(3)),
            Some(Transition::Lost {
                cause: Cause::Tls,
                error: "invalid peer certificate".into()
            })
        );
        assert!(matches!(h, Health::Unreachable { since, .. } if since == t0));
    }

    #[test]
    fn a_401_is_its_own_state_reported_once() {
        let t0 = Instant::now();
        let mut h = Health::Unknown;
        assert_eq!(
            observe(&mut h, Outcome::Unauthorized, t0),
            Some(Transition::Unauthorized)
        );
        assert_eq!(observe(&mut h, Outcome::Unauthorized, t0), None);
        assert!(h.reachable(), "the API server answers, it refuses us");
        assert!(matches!(
            observe(&mut h, Outcome::Answered, t0 + Duration::from_secs(1)),
            Some(Transition::Restored { .. })
        ));
    }

    #[test]
    fn a_forbidden_path_is_reported_once_until_it_is_allowed() {
        use http::StatusCode;
        let mut f = Forbidden::default();
        let services = "/api/v1/services";
        assert_eq!(
            f.observe("GET", services, StatusCode::FORBIDDEN),
            Some(true)
        );
        assert_eq!(f.observe("GET", services, StatusCode::FORBIDDEN), None);
        // Another path's answers say nothing about this one.
        assert_eq!(f.observe("GET", "/api/v1/nodes", StatusCode::OK), None);
        assert_eq!(f.observe("GET", services, StatusCode::GONE), None);
        assert_eq!(f.observe("GET", services, StatusCode::OK), Some(false));
        assert_eq!(f.observe("GET", services, StatusCode::OK), None);
    }
}
