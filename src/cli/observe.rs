//! Connects the sync runner to health, metrics and conntrack: each sync report and status change
//! becomes health state, metric observations, Service health-check listeners and the UDP/SCTP
//! frontends the conntrack reconciler compares with the kernel; and the `/healthz` and
//! `/metrics` servers are started on their configured addresses.
//!
//! Wiring only: the rules live in `health` (upstream's staleness rule, the JSON answers) and
//! `metrics` (upstream's names and buckets). Every listener that cannot be bound is logged and
//! retried, never fatal, as upstream keeps proxying when a health port is taken.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cluster::{IpFamily, NodeContext, ServiceKey, Snapshot};
use crate::config::{Config, NodePortAddresses};
use crate::conntrack;
use crate::dataplane::mode::Feed;
use crate::dataplane::monitor::{Drift, Watch};
use crate::health::service::{Check, Listen, Servers, Serving, desired};
use crate::health::{ProxyHealth, SharedHealth};
use crate::metrics::{Metrics, SyncSeries};
use crate::sync::{Report, Status};

/// How long a listener that could not be bound waits before trying again.
const REBIND_DELAY: Duration = Duration::from_secs(5);

/// What the Service health checks should look like after a sync.
#[derive(Clone, Debug, Default)]
struct Wanted {
    checks: BTreeMap<ServiceKey, Check>,
    node: Arc<NodeContext>,
}

/// Health state and metrics of one proxy, and the handles the servers read.
#[derive(Clone)]
pub struct Observe {
    pub health: SharedHealth,
    pub metrics: Metrics,
    /// The upstream series the mode's failed syncs count in.
    series: SyncSeries,
    /// Latencies are not split by family in the runner's report; they are recorded under the
    /// primary family (the one `bindAddress` selects), as upstream's single-stack proxier would.
    primary: IpFamily,
    wanted: watch::Sender<Option<Wanted>>,
    /// The UDP/SCTP frontends of the last successful sync, for the conntrack reconciler.
    frontends: watch::Sender<Option<Arc<conntrack::Frontends>>>,
    /// The dataplane's record of outside changes it repaired, when the nf_tables monitor runs.
    drift: Option<(Arc<Drift>, &'static dyn Watch)>,
    /// How each Service health check is served, after the latest update of the listeners.
    serving: watch::Sender<Arc<BTreeMap<ServiceKey, Serving>>>,
}

impl Observe {
    pub fn new(config: &Config, series: SyncSeries) -> Observe {
        let metrics = Metrics::new();
        metrics.prime(series, &IpFamily::ALL);
        Observe {
            health: SharedHealth::new(ProxyHealth::timeout_for(config.sync_period)),
            metrics,
            series,
            primary: IpFamily::of(&config.bind_address),
            wanted: watch::Sender::new(None),
            frontends: watch::Sender::new(None),
            drift: None,
            serving: watch::Sender::new(Arc::default()),
        }
    }

    /// How each Service health check is served, as the listeners last reported (for
    /// `/debug/status`).
    pub fn health_checks(&self) -> watch::Receiver<Arc<BTreeMap<ServiceKey, Serving>>> {
        self.serving.subscribe()
    }

    /// Exports the dataplane's repair count of outside changes the nf_tables monitor noticed
    /// watching `watch`, in the watch's repairs series. Call before [`Observe::observer`].
    pub fn count_repairs(&mut self, drift: Arc<Drift>, watch: &'static dyn Watch) {
        self.drift = Some((drift, watch));
    }

    /// The runner observer: records one sync's report and asks for the health checks and
    /// conntrack frontends it implies. Those two walk every service port, so they are derived
    /// again only when the model may have moved: a full sync, a sync with changed ports (a failed
    /// sync's changes are carried into the next), or a changed node; periodic syncs without
    /// changes cost nothing here.
    pub fn observer(&self) -> impl FnMut(&Report, &Snapshot) + Send + 'static {
        let this = self.clone();
        let mut last_node: Option<Arc<NodeContext>> = None;
        move |report, snapshot| {
            let moved = report.full
                || report.changed_ports > 0
                || last_node.as_deref() != Some(&*snapshot.node);
            last_node = Some(snapshot.node.clone());
            this.record(report, snapshot, moved);
        }
    }

