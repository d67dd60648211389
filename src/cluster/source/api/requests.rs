//! Requests to the API server counted by result, as client-go counts them for
//! `rest_client_requests_total{code,host,method}`: `code` the HTTP status, or `<error>` when
//! no response came; `method` the HTTP method; `host` the server's `host:port` as the
//! configuration names it. A watch counts once, when its response starts.
//!
//! Shared between the client's layer, which records, and the metrics scrape, which reads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// client-go's `code` label for a request that got no response.
pub const NO_RESPONSE: &str = "<error>";

/// One series: the labels other than `host`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Series {
    pub code: String,
    pub method: String,
}

/// The counts of one client; clone freely.
#[derive(Clone, Debug)]
pub struct RequestCounts {
    host: Arc<str>,
    counts: Arc<Mutex<BTreeMap<Series, u64>>>,
}

impl RequestCounts {
    /// Counts for a client of the server at `host` (`host:port`).
    pub fn new(host: &str) -> RequestCounts {
        RequestCounts {
            host: host.into(),
            counts: Arc::default(),
        }
    }

    /// The `host` label.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// One request with `method` ended with `status`, or with no response.
    pub fn record(&self, method: &http::Method, status: Option<http::StatusCode>) {
        let series = Series {
            code: status.map_or_else(|| NO_RESPONSE.to_owned(), |s| s.as_u16().to_string()),
            method: method.as_str().to_owned(),
        };
        *self
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(series)
            .or_default() += 1;
    }

    /// Every series with its count, in label order.
    pub fn read(&self) -> Vec<(Series, u64)> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(s, n)| (s.clone(), *n))
            .collect()
    }
}

/// The `host` label of a server URL: its authority, `host:port`, or the host alone when the URL
/// gives no port (client-go's label is Go's `URL.Host`, the same).
pub fn host_label(server: &http::Uri) -> String {
    server
        .authority()
        .map_or_else(|| "none".to_owned(), |a| a.as_str().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_code_and_method() {
        let counts = RequestCounts::new("10.0.0.1:6443");
        counts.record(&http::Method::GET, Some(http::StatusCode::OK));
        counts.record(&http::Method::GET, Some(http::StatusCode::OK));
        counts.record(&http::Method::GET, None);
        counts.record(&http::Method::POST, Some(http::StatusCode::FORBIDDEN));
        let read: Vec<(String, String, u64)> = counts
            .read()
            .into_iter()
            .map(|(s, n)| (s.code, s.method, n))
            .collect();
        assert_eq!(
            read,
            [
                ("200".into(), "GET".into(), 2),
                ("403".into(), "POST".into(), 1),
                ("<error>".into(), "GET".into(), 1),
            ]
        );
        assert_eq!(counts.host(), "10.0.0.1:6443");
    }

    #[test]
    fn the_host_label_is_the_urls_authority() {
        let host = |u: &str| host_label(&u.parse().unwrap());
        assert_eq!(host("https://10.0.0.1:6443"), "10.0.0.1:6443");
        assert_eq!(host("https://api.example.com"), "api.example.com");
    }
}
