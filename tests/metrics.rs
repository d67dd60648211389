//! The metrics server over real HTTP on 127.0.0.1: a scrape lists every upstream metric with
//! its type, counters move after recorded syncs, and `/configz`, `/proxyMode`, `/healthz`
//! answer as upstream's metrics server does; none of them takes a method that asks for a change.

mod http;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime};

use kube_proxy_rs::cluster::IpFamily;
use kube_proxy_rs::config::{self, Config, Flags};
use kube_proxy_rs::dataplane::{FamilyReport, SyncReport};
use kube_proxy_rs::metrics::{Metrics, SyncSeries, Table, names, server};
use tokio::net::TcpListener;

/// Every metric the issue (and upstream's metrics reference) names, as exposed.
const UPSTREAM: &[(&str, &str)] = &[
    ("kubeproxy_sync_proxy_rules_duration_seconds", "histogram"),
    (
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "histogram",
    ),
    (
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        "histogram",
    ),
    (
        "kubeproxy_network_programming_duration_seconds",
        "histogram",
    ),
    ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"),
    (
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
        "gauge",
    ),
    (
        "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
        "gauge",
    ),
    (
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "counter",
    ),
    (
        "kubeproxy_sync_proxy_rules_service_changes_pending",
        "gauge",
    ),
    (
        "kubeproxy_sync_proxy_rules_service_changes_total",
        "counter",
    ),
    (
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
        "gauge",
    ),
    ("kubeproxy_sync_proxy_rules_iptables_total", "gauge"),
    ("kubeproxy_sync_proxy_rules_iptables_last", "gauge"),
    (
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "counter",
    ),
    (
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
        "counter",
    ),
    (
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "counter",
    ),
    (
        "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        "counter",
    ),
    ("kubeproxy_proxy_healthz_total", "counter"),
    ("kubeproxy_proxy_livez_total", "counter"),
    (
        "kubeproxy_conntrack_reconciler_sync_duration_seconds",
        "histogram",
    ),
    (
        "kubeproxy_conntrack_reconciler_deleted_entries_total",
        "counter",
    ),
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_start_time_seconds", "gauge"),
    ("process_open_fds", "gauge"),
    ("process_virtual_memory_bytes", "gauge"),
];

fn config(mode: &str) -> Config {
    let flags = Flags {
        proxy_mode: Some(mode.to_owned()),
        ..Flags::default()
    };
    config::resolve(&flags, None).unwrap().config
}

async fn start(metrics: &Metrics, config: &Config) -> SocketAddr {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server::serve(
        listener,
        metrics.clone(),
        config,
        axum::Router::new(),
    ));
    addr
}

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

/// What the runner records around one sync of `family`.
fn record_sync(m: &Metrics, family: IpFamily, full: bool, secs: u64) {
    m.queued(family, at(secs));
    m.observe_sync(family, full, Duration::from_millis(12));
    m.synced(family, at(secs + 1));
    m.record_report(&SyncReport {
        full,
        families: vec![FamilyReport {
            family: Some(family),
            operations: 5,
            objects: 50,
            no_local_endpoints_internal: 0,
            no_local_endpoints_external: 1,
            iptables_rules: None,
        }],
        netlink_messages: 3,
    });
}

fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn a_scrape_lists_every_upstream_metric_with_its_type() {
    let metrics = Metrics::new();
    metrics.prime(SyncSeries::Iptables, &[IpFamily::V4]);
    metrics.prime(SyncSeries::Nftables, &[IpFamily::V4]);
    metrics.prime(SyncSeries::Ebpf, &[IpFamily::V4]);
    record_sync(&metrics, IpFamily::V4, true, 0);
    let addr = start(&metrics, &config("iptables")).await;

    let r = http::must_get(addr, "/metrics").await;
    assert_eq!(r.code, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    for (name, kind) in UPSTREAM {
        let line = format!("# TYPE {name} {kind}\n");
        assert!(r.body.contains(&line), "missing {line:?}");
    }
    // Ours are documented in `names` and are all present too.
    for spec in names::ALL {
        let line = format!("# TYPE {} {}\n", spec.name, spec.kind.as_str());
        assert!(r.body.contains(&line), "missing {line:?}");
    }
    let bucket =
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"16.384\"}";
    assert_eq!(sample(&r.body, bucket), Some(1.0));
}

#[tokio::test]
async fn counters_move_after_recorded_syncs() {
    let metrics = Metrics::new();
    metrics.prime(SyncSeries::Nftables, &IpFamily::ALL);
    let addr = start(&metrics, &config("nftables")).await;
    let before = http::must_get(addr, "/metrics").await.body;
    let count = "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"}";
    let partial = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv6\"}";
    let failures = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv6\"}";
    let last = "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv6\"}";
    assert_eq!(sample(&before, count), Some(0.0));
    assert_eq!(sample(&before, failures), Some(0.0));
    assert_eq!(
        sample(&before, last),
        None,
        "no fake timestamp before a sync"
    );

    record_sync(&metrics, IpFamily::V6, false, 10);
    metrics.observe_sync(IpFamily::V6, false, Duration::from_millis(3));
    metrics.count_sync_failure(SyncSeries::Nftables, IpFamily::V6, false);
    metrics.set_iptables_rules(IpFamily::V4, Table::Nat, 3, 1);

    let after = http::must_get(addr, "/metrics").await.body;
    assert_eq!(sample(&after, count), Some(2.0));
    assert_eq!(sample(&after, partial), Some(2.0));
    assert_eq!(sample(&after, failures), Some(1.0));
    assert_eq!(sample(&after, last), Some(1_700_000_011.0));
    let no_local = "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv6\",traffic_policy=\"external\"}";
    assert_eq!(sample(&after, no_local), Some(1.0));
    let ops = "kubeproxy_rs_sync_operations_total{ip_family=\"IPv6\"}";
    assert_eq!(sample(&after, ops), Some(5.0));
    let messages = "kubeproxy_rs_sync_netlink_messages_total";
    assert_eq!(sample(&before, messages), Some(0.0));
    assert_eq!(sample(&after, messages), Some(3.0));
}

#[tokio::test]
async fn configz_proxy_mode_and_healthz_answer_like_upstream() {
    let addr = start(&Metrics::new(), &config("nftables")).await;

    let r = http::must_get(addr, "/proxyMode").await;
    assert_eq!((r.code, r.body.as_str()), (200, "nftables"));

    let r = http::must_get(addr, "/healthz").await;
    assert_eq!((r.code, r.body.as_str()), (200, "ok"));

    let r = http::must_get(addr, "/configz").await;
    assert_eq!(r.code, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let doc = &r.json()["kubeproxy.config.k8s.io"];
    assert_eq!(doc["mode"], "nftables");
    assert_eq!(doc["kind"], "KubeProxyConfiguration");
    assert_eq!(doc["metricsBindAddress"], "127.0.0.1:10249");
}

#[tokio::test]
async fn every_route_answers_get_and_head_and_refuses_changing_methods() {
    let addr = start(&Metrics::new(), &config("nftables")).await;
    for path in [
        server::METRICS_PATH,
        server::CONFIGZ_PATH,
        server::PROXY_MODE_PATH,
        server::HEALTHZ_PATH,
    ] {
        assert_eq!(http::must_get(addr, path).await.code, 200, "GET {path}");
        let head = http::request(addr, "HEAD", path).await.unwrap();
        assert_eq!(head.code, 200, "HEAD {path}");
        for method in http::CHANGING {
            let r = http::request(addr, method, path).await.unwrap();
            assert_eq!(r.code, 405, "{method} {path}: {}", r.body);
            assert_eq!(r.header("allow"), Some("GET,HEAD"), "{method} {path}");
        }
    }
}
