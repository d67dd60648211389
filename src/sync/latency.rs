//! Network programming latency: how long after an EndpointSlice change its endpoints were
//! programmed (upstream's `kubeproxy_network_programming_duration_seconds`).
//!
//! Pure: the end of the sync comes in as a wall-clock value read by the runner. The start is the
//! `endpoints.kubernetes.io/last-change-trigger-time` annotation that the EndpointSlice
//! controller sets to when the change that produced the slice happened (a Pod turning ready, a
//! Service edit), so the latency covers the controller, the API server, the watch and our sync.
//! One value per trigger time of each slice version applied since the last successful sync, as
//! upstream observes once per changed slice.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::cluster::ServiceKey;

/// Latencies of the given trigger times for a sync that ended at `programmed_at`.
///
/// A trigger time that does not parse as RFC 3339 is skipped (the tracker passes the annotation
/// through as written). One later than `programmed_at`, which only clock skew between the
/// controller's machine and ours can produce, counts as zero rather than being dropped, so the
/// histogram's count still matches the number of changes.
pub fn programming_latencies(
    trigger_times: &[(ServiceKey, String)],
    programmed_at: Timestamp,
) -> Vec<Duration> {
    trigger_times
        .iter()
        .filter_map(|(_, text)| text.parse::<Timestamp>().ok())
        .map(|t| {
            let span = programmed_at.duration_since(t);
            Duration::try_from(span).unwrap_or(Duration::ZERO)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn times(texts: &[&str]) -> Vec<(ServiceKey, String)> {
        texts
            .iter()
            .map(|t| (ServiceKey::new("ns", "web"), t.to_string()))
            .collect()
    }

    #[test]
    fn latency_is_sync_end_minus_trigger_time() {
        let got = programming_latencies(
            &times(&["2026-12-01T10:00:00Z", "2026-12-01T10:00:01.5Z"]),
            at("2026-12-01T10:00:03Z"),
        );
        assert_eq!(
            got,
            vec![Duration::from_secs(3), Duration::from_millis(1500)]
        );
    }

    #[test]
    fn offsets_are_honoured() {
        let got = programming_latencies(
            &times(&["2026-12-01T11:00:00+01:00"]),
            at("2026-12-01T10:00:02Z"),
        );
        assert_eq!(got, vec![Duration::from_secs(2)]);
    }

    #[test]
    fn unparsable_trigger_times_are_skipped() {
        let got = programming_latencies(&times(&["yesterday", ""]), at("2026-12-01T10:00:00Z"));
        assert!(got.is_empty());
    }

    #[test]
    fn a_trigger_time_in_the_future_counts_as_zero() {
        let got = programming_latencies(
            &times(&["2026-12-01T10:00:05Z"]),
            at("2026-12-01T10:00:00Z"),
        );
        assert_eq!(got, vec![Duration::ZERO]);
    }
}
