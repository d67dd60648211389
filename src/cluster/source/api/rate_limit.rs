//! The client-side request rate limit (`--kube-api-qps`, `--kube-api-burst`), as a tower layer
//! around the kube client's HTTP stack.
//!
//! kube-rs has no limiter of its own. This is client-go's token bucket: `burst` requests may go
//! at once, after that one per `1/qps` seconds. Each request reserves its token when it is
//! called, so requests keep their order; a request that has to wait sleeps on tokio's clock
//! before it is sent. A watch counts as one request when it starts, as in client-go.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

/// The token bucket. Pure: "now" is an argument.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    /// Tokens available at `last`; negative when requests are queued for future tokens.
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. A `burst` below one is taken as one, so a request can ever go.
    pub fn new(qps: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token and returns how long its request must wait for it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now.max(self.last);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// Adds the limit to a client's stack. `qps <= 0` means no limit.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl RateLimitLayer {
    pub fn new(qps: f32, burst: u32) -> RateLimitLayer {
        let bucket = (qps > 0.0).then(|| {
            Arc::new(Mutex::new(TokenBucket::new(
                f64::from(qps),
                burst,
                Instant::now(),
            )))
        });
        RateLimitLayer { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] makes.
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let wait = match &self.bucket {
            Some(bucket) => bucket
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .reserve(Instant::now()),
            None => Duration::ZERO,
        };
        // The inner future does its work when polled, so the request goes after the wait.
        let response = self.inner.call(request);
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            response.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_burst_goes_at_once_then_requests_are_spaced_by_one_over_qps() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 3, t0);
        let waits: Vec<Duration> = (0..6).map(|_| bucket.reserve(t0)).collect();
        assert_eq!(waits, [ms(0), ms(0), ms(0), ms(200), ms(400), ms(600)]);
    }

    #[test]
    fn tokens_refill_at_qps_up_to_burst() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 2, t0);
        bucket.reserve(t0);
        bucket.reserve(t0);
        // 10 s later the bucket holds 2 (its burst), not 100.
        let later = t0 + Duration::from_secs(10);
        let waits: Vec<Duration> = (0..3).map(|_| bucket.reserve(later)).collect();
        assert_eq!(waits, [ms(0), ms(0), ms(100)]);
    }

    #[test]
    fn a_zero_burst_still_lets_requests_through() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1.0, 0, t0);
        assert_eq!(bucket.reserve(t0), ms(0));
        assert_eq!(bucket.reserve(t0), ms(1000));
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_delays_requests_beyond_the_burst() {
        let layer = RateLimitLayer::new(2.0, 1);
        let mut svc = layer.layer(tower::service_fn(|_: ()| async {
            Ok::<_, std::convert::Infallible>(Instant::now())
        }));
        let t0 = Instant::now();
        let first = svc.call(()).await.unwrap();
        let second = svc.call(()).await.unwrap();
        assert_eq!(first - t0, ms(0));
        assert_eq!(second - t0, ms(500));
    }
}