    fn record(&self, report: &Report, snapshot: &Snapshot, moved: bool) {
        let ended = SystemTime::from(report.ended_at);
        self.health.sync_node(&snapshot.node);
        for family in IpFamily::ALL {
            self.metrics
                .observe_sync(family, report.full, report.duration);
            match &report.outcome {
                Ok(_) => {
                    self.health.updated(family, ended);
                    self.metrics.synced(family, ended);
                }
                Err(_) => self
                    .metrics
                    .count_sync_failure(self.series, family, report.full),
            }
        }
        if let Ok(sync) = &report.outcome {
            // Only after a successful sync: the kernel's rules then match the model, so new
            // flows reach the endpoints it names. Unchanged frontends wake nobody.
            if moved || self.frontends.borrow().is_none() {
                let frontends = conntrack::Frontends::from_snapshot(snapshot);
                self.frontends.send_if_modified(|current| {
                    let changed = current.as_deref() != Some(&frontends);
                    if changed {
                        *current = Some(Arc::new(frontends));
                    }
                    changed
                });
            }
            self.metrics.record_report(sync);
            for latency in &report.latencies {
                self.metrics
                    .observe_network_programming(self.primary, *latency);
            }
        }
        self.metrics.set_change_counts(&report.counts);
        if let Some((drift, watch)) = &self.drift {
            self.metrics.set_repairs(watch.repairs(), drift.repairs());
        }
        if moved {
            self.wanted.send_replace(Some(Wanted {
                checks: desired(snapshot),
                node: snapshot.node.clone(),
            }));
        } else {
            // Nothing to re-derive, but the health checks still retry ports that failed to bind.
            self.wanted.send_modify(|_| {});
        }
    }

    /// Follows the runner's status: queued changes start the health clock, and the end of
    /// start-up (all initial lists in) ends the grace period.
    pub async fn follow_status(self, mut status: watch::Receiver<Status>) {
        let mut last_queued = None;
        let mut ready = false;
        while status.changed().await.is_ok() {
            let (queued, now_ready) = {
                let s = status.borrow_and_update();
                (s.last_queued_at, s.ready)
            };
            if let Some(at) = queued.filter(|at| Some(*at) != last_queued) {
                last_queued = Some(at);
                for family in IpFamily::ALL {
                    self.health.queued_update(family, SystemTime::from(at));
                    self.metrics.queued(family, SystemTime::from(at));
                }
            }
            if now_ready && !ready {
                ready = true;
                IpFamily::ALL.iter().for_each(|f| self.health.ready(*f));
            }
        }
    }

    /// Keeps one health-check listener per Local LoadBalancer Service on the NodePort addresses,
    /// updated after every sync.
    pub async fn serve_health_checks(self, addresses: NodePortAddresses) {
        let mut wanted = self.wanted.subscribe();
        let mut servers = Servers::new(Listen::Addresses(Vec::new()), self.health.clone());
        while wanted.changed().await.is_ok() {
            let Some(w) = wanted.borrow_and_update().clone() else {
                continue;
            };
            let local = w.node.local_addresses();
            servers
                .set_listen(Listen::resolve(&addresses, &w.node, &local))
                .await;
            let report = servers.update(&w.checks).await;
            self.metrics.set_health_checks(&report);
            // Most syncs change no health check: `/debug/status` readers keep their copy.
            let serving = servers.serving();
            self.serving.send_if_modified(|now| {
                let changed = **now != serving;
                if changed {
                    *now = Arc::new(serving);
                }
                changed
            });
        }
    }

    /// What a mode's background tasks read: the UDP/SCTP frontends of each successful sync
    /// (the conntrack reconciler's, the eBPF mode's UDP socket reaper's) and the metrics.
    pub fn feed(&self) -> Feed {
        Feed {
            frontends: self.frontends.subscribe(),
            metrics: self.metrics.clone(),
        }
    }

