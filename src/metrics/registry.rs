//! The metrics registry: every metric of [`names`](super::names), and the methods the sync
//! runner and the health servers record through.
//!
//! [`Metrics`] is a cheap-to-clone handle; recording is lock-free (atomics) except the first
//! use of a label set. Times and durations are arguments: nothing here reads a clock. Pure code
//! never records; the runner records what the pure code returned (see `docs/architecture.md`).
//!
//! Every metric is registered whatever the mode. A labelled metric appears in a scrape only once
//! it has a series, so [`Metrics::prime`] creates the zero-valued series of the mode and the
//! families the proxy runs, which makes `rate()` and absence alerts work from the first scrape
//! (upstream shows a series only after its first observation).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use super::labels::{
    CheckState, CodeLabels, FamilyLabels, Policy, PolicyLabels, StateLabels, Table, TableLabels,
};
use super::names::{self, Spec};
use super::process::Process;
use crate::cluster::{ChangeCounts, IpFamily};
use crate::dataplane::SyncReport;
use crate::health::service::Report as HealthCheckReport;

/// The `Content-Type` of a scrape: Prometheus text format 0.0.4, as upstream serves it.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

type Histograms = Family<FamilyLabels, Histogram, fn() -> Histogram>;
type Timestamps = Family<FamilyLabels, Gauge<f64, AtomicU64>>;
type PerFamily = Family<FamilyLabels, Counter>;

/// Which of upstream's mode-specific series a mode's syncs feed: the failure counters a failed
/// sync counts, and the rule counts per table. Each mode names its own
/// ([`crate::dataplane::mode::Mode::sync_series`]), so the registry never asks which mode runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncSeries {
    /// `nftables_sync_failures_total` and `nftables_cleanup_failures_total`.
    Nftables,
    /// `iptables_restore_failures_total`, `iptables_partial_restore_failures_total` (for a
    /// failed partial sync) and the rule counts of the filter and nat tables.
    Iptables,
    /// `iptables_restore_failures_total` alone, as upstream's IPVS mode counts a failure of the
    /// rules it keeps beside its virtual servers.
    IptablesRestore,
    /// Our `ebpf_sync_failures_total`: upstream has no eBPF mode to match.
    Ebpf,
    /// None: the mode's failures have no counter (the relay's failure to open a listener).
    Uncounted,
}

/// Which repairs counter a mode's full syncs after an outside change count in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepairSeries {
    /// `kubeproxy_rs_nftables_repairs_total`: our nftables table.
    Nftables,
    /// `kubeproxy_rs_iptables_repairs_total`: iptables-nft chains.
    Iptables,
}

/// Which proxy health endpoint answered (`kubeproxy_proxy_{healthz,livez}_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    Healthz,
    Livez,
}

struct Inner {
    registry: Registry,
    sync_duration: Histograms,
    sync_full_duration: Histograms,
    sync_partial_duration: Histograms,
    network_programming: Histograms,
    last_sync: Timestamps,
    last_queued: Timestamps,
    endpoint_changes_pending: Gauge,
    endpoint_changes_total: Counter,
    service_changes_pending: Gauge,
    service_changes_total: Counter,
    no_local_endpoints: Family<PolicyLabels, Gauge>,
    iptables_restore_failures: PerFamily,
    iptables_partial_restore_failures: PerFamily,
    iptables_rules_total: Family<TableLabels, Gauge>,
    iptables_rules_last: Family<TableLabels, Gauge>,
    nftables_sync_failures: PerFamily,
    nftables_cleanup_failures: PerFamily,
    healthz: Family<CodeLabels, Counter>,
    livez: Family<CodeLabels, Counter>,
    conntrack_duration: Histograms,
    conntrack_deleted: PerFamily,
    objects: Family<FamilyLabels, Gauge>,
    operations: PerFamily,
    netlink_messages: Counter,
    health_checks: Family<StateLabels, Gauge>,
    nftables_repairs: Counter,
    iptables_repairs: Counter,
    ebpf_udp_destroyed: Counter,
    ebpf_sync_failures: PerFamily,
    /// The per-Service traffic counters' source (see [`super::traffic`]).
    traffic: super::traffic::SharedSource,
    /// The userspace relay's listeners (see [`super::relay`]).
    relayed: super::relay::SharedSource,
    /// The datapath counters a mode hands over (see [`super::datapath`]).
    datapath: super::datapath::SharedSource,
    /// The API client's request counts (see [`super::rest_client`]).
    rest_client: super::rest_client::SharedSource,
}

