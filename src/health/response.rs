//! The answers the health servers give: status codes, headers and JSON bodies, byte for byte
//! as upstream kube-proxy writes them, because load balancers and probes parse them.
//!
//! Pure: builds values from a health [`Status`] and the time passed in. Every JSON key and
//! header name the health servers use is defined here and nowhere else.

use std::collections::BTreeMap;
use std::time::SystemTime;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use super::proxy::Status;
use crate::cluster::{IpFamily, ServiceKey};

/// Tells a load balancer how much traffic this node should get for a Service: its number of
/// local ready endpoints, as upstream sends it (read by weighted load balancers such as Google
/// Cloud's `WEIGHTED_MAGLEV`).
pub const X_LOAD_BALANCING_ENDPOINT_WEIGHT: &str = "x-load-balancing-endpoint-weight";
/// Every health answer is JSON and must not be sniffed as anything else.
const CONTENT_TYPE_JSON: &str = "application/json";
const NOSNIFF: &str = "nosniff";

/// How Go's `encoding/json` writes a zero `time.Time`: `lastUpdated` before any sync.
const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A health answer: status code, JSON body and, for Service checks, the endpoint weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub code: StatusCode,
    pub body: String,
    pub weight: Option<usize>,
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut response = (self.code, self.body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE_JSON),
        );
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static(NOSNIFF),
        );
        if let Some(weight) = self.weight {
            headers.insert(X_LOAD_BALANCING_ENDPOINT_WEIGHT, HeaderValue::from(weight));
        }
        response
    }
}

/// Upstream's `ProxyHealth` JSON object (`/healthz`, `/livez`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProxyBody {
    last_updated: String,
    current_time: String,
    /// Only in `/healthz` answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    node_eligible: Option<bool>,
    healthy: bool,
    /// Keyed `IPv4` / `IPv6`; absent until a family has synced.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    status: BTreeMap<IpFamily, FamilyBody>,
    /// Ours, only while the proxy stops (upstream's body has no such key).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stopping: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FamilyBody {
    last_updated: String,
    healthy: bool,
}

/// The answer of `/healthz` (with `node_eligible`) or `/livez` (without): 200 when the proxy
/// is healthy and, for `/healthz`, the Node eligible; else 503. When the answer is 200,
/// `lastUpdated` is `now`, as upstream keeps it for clients of older releases that read it as
/// "the sync loop is alive".
pub fn proxy(status: &Status, node_eligible: Option<bool>, now: SystemTime) -> Answer {
    let healthy = status.healthy && node_eligible.unwrap_or(true);
    let last_updated = if healthy {
        Some(now)
    } else {
        status.last_updated
    };
    let body = ProxyBody {
        last_updated: rfc3339(last_updated),
        current_time: rfc3339(Some(now)),
        node_eligible,
        healthy: status.healthy,
        status: status
            .families
            .iter()
            .map(|(family, f)| {
                let body = FamilyBody {
                    last_updated: rfc3339(f.last_updated),
                    healthy: f.healthy,
                };
                (*family, body)
            })
            .collect(),
        stopping: status.stopping,
    };
    Answer {
        code: code(healthy),
        // Plain strings, booleans and maps of them always serialize.
        body: serde_json::to_string(&body).unwrap_or_default(),
        weight: None,
    }
}

/// The answer of a Service's health check: 200 when it has local ready endpoints and the
/// proxy is healthy, else 503. The body is tab-indented like upstream's, without a final
/// newline; namespace and name are DNS names, so they need no escaping.
pub fn service(key: &ServiceKey, local_endpoints: usize, proxy_healthy: bool) -> Answer {
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": \"{}\",\n\t\t\"name\": \"{}\"\n\t}},\n\t\"localEndpoints\": {},\n\t\"serviceProxyHealthy\": {}\n}}",
        key.namespace, key.name, local_endpoints, proxy_healthy
    );
    Answer {
        code: code(local_endpoints > 0 && proxy_healthy),
        body,
        weight: Some(local_endpoints),
    }
}