    /// Serves `/healthz` and `/livez`, rebinding until the address is free; with
    /// `--bind-address-hard-fail` ([`HardFail`]) it reports the first failure and ends instead.
    pub async fn serve_health(self, address: SocketAddr, hard_fail: HardFail) {
        loop {
            let failure = match TcpListener::bind(address).await {
                Ok(listener) => {
                    tracing::info!(%address, "serving /healthz and /livez");
                    let served = crate::health::server::serve(
                        listener,
                        self.health.clone(),
                        self.metrics.clone(),
                    );
                    ServeFailure::Stopped {
                        server: "health",
                        address,
                        cause: served.await.err(),
                    }
                }
                Err(cause) => ServeFailure::Bind {
                    path: "/healthz",
                    address,
                    cause,
                },
            };
            if report(&hard_fail, failure) {
                return;
            }
            tokio::time::sleep(REBIND_DELAY).await;
        }
    }

    /// Serves `/metrics`, `/configz` and `/proxyMode`, and the routes of `extra` (the debug
    /// endpoints), rebinding until the address is free; with `--bind-address-hard-fail` it
    /// reports the first failure and ends instead.
    pub async fn serve_metrics(
        self,
        address: SocketAddr,
        config: Config,
        extra: axum::Router,
        hard_fail: HardFail,
    ) {
        let ip = address.ip().to_canonical();
        if !ip.is_loopback() && !ip.is_unspecified() {
            tracing::warn!(
                %address,
                "the /debug endpoints answer only connections to a loopback address, which this \
                 metrics address does not take; bind --metrics-bind-address to 127.0.0.1, \
                 0.0.0.0 or :: to use them (and `kube-proxy-rs status`)"
            );
        }
        loop {
            let failure = match TcpListener::bind(address).await {
                Ok(listener) => {
                    tracing::info!(%address, "serving /metrics");
                    let served = crate::metrics::server::serve(
                        listener,
                        self.metrics.clone(),
                        &config,
                        extra.clone(),
                    );
                    ServeFailure::Stopped {
                        server: "metrics",
                        address,
                        cause: served.await.err(),
                    }
                }
                Err(cause) => ServeFailure::Bind {
                    path: "/metrics",
                    address,
                    cause,
                },
            };
            if report(&hard_fail, failure) {
                return;
            }
            tokio::time::sleep(REBIND_DELAY).await;
        }
    }
}

/// Where the health and metrics servers report a failure to serve with
/// `--bind-address-hard-fail`, for the proxy to exit on, as upstream's does; `None`: they log it
/// and try again after [`REBIND_DELAY`].
pub type HardFail = Option<tokio::sync::mpsc::UnboundedSender<ServeFailure>>;

/// Why the health or metrics server does not serve.
#[derive(Debug, thiserror::Error)]
pub enum ServeFailure {
    /// Its address could not be bound (taken, or not this host's).
    #[error("cannot serve {path} on {address}")]
    Bind {
        /// The server's first path, `/healthz` or `/metrics`.
        path: &'static str,
        address: SocketAddr,
        #[source]
        cause: std::io::Error,
    },
    /// It was serving and stopped, with the error it stopped on if any.
    #[error("{server} server on {address} stopped")]
    Stopped {
        /// `health` or `metrics`.
        server: &'static str,
        address: SocketAddr,
        #[source]
        cause: Option<std::io::Error>,
    },
}

/// Reports `failure` to the hard-fail channel (true), or logs that the server tries again.
fn report(hard_fail: &HardFail, failure: ServeFailure) -> bool {
    match hard_fail {
        Some(channel) => {
            // The receiver outlives the servers; were it gone, the proxy is stopping anyway.
            let _ = channel.send(failure);
            true
        }
        None => {
            tracing::error!(
                "{}; trying again in {}s",
                crate::causes::one_line(&failure),
                REBIND_DELAY.as_secs()
            );
            false
        }
    }
}
