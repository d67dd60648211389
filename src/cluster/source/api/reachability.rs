//! Whether the API server answers: one state for the whole client, logged once per change and
//! published for `/healthz`.
//!
//! Seen from the HTTP stack (a tower layer), not from the watch events: a watch that resumes
//! after an outage produces no event until something changes, but its request gets a response.
//! Any HTTP response counts as reachable (a 403 or 410 is the API server talking); a transport
//! error (refused, reset, timed out, TLS) as unreachable. The state machine is pure; the layer
//! reads tokio's clock and logs transitions.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{Layer, Service};

/// What `/healthz` and logs know about the API server connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// No request has completed yet.
    Unknown,
    /// The last request got a response.
    Reachable { since: Instant },
    /// The last request failed; watches retry with backoff and the model keeps its last state.
    Unreachable { since: Instant, error: String },
}

impl Health {
    pub fn reachable(&self) -> bool {
        matches!(self, Health::Reachable { .. })
    }
}

/// A change worth one log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    Connected,
    Lost { error: String },
    Restored { after: Duration },
}

/// Folds one request outcome into `health`; returns the transition, if it was one.
pub fn observe(
    health: &mut Health,
    outcome: Result<(), String>,
    now: Instant,
) -> Option<Transition> {
    let (next, transition) = match (&*health, outcome) {
        (Health::Reachable { .. }, Ok(())) | (Health::Unreachable { .. }, Err(_)) => return None,
        (Health::Unknown, Ok(())) => (Health::Reachable { since: now }, Transition::Connected),
        (Health::Unreachable { since, .. }, Ok(())) => (
            Health::Reachable { since: now },
            Transition::Restored {
                after: now.saturating_duration_since(*since),
            },
        ),
        (Health::Unknown | Health::Reachable { .. }, Err(error)) => (
            Health::Unreachable {
                since: now,
                error: error.clone(),
            },
            Transition::Lost { error },
        ),
    };
    *health = next;
    Some(transition)
}

/// The shared state and its publisher; clone freely.
#[derive(Clone, Debug)]
pub struct Reachability {
    health: Arc<Mutex<Health>>,
    tx: Arc<watch::Sender<Health>>,
}

impl Default for Reachability {
    fn default() -> Self {
        let (tx, _) = watch::channel(Health::Unknown);
        Reachability {
            health: Arc::new(Mutex::new(Health::Unknown)),
            tx: Arc::new(tx),
        }
    }
}

impl Reachability {
    /// Follows the health; the value changes only on transitions.
    pub fn subscribe(&self) -> watch::Receiver<Health> {
        self.tx.subscribe()
    }

    pub fn current(&self) -> Health {
        self.tx.borrow().clone()
    }

    fn record(&self, outcome: Result<(), String>) {
        let mut health = self.health.lock().unwrap_or_else(|p| p.into_inner());
        let Some(transition) = observe(&mut health, outcome, Instant::now()) else {
            return;
        };
        match transition {
            Transition::Connected => tracing::info!("connected to the API server"),
            Transition::Lost { error } => tracing::warn!(
                %error,
                "the API server is unreachable; keeping the last known state and retrying with backoff"
            ),
            Transition::Restored { after } => tracing::info!(
                down_s = after.as_secs_f64(),
                "the API server is reachable again; watches resume or relist"
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

impl<S, R> Service<R> for Observe<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let response = self.inner.call(request);
        let reach = self.reach.clone();
        Box::pin(async move {
            let result = response.await;
            reach.record(result.as_ref().map(|_| ()).map_err(ToString::to_string));
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_change_of_state_is_reported_once() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let mut h = Health::Unknown;
        assert_eq!(observe(&mut h, Ok(()), at(0)), Some(Transition::Connected));
        assert_eq!(observe(&mut h, Ok(()), at(1)), None);
        let lost = observe(&mut h, Err("refused".into()), at(2));
        assert_eq!(
            lost,
            Some(Transition::Lost {
                error: "refused".into()
            })
        );
        assert_eq!(observe(&mut h, Err("refused again".into()), at(5)), None);
        assert!(!h.reachable());
        let back = observe(&mut h, Ok(()), at(9));
        assert_eq!(
            back,
            Some(Transition::Restored {
                after: Duration::from_secs(7)
            })
        );
        assert_eq!(h, Health::Reachable { since: at(9) });
    }

    #[test]
    fn failing_before_the_first_response_is_a_loss() {
        let mut h = Health::Unknown;
        let t = observe(&mut h, Err("no route".into()), Instant::now());
        assert!(matches!(t, Some(Transition::Lost { .. })));
    }
}
