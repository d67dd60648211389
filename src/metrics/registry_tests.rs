//! Tests of the registry: names, types, labels and buckets as a scrape shows them.

use super::*;
use crate::dataplane::{FamilyReport, IptablesRules, RuleCounts};
use crate::metrics::names::ALL;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

#[test]
fn every_metric_has_its_type_line_once_primed_and_synced() {
    let m = Metrics::new();
    m.prime(SyncSeries::Iptables, &IpFamily::ALL);
    m.prime(SyncSeries::Nftables, &IpFamily::ALL);
    m.prime(SyncSeries::Ebpf, &IpFamily::ALL);
    m.queued(IpFamily::V4, at(1));
    m.synced(IpFamily::V4, at(2));
    let text = m.encode();
    for spec in ALL {
        let line = format!("# TYPE {} {}\n", spec.name, spec.kind.as_str());
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    for name in [
        "process_cpu_seconds_total counter",
        "process_resident_memory_bytes gauge",
        "process_start_time_seconds gauge",
        "process_open_fds gauge",
        "process_virtual_memory_bytes gauge",
    ] {
        assert!(text.contains(&format!("# TYPE {name}\n")), "{name}");
    }
}

#[test]
fn recorded_syncs_show_with_upstream_labels_and_buckets() {
    let m = Metrics::new();
    m.queued(IpFamily::V4, at(100));
    m.observe_sync(IpFamily::V4, true, Duration::from_millis(3));
    m.observe_sync(IpFamily::V4, false, Duration::from_millis(1));
    m.synced(IpFamily::V4, at(101));
    m.record_report(&SyncReport {
        full: true,
        families: vec![FamilyReport {
            family: Some(IpFamily::V4),
            operations: 7,
            objects: 40,
            no_local_endpoints_internal: 1,
            no_local_endpoints_external: 2,
            iptables_rules: Some(IptablesRules {
                filter: RuleCounts { total: 4, last: 0 },
                nat: RuleCounts {
                    total: 120,
                    last: 9,
                },
            }),
        }],
        netlink_messages: 12,
    });
    m.count_sync_failure(SyncSeries::Iptables, IpFamily::V6, false);
    m.set_iptables_rules(IpFamily::V6, Table::Nat, 10, 3);
    m.count_probe(Probe::Healthz, 503);
    let text = m.encode();
    for want in [
        "kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 2\n",
        "kubeproxy_sync_full_proxy_rules_duration_seconds_bucket{ip_family=\"IPv4\",le=\"0.004\"} 1\n",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1\n",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} 101",
        "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv4\"} 100",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family=\"IPv4\",traffic_policy=\"external\"} 2\n",
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family=\"IPv6\"} 1\n",
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family=\"IPv6\"} 1\n",
        "kubeproxy_sync_proxy_rules_iptables_total{ip_family=\"IPv6\",table=\"nat\"} 10\n",
        "kubeproxy_sync_proxy_rules_iptables_total{ip_family=\"IPv4\",table=\"nat\"} 120\n",
        "kubeproxy_sync_proxy_rules_iptables_last{ip_family=\"IPv4\",table=\"nat\"} 9\n",
        "kubeproxy_sync_proxy_rules_iptables_total{ip_family=\"IPv4\",table=\"filter\"} 4\n",
        "kubeproxy_sync_proxy_rules_iptables_last{ip_family=\"IPv4\",table=\"filter\"} 0\n",
        "kubeproxy_proxy_healthz_total{code=\"503\"} 1\n",
        "kubeproxy_rs_sync_operations_total{ip_family=\"IPv4\"} 7\n",
        "kubeproxy_rs_sync_netlink_messages_total 12\n",
        "kubeproxy_rs_sync_objects{ip_family=\"IPv4\"} 40\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
}

#[test]
fn change_totals_follow_the_tracker_without_counting_twice() {
    let m = Metrics::new();
    let mut counts = ChangeCounts {
        service_changes_pending: 2,
        endpoint_changes_pending: 1,
        service_changes_total: 5,
        endpoint_changes_total: 3,
    };
    m.set_change_counts(&counts);
    m.set_change_counts(&counts);
    counts.service_changes_total = 6;
    counts.service_changes_pending = 0;
    m.set_change_counts(&counts);
    let text = m.encode();
    assert!(text.contains("kubeproxy_sync_proxy_rules_service_changes_total 6\n"));
    assert!(text.contains("kubeproxy_sync_proxy_rules_endpoint_changes_total 3\n"));
    assert!(text.contains("kubeproxy_sync_proxy_rules_service_changes_pending 0\n"));
    assert!(text.contains("kubeproxy_sync_proxy_rules_endpoint_changes_pending 1\n"));
}

/// A source of fixed counters: the encoding's input (the kernel reader is tested in the
/// qemu guest, `tests/guest_ipvs.rs`).
struct Fixed(Vec<crate::dataplane::ServiceTraffic>);

impl crate::dataplane::TrafficSource for Fixed {
    fn read(&self) -> Vec<crate::dataplane::ServiceTraffic> {
        self.0.clone()
    }
}

#[test]
fn per_service_traffic_is_read_at_scrape_time_with_its_labels() {
    let m = Metrics::new();
    let text = m.encode();
    for name in [
        "kubeproxy_rs_ipvs_connections_total",
        "kubeproxy_rs_ipvs_packets_total",
    ] {
        assert!(text.contains(&format!("# TYPE {name} counter\n")), "{text}");
    }
    let port = crate::cluster::ServicePortName {
        service: crate::cluster::ServiceKey::new("shop", "web"),
        port: "http".into(),
        protocol: crate::cluster::Protocol::Tcp,
    };
    m.set_traffic_source(Arc::new(Fixed(vec![crate::dataplane::ServiceTraffic {
        family: IpFamily::V6,
        port,
        frontend: "node-port",
        connections: 7,
        packets_in: 70,
        packets_out: 63,
        bytes_in: 7000,
        bytes_out: 6300,
    }])));
    let text = m.encode();
    let series = r#"ip_family="IPv6",namespace="shop",service="web",port="http",protocol="TCP",frontend="node-port""#;
    for line in [
        format!("kubeproxy_rs_ipvs_connections_total{{{series}}} 7\n"),
        format!("kubeproxy_rs_ipvs_packets_total{{{series},direction=\"out\"}} 63\n"),
        format!("kubeproxy_rs_ipvs_bytes_total{{{series},direction=\"in\"}} 7000\n"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn api_requests_show_as_client_gos_rest_client_requests_total() {
    let m = Metrics::new();
    let counts = crate::cluster::source::api::RequestCounts::new("10.0.0.1:6443");
    counts.record(&http::Method::GET, Some(http::StatusCode::OK));
    counts.record(&http::Method::GET, Some(http::StatusCode::OK));
    counts.record(&http::Method::GET, None);
    m.set_rest_client_source(Some(counts));
    let text = m.encode();
    for line in [
        "# TYPE rest_client_requests_total counter\n",
        "rest_client_requests_total{code=\"200\",host=\"10.0.0.1:6443\",method=\"GET\"} 2\n",
        "rest_client_requests_total{code=\"<error>\",host=\"10.0.0.1:6443\",method=\"GET\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn an_ebpf_sync_failure_is_counted_per_family_from_zero() {
    let m = Metrics::new();
    m.prime(SyncSeries::Ebpf, &IpFamily::ALL);
    let zero = "kubeproxy_rs_ebpf_sync_failures_total{ip_family=\"IPv4\"} 0\n";
    assert!(m.encode().contains(zero), "primed at 0");
    m.count_sync_failure(SyncSeries::Ebpf, IpFamily::V4, true);
    m.count_sync_failure(SyncSeries::Ebpf, IpFamily::V4, false);
    let text = m.encode();
    assert!(
        text.contains("kubeproxy_rs_ebpf_sync_failures_total{ip_family=\"IPv4\"} 2\n"),
        "{text}"
    );
    assert!(!text.contains("iptables_restore_failures_total{"), "{text}");
}