/// The proxy's metrics. Clone it into every task that records.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

fn sync_histogram() -> Histogram {
    Histogram::new(names::sync_buckets())
}

fn network_programming_histogram() -> Histogram {
    Histogram::new(names::network_programming_buckets())
}

fn family(f: IpFamily) -> FamilyLabels {
    FamilyLabels { ip_family: f }
}

fn seconds_since_epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Registers `metric` under `spec` and hands it back, so each field is built in one line.
fn register<M: Metric + Clone>(registry: &mut Registry, spec: &Spec, metric: M) -> M {
    registry.register(spec.registered_name(), spec.help, metric.clone());
    metric
}

impl Metrics {
    /// Every metric registered, with the process collector.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        r.register_collector(Box::new(Process));
        let traffic = super::traffic::SharedSource::default();
        r.register_collector(Box::new(super::traffic::Traffic(traffic.clone())));
        let relayed = super::relay::SharedSource::default();
        r.register_collector(Box::new(super::relay::Relayed(relayed.clone())));
        let datapath = super::datapath::SharedSource::default();
        r.register_collector(Box::new(super::datapath::Datapath(datapath.clone())));
        let rest_client = super::rest_client::SharedSource::default();
        r.register_collector(Box::new(super::rest_client::RestClient(
            rest_client.clone(),
        )));
        let sync = || Histograms::new_with_constructor(sync_histogram as fn() -> Histogram);
        let inner = Inner {
            sync_duration: register(&mut r, &names::SYNC_DURATION, sync()),
            sync_full_duration: register(&mut r, &names::SYNC_FULL_DURATION, sync()),
            sync_partial_duration: register(&mut r, &names::SYNC_PARTIAL_DURATION, sync()),
            network_programming: register(
                &mut r,
                &names::NETWORK_PROGRAMMING_DURATION,
                Histograms::new_with_constructor(network_programming_histogram),
            ),
            last_sync: register(&mut r, &names::LAST_SYNC_TIMESTAMP, Timestamps::default()),
            last_queued: register(&mut r, &names::LAST_QUEUED_TIMESTAMP, Timestamps::default()),
            endpoint_changes_pending: register(
                &mut r,
                &names::ENDPOINT_CHANGES_PENDING,
                Gauge::default(),
            ),
            endpoint_changes_total: register(
                &mut r,
                &names::ENDPOINT_CHANGES_TOTAL,
                Counter::default(),
            ),
            service_changes_pending: register(
                &mut r,
                &names::SERVICE_CHANGES_PENDING,
                Gauge::default(),
            ),
            service_changes_total: register(
                &mut r,
                &names::SERVICE_CHANGES_TOTAL,
                Counter::default(),
            ),
            no_local_endpoints: register(&mut r, &names::NO_LOCAL_ENDPOINTS, Family::default()),
            iptables_restore_failures: register(
                &mut r,
                &names::IPTABLES_RESTORE_FAILURES,
                Family::default(),
            ),
            iptables_partial_restore_failures: register(
                &mut r,
                &names::IPTABLES_PARTIAL_RESTORE_FAILURES,
                Family::default(),
            ),
            iptables_rules_total: register(&mut r, &names::IPTABLES_RULES_TOTAL, Family::default()),
            iptables_rules_last: register(&mut r, &names::IPTABLES_RULES_LAST, Family::default()),
            nftables_sync_failures: register(
                &mut r,
                &names::NFTABLES_SYNC_FAILURES,
                Family::default(),
            ),
            nftables_cleanup_failures: register(
                &mut r,
                &names::NFTABLES_CLEANUP_FAILURES,
                Family::default(),
            ),
            healthz: register(&mut r, &names::HEALTHZ_TOTAL, Family::default()),
            livez: register(&mut r, &names::LIVEZ_TOTAL, Family::default()),
            conntrack_duration: register(&mut r, &names::CONNTRACK_SYNC_DURATION, sync()),
            conntrack_deleted: register(
                &mut r,
                &names::CONNTRACK_DELETED_ENTRIES,
                Family::default(),
            ),
            objects: register(&mut r, &names::RS_OBJECTS, Family::default()),
            operations: register(&mut r, &names::RS_OPERATIONS, Family::default()),
            netlink_messages: register(&mut r, &names::RS_NETLINK_MESSAGES, Counter::default()),
            health_checks: register(&mut r, &names::RS_HEALTH_CHECKS, Family::default()),
            nftables_repairs: register(&mut r, &names::RS_NFTABLES_REPAIRS, Counter::default()),
            iptables_repairs: register(&mut r, &names::RS_IPTABLES_REPAIRS, Counter::default()),
            ebpf_udp_destroyed: register(
                &mut r,
                &names::RS_EBPF_UDP_SOCKETS_DESTROYED,
                Counter::default(),
            ),
            ebpf_sync_failures: register(&mut r, &names::RS_EBPF_SYNC_FAILURES, Family::default()),
            traffic,
            relayed,
            datapath,
            rest_client,
            // Last: every field above borrowed the registry to register itself.
            registry: r,
        };
        Metrics(Arc::new(inner))
    }

    /// Creates the zero-valued series of everything `mode` records for `families`: sync and
    /// conntrack histograms, failure counters of the mode, no-local-endpoint gauges, our own
    /// counters, and both probe codes. Timestamps stay absent until the first queued change
    /// and successful sync, so "time since last sync" alerts cannot see a fake epoch.
    pub fn prime(&self, series: SyncSeries, families: &[IpFamily]) {
        let i = &self.0;
        for &f in families {
            let labels = family(f);
            for h in [
                &i.sync_duration,
                &i.sync_full_duration,
                &i.sync_partial_duration,
                &i.network_programming,
                &i.conntrack_duration,
            ] {
                drop(h.get_or_create(&labels));
            }
            let mut counters = vec![&i.conntrack_deleted, &i.operations];
            match series {
                SyncSeries::Nftables => {
                    counters.extend([&i.nftables_sync_failures, &i.nftables_cleanup_failures]);
                }
                SyncSeries::Iptables => counters.extend([
                    &i.iptables_restore_failures,
                    &i.iptables_partial_restore_failures,
                ]),
                SyncSeries::IptablesRestore => counters.push(&i.iptables_restore_failures),
                SyncSeries::Ebpf => counters.push(&i.ebpf_sync_failures),
                SyncSeries::Uncounted => {}
            }
            for c in counters {
                drop(c.get_or_create(&labels));
            }
            drop(i.objects.get_or_create(&labels));
            for traffic_policy in [Policy::Internal, Policy::External] {
                let labels = PolicyLabels {
                    ip_family: f,
                    traffic_policy,
                };
                drop(i.no_local_endpoints.get_or_create(&labels));
            }
            if series == SyncSeries::Iptables {
                for table in [Table::Filter, Table::Nat] {
                    let labels = TableLabels {
                        ip_family: f,
                        table,
                    };
                    drop(i.iptables_rules_total.get_or_create(&labels));
                    drop(i.iptables_rules_last.get_or_create(&labels));
                }
            }
        }
        for code in [200, 503] {
            drop(i.healthz.get_or_create(&CodeLabels { code }));
            drop(i.livez.get_or_create(&CodeLabels { code }));
        }
        for state in [CheckState::Open, CheckState::Failing] {
            drop(i.health_checks.get_or_create(&StateLabels { state }));
        }
    }

    /// Where each scrape reads the per-Service traffic counters (IPVS mode).
    pub fn set_traffic_source(&self, source: Arc<dyn crate::dataplane::TrafficSource>) {
        *self
            .0
            .traffic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// Where each scrape reads the userspace relay's listeners (userspace mode).
    pub fn set_relay_source(&self, source: Arc<dyn crate::dataplane::counters::RelaySource>) {
        *self
            .0
            .relayed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// Where each scrape reads the eBPF mode's counters and map fill levels.
    pub fn set_ebpf_source(&self, source: Arc<dyn crate::dataplane::counters::DatapathSource>) {
        *self
            .0
            .datapath
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(source);
    }

    /// Where each scrape reads the API client's request counts; `None` (no client, as with
    /// `--manifests`) leaves the metric without samples.
    pub fn set_rest_client_source(
        &self,
        source: Option<crate::cluster::source::api::RequestCounts>,
    ) {
        *self
            .0
            .rest_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = source;
    }

    /// The scrape body, in Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a collector error would only truncate the scrape.
        if let Err(e) = prometheus_text::encode(&mut out, &self.0.registry) {
            tracing::warn!(error = %e, "metrics encoding failed; scrape truncated");
        }
        out
    }

    /// A change for `family` was queued at `at` (`..._last_queued_timestamp_seconds`).
    pub fn queued(&self, family_: IpFamily, at: SystemTime) {
        self.0
            .last_queued
            .get_or_create(&family(family_))
            .set(seconds_since_epoch(at));
    }

    /// One sync attempt of `family` took `duration`, whether it succeeded or not, as upstream
    /// observes it: into the overall histogram and the full or partial one.
    #[doc(alias = "SyncProxyRulesLatency")]
    pub fn observe_sync(&self, family_: IpFamily, full: bool, duration: Duration) {
        let labels = family(family_);
        let secs = duration.as_secs_f64();
        self.0.sync_duration.get_or_create(&labels).observe(secs);
        let by_kind = if full {
            &self.0.sync_full_duration
        } else {
            &self.0.sync_partial_duration
        };
        by_kind.get_or_create(&labels).observe(secs);
    }

    /// A sync of `family` succeeded at `at` (`..._last_timestamp_seconds`).
    pub fn synced(&self, family_: IpFamily, at: SystemTime) {
        self.0
            .last_sync
            .get_or_create(&family(family_))
            .set(seconds_since_epoch(at));
    }

    /// Takes the counts of a successful sync: Services without local endpoints per policy, our
    /// kernel object and operation counts, the netlink messages it sent, and in iptables mode
    /// the rules per table. Family reports without a family are skipped: every metric here but
    /// the message count is labelled by family.
    pub fn record_report(&self, report: &SyncReport) {
        self.0
            .netlink_messages
            .inc_by(report.netlink_messages as u64);
        for r in &report.families {
            let Some(f) = r.family else { continue };
            for (policy, n) in [
                (Policy::Internal, r.no_local_endpoints_internal),
                (Policy::External, r.no_local_endpoints_external),
            ] {
                let labels = PolicyLabels {
                    ip_family: f,
                    traffic_policy: policy,
                };
                self.0
                    .no_local_endpoints
                    .get_or_create(&labels)
                    .set(gauge_value(n));
            }
            self.0
                .objects
                .get_or_create(&family(f))
                .set(gauge_value(r.objects));
            self.0
                .operations
                .get_or_create(&family(f))
                .inc_by(r.operations as u64);
            if let Some(rules) = &r.iptables_rules {
                for (table, counts) in [(Table::Filter, rules.filter), (Table::Nat, rules.nat)] {
                    self.set_iptables_rules(f, table, counts.total, counts.last);
                }
            }
        }
    }

    /// A sync of `family` failed, counted in the mode's `series`: `nftables_sync_failures_total`,
    /// or `iptables_restore_failures_total` (and for iptables
    /// `iptables_partial_restore_failures_total` when the sync was partial), or our
    /// `ebpf_sync_failures_total` (upstream has no eBPF mode).
    pub fn count_sync_failure(&self, series: SyncSeries, family_: IpFamily, full: bool) {
        let labels = family(family_);
        match series {
            SyncSeries::Nftables => {
                self.0.nftables_sync_failures.get_or_create(&labels).inc();
            }
            SyncSeries::Iptables | SyncSeries::IptablesRestore => {
                self.0
                    .iptables_restore_failures
                    .get_or_create(&labels)
                    .inc();
                if series == SyncSeries::Iptables && !full {
                    self.0
                        .iptables_partial_restore_failures
                        .get_or_create(&labels)
                        .inc();
                }
            }
            SyncSeries::Ebpf => {
                self.0.ebpf_sync_failures.get_or_create(&labels).inc();
            }
            SyncSeries::Uncounted => {}
        }
    }

    /// nftables could not delete stale chains of `family`.
    pub fn count_nftables_cleanup_failure(&self, family_: IpFamily) {
        self.0
            .nftables_cleanup_failures
            .get_or_create(&family(family_))
            .inc();
    }

    /// iptables mode: rules owned in `table` after a sync (`total`) and written by it (`last`).
    pub fn set_iptables_rules(&self, family_: IpFamily, table: Table, total: usize, last: usize) {
        let labels = TableLabels {
            ip_family: family_,
            table,
        };
        let total_gauge = self.0.iptables_rules_total.get_or_create(&labels);
        total_gauge.set(gauge_value(total));
        let last_gauge = self.0.iptables_rules_last.get_or_create(&labels);
        last_gauge.set(gauge_value(last));
    }

    /// The tracker's change counters. Totals are cumulative in the tracker; the counters move
    /// by the difference, so calling this after every snapshot is right.
    pub fn set_change_counts(&self, counts: &ChangeCounts) {
        let i = &self.0;
        i.endpoint_changes_pending
            .set(gauge_value(counts.endpoint_changes_pending));
        i.service_changes_pending
            .set(gauge_value(counts.service_changes_pending));
        for (counter, total) in [
            (&i.endpoint_changes_total, counts.endpoint_changes_total),
            (&i.service_changes_total, counts.service_changes_total),
        ] {
            let seen = counter.get();
            if total > seen {
                counter.inc_by(total - seen);
            }
        }
    }

    /// One changed EndpointSlice of `family` became programmed `latency` after its
    /// `endpoints.kubernetes.io/last-change-trigger-time`.
    pub fn observe_network_programming(&self, family_: IpFamily, latency: Duration) {
        self.0
            .network_programming
            .get_or_create(&family(family_))
            .observe(latency.as_secs_f64());
    }

    /// One conntrack cleanup of `family` took `duration` and deleted `deleted` flows.
    pub fn observe_conntrack_reconcile(&self, family_: IpFamily, duration: Duration, deleted: u64) {
        let labels = family(family_);
        self.0
            .conntrack_duration
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
        self.0
            .conntrack_deleted
            .get_or_create(&labels)
            .inc_by(deleted);
    }

    /// eBPF mode: `destroyed` connected UDP sockets to a removed backend.
    pub fn count_udp_sockets_destroyed(&self, destroyed: u64) {
        self.0.ebpf_udp_destroyed.inc_by(destroyed);
    }

    /// A proxy health endpoint answered `code`.
    pub fn count_probe(&self, probe: Probe, code: u16) {
        let family = match probe {
            Probe::Healthz => &self.0.healthz,
            Probe::Livez => &self.0.livez,
        };
        family.get_or_create(&CodeLabels { code }).inc();
    }

    /// A dataplane's running count of repairs of outside changes, in `series`.
    pub fn set_repairs(&self, series: RepairSeries, total: u64) {
        let counter = match series {
            RepairSeries::Nftables => &self.0.nftables_repairs,
            RepairSeries::Iptables => &self.0.iptables_repairs,
        };
        catch_up(counter, total);
    }

    /// How many Service health checks are open and how many cannot bind.
    pub fn set_health_checks(&self, report: &HealthCheckReport) {
        for (state, n) in [
            (CheckState::Open, report.open),
            (CheckState::Failing, report.failing),
        ] {
            self.0
                .health_checks
                .get_or_create(&StateLabels { state })
                .set(gauge_value(n));
        }
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;

/// Moves a counter up to a running total kept elsewhere.
fn catch_up(counter: &Counter, total: u64) {
    let seen = counter.get();
    if total > seen {
        counter.inc_by(total - seen);
    }
}
