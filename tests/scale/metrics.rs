//! Each proxy's own account of itself: its `/metrics` page, read from inside its node namespace,
//! reduced to the few upstream `kubeproxy_*` series the harness compares.
//!
//! Pure apart from [`scrape`]: parsing the Prometheus text format and computing quantiles from
//! bucket deltas. The harness's cluster is IPv4 only, so only IPv4 series count: samples labelled
//! `ip_family="IPv6"` are dropped (ours observes every sync under both families, which would
//! otherwise count each sync twice); other label sets are summed.

use std::net::SocketAddr;

use super::helper::{RESULT_PREFIX, SelfExec, Spec};

/// Seconds a sync took (upstream's `syncProxyRules` timer).
pub const SYNC_DURATION: &str = "kubeproxy_sync_proxy_rules_duration_seconds";
/// EndpointSlice trigger time → rules programmed.
pub const PROGRAMMING: &str = "kubeproxy_network_programming_duration_seconds";
/// Unix time of the last successful sync.
pub const LAST_SYNC: &str = "kubeproxy_sync_proxy_rules_last_timestamp_seconds";

/// Where both proxies serve metrics inside their node namespace.
pub const METRICS_ADDR: &str = "127.0.0.1:10249";

/// A histogram's cumulative buckets (upper bound, count), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// `self - before`: what was observed in between.
    pub fn since(&self, before: &Histogram) -> Histogram {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, n)| {
                let old = before
                    .buckets
                    .iter()
                    .find(|(l, _)| *l == le)
                    .map_or(0.0, |b| b.1);
                (le, n - old)
            })
            .collect();
        Histogram {
            buckets,
            sum: self.sum - before.sum,
            count: self.count - before.count,
        }
    }

    /// Mean of the observations, `None` without any.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The upper bound of the bucket holding quantile `q`: the quantile is at most this. `None`
    /// without observations; `+Inf` when it lies past the last finite bucket.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = q * self.count;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= rank)
            .map(|b| b.0)
            .or(Some(f64::INFINITY))
    }
}

/// The parsed samples of one scrape.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    samples: Vec<(String, String, f64)>,
}

impl Metrics {
    /// Parses the Prometheus text exposition format (comments skipped, labels kept as text).
    pub fn parse(text: &str) -> Metrics {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (series, value) = l.trim().rsplit_once(' ')?;
                let value = parse_value(value)?;
                let (name, labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.trim_end_matches('}')),
                    None => (series, ""),
                };
                if label(labels, "ip_family") == Some("IPv6") {
                    return None;
                }
                Some((name.to_owned(), labels.to_owned(), value))
            })
            .collect();
        Metrics { samples }
    }

    /// The sum of every sample named `name`, `None` when there is none.
    pub fn value(&self, name: &str) -> Option<f64> {
        let mut found = false;
        let total = self
            .samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .inspect(|_| found = true)
            .map(|s| s.2)
            .sum();
        found.then_some(total)
    }

    /// The largest sample named `name` (for timestamps).
    pub fn max(&self, name: &str) -> Option<f64> {
        self.samples
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|s| s.2)
            .reduce(f64::max)
    }

    /// Histogram `name`, summed over its label sets; empty when absent.
    pub fn histogram(&self, name: &str) -> Histogram {
        let bucket = format!("{name}_bucket");
        let mut buckets: Vec<(f64, f64)> = Vec::new();
        for (n, labels, v) in &self.samples {
            if *n != bucket {
                continue;
            }
            let Some(le) = label(labels, "le").and_then(parse_value) else {
                continue;
            };
            match buckets.iter_mut().find(|(l, _)| *l == le) {
                Some(b) => b.1 += v,
                None => buckets.push((le, *v)),
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        Histogram {
            buckets,
            sum: self.value(&format!("{name}_sum")).unwrap_or(0.0),
            count: self.value(&format!("{name}_count")).unwrap_or(0.0),
        }
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// Reads `/metrics` of the proxy in `netns`. `Err` while it is not serving yet.
pub async fn scrape(exec: &SelfExec, netns: &str) -> Result<Metrics, String> {
    let addr: SocketAddr = METRICS_ADDR.parse().expect("metrics address");
    let spec = Spec::Get {
        addr,
        path: "/metrics".to_owned(),
    };
    let out = tokio::process::Command::from(exec.command(netns, &spec))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("run metrics reader: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // The result line may follow libtest's own output on the same line.
    let result = text.split_once(RESULT_PREFIX).map(|(_, rest)| rest);
    let (head, body) = result.map_or(("", ""), |r| r.split_once('\n').unwrap_or((r, "")));
    match result {
        Some(_) if head == "ok" => Ok(Metrics::parse(body)),
        Some(_) => Err(head.to_owned()),
        None => Err(format!(
            "metrics reader said nothing: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# HELP kubeproxy_network_programming_duration_seconds x
kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.25\"} 8
kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.5\"} 9
kubeproxy_network_programming_duration_seconds_bucket{ip_family=\"IPv4\",le=\"+Inf\"} 10
kubeproxy_network_programming_duration_seconds_sum{ip_family=\"IPv4\"} 3.5
kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 10
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 1.7e+09
kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"} 1.8e+09
kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv6\"} 10
";

    #[test]
    fn histogram_quantiles_are_bucket_bounds() {
        let h = Metrics::parse(TEXT).histogram(PROGRAMMING);
        assert_eq!(h.count, 10.0);
        assert_eq!(h.quantile_bound(0.5), Some(0.25));
        assert_eq!(h.quantile_bound(0.9), Some(0.5));
        assert_eq!(h.quantile_bound(0.99), Some(f64::INFINITY));
        assert_eq!(h.since(&h).mean(), None);
        assert_eq!(Metrics::parse(TEXT).max(LAST_SYNC), Some(1.7e9));
    }
}