fn code(healthy: bool) -> StatusCode {
    if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// RFC 3339 in UTC with as many fractional digits as needed, as Go marshals a `time.Time`
/// (`RFC3339Nano`); `None` is Go's zero time.
fn rfc3339(t: Option<SystemTime>) -> String {
    match t.map(jiff::Timestamp::try_from) {
        Some(Ok(ts)) => ts.to_string(),
        // `None`, or outside years -9999..=9999 (not a time a clock gives).
        None | Some(Err(_)) => ZERO_TIME.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::health::proxy::FamilyStatus;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn times_are_written_like_go_rfc3339nano() {
        assert_eq!(rfc3339(Some(at(1_700_000_000, 0))), "2023-11-14T22:13:20Z");
        assert_eq!(
            rfc3339(Some(at(1_700_000_000, 120_000_000))),
            "2023-11-14T22:13:20.12Z"
        );
        assert_eq!(
            rfc3339(Some(at(1_700_000_000, 1))),
            "2023-11-14T22:13:20.000000001Z"
        );
        assert_eq!(rfc3339(None), "0001-01-01T00:00:00Z");
    }

    #[test]
    fn healthy_livez_reports_now_as_last_updated_and_omits_node_eligible() {
        let mut families = BTreeMap::new();
        families.insert(
            IpFamily::V4,
            FamilyStatus {
                last_updated: Some(at(1_700_000_000, 0)),
                healthy: true,
            },
        );
        let status = Status {
            healthy: true,
            last_updated: Some(at(1_700_000_000, 0)),
            families,
            stopping: false,
        };
        let a = proxy(&status, None, at(1_700_000_010, 0));
        assert_eq!(a.code, StatusCode::OK);
        assert_eq!(
            a.body,
            r#"{"lastUpdated":"2023-11-14T22:13:30Z","currentTime":"2023-11-14T22:13:30Z","healthy":true,"status":{"IPv4":{"lastUpdated":"2023-11-14T22:13:20Z","healthy":true}}}"#
        );
    }

    #[test]
    fn ineligible_node_fails_healthz_but_keeps_healthy_true_in_the_body() {
        let status = Status {
            healthy: true,
            last_updated: None,
            families: BTreeMap::new(),
            stopping: false,
        };
        let a = proxy(&status, Some(false), at(1_700_000_000, 0));
        assert_eq!(a.code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            a.body,
            r#"{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2023-11-14T22:13:20Z","nodeEligible":false,"healthy":true}"#
        );
    }

    #[test]
    fn a_stopping_proxy_answers_503_and_says_it_is_stopping() {
        let status = Status {
            healthy: false,
            last_updated: None,
            families: BTreeMap::new(),
            stopping: true,
        };
        let a = proxy(&status, Some(true), at(1_700_000_000, 0));
        assert_eq!(a.code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            a.body,
            r#"{"lastUpdated":"0001-01-01T00:00:00Z","currentTime":"2023-11-14T22:13:20Z","nodeEligible":true,"healthy":false,"stopping":true}"#
        );
    }

    #[test]
    fn service_body_is_tab_indented_and_code_needs_endpoints_and_proxy_health() {
        let key = ServiceKey::new("default", "web");
        let a = service(&key, 2, true);
        assert_eq!(a.code, StatusCode::OK);
        assert_eq!(a.weight, Some(2));
        assert_eq!(
            a.body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
        );
        assert_eq!(service(&key, 0, true).code, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            service(&key, 2, false).code,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn headers_name_json_nosniff_and_the_weight() {
        let r = service(&ServiceKey::new("a", "b"), 3, true).into_response();
        let h = r.headers();
        assert_eq!(h[header::CONTENT_TYPE], "application/json");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[X_LOAD_BALANCING_ENDPOINT_WEIGHT], "3");
    }
}
