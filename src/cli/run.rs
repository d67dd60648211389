//! The long-running proxy: a source (the API server, or a manifest directory with
//! `--manifests`), the sync runner, and the configured mode's dataplane with what the mode runs
//! beside it ([`crate::dataplane::modes`]); and `--cleanup` and `--init-only`, which end after
//! the host's set-up.
//!
//! Wiring only: building the values and handing them to each other. The handles health and
//! metrics need ([`Proxy::status`], [`Proxy::reachability`]) are exposed before it runs.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::watch;

use super::observe::{Observe, ServeFailure};
use super::{debug, events, host_setup, shutdown};
use crate::cluster::source::{Event, api, interfaces, manifests};
use crate::cluster::{Features, Tracker};
use crate::config::Config;
use crate::dataplane::mode::{Mode, StartError};
use crate::dataplane::tool::Launcher;
use crate::dataplane::{self, Dataplane, leftovers, modes, monitor};
use crate::sync::{Periods, Runner, Status};

/// Why the proxy's source could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Manifests(#[from] manifests::Error),
}

/// Why the proxy (or `--cleanup`) ended with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// `KUBE_FEATURE_WatchListClient` is not a boolean.
    #[error(transparent)]
    Lists(#[from] api::NotABoolean),
    /// The mode could not start its dataplane.
    #[error(transparent)]
    Start(StartError),
    #[error(transparent)]
    Build(#[from] BuildError),
    /// A health or metrics server could not serve, with `--bind-address-hard-fail`. The flag
    /// ends the line, after the failure and its causes, so the failure is told here rather
    /// than as a `source` (which [`crate::causes::one_line`] would put after the flag).
    #[error("{} (--bind-address-hard-fail)", crate::causes::one_line(.0))]
    HardFail(ServeFailure),
    /// A tool refused to remove what `--cleanup` found; one entry per refusal.
    #[error("--cleanup: {}", .0.join("; "))]
    Cleanup(Vec<String>),
}

/// The runtime could not be built (threads or the I/O driver refused).
#[derive(Debug, thiserror::Error)]
#[error("cannot start the runtime")]
pub struct RuntimeError(#[source] pub std::io::Error);

/// Runs the proxy for `config`, after the `Version info` line: `--cleanup` cleans up after
/// every mode and ends; otherwise the host's set-up (the conntrack sysctls, the mode's own),
/// after which `--init-only` ends, and then the mode starts and the proxy syncs until a signal
/// or the end of its source.
pub fn run(config: &Config, node_name: &str, features: Features) -> Result<(), Error> {
    // First, as upstream logs it: whatever follows is read knowing which build said it.
    super::version::log_start(config, node_name);
    if !config.mode_explicit {
        tracing::warn!(
            mode = config.mode.as_str(),
            "no proxy mode given; defaulting as upstream does"
        );
    }
    if config.cleanup {
        return cleanup(config);
    }
    let mode = modes::of(config.mode);
    host_setup::conntrack_sysctls(config);
    mode.set_up_host(config);
    if config.init_only {
        // Upstream's --init-only does the host setup that needs full privileges (the conntrack
        // sysctls) and exits, so the long-running proxy can do with CAP_NET_ADMIN.
        tracing::info!("--init-only: privileged host setup done; exiting");
        return Ok(());
    }
    host_setup::oom_score_adj(config);
    let runtime = runtime()?;
    let lists = watch_list_client()?;
    runtime.block_on(serve(config, node_name, features, mode, lists))
}

/// Starts the mode and everything beside the runner (Events, health, metrics, the mode's
/// monitor and tasks), then runs until a signal, the end of the source, or a server that
/// cannot serve with `--bind-address-hard-fail`.
async fn serve(
    config: &Config,
    node_name: &str,
    features: Features,
    mode: &dyn Mode,
    lists: api::Lists,
) -> Result<(), Error> {
    let started = crate::dataplane::modes::start(mode, config).map_err(Error::Start)?;
    let service_link = mode.service_address_link();
    let mut proxy = Proxy::build(
        config,
        node_name,
        features,
        started.dataplane,
        lists,
        service_link,
    )
    .await?;
    if let Some(client) = proxy.client.clone() {
        tokio::spawn(events::follow(
            client.clone(),
            node_name.to_string(),
            proxy.status.clone(),
        ));
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        proxy.on_event_warning(move |w| {
            // Full: the budget would have dropped it anyway.
            let _ = tx.try_send(w.clone());
        });
        tokio::spawn(events::publish_object_warnings(
            client,
            node_name.to_string(),
            rx,
        ));
    }
    let mut observe = Observe::new(config, mode.sync_series());
    let (health, relay) = (observe.health.clone(), started.relay.clone());
    observe
        .metrics
        .set_rest_client_source(proxy.reachability.as_ref().map(|r| r.requests()));
    if let Some(relay) = started.relay {
        observe.metrics.set_relay_source(relay);
    }
    if let Some(datapath) = started.datapath {
        observe.metrics.set_ebpf_source(datapath);
    }
    if let Some(traffic) = started.traffic {
        observe.metrics.set_traffic_source(traffic);
    }
    if let Some(drift) = started.monitor
        && let Some(watch) = mode.watch()
    {
        proxy.full_sync_on(drift.waker());
        observe.count_repairs(drift.clone(), watch);
        tokio::spawn(monitor::run(None, drift, watch));
    }
    proxy.on_report(observe.observer());
    tokio::spawn(leftovers::remove_after_first_sync(
        mode.owns(),
        proxy.status.clone(),
    ));
    tokio::spawn(observe.clone().follow_status(proxy.status.clone()));
    tokio::spawn(
        observe
            .clone()
            .serve_health_checks(config.node_port_addresses.clone()),
    );
    // --bind-address-hard-fail: a server that cannot serve ends the proxy.
    let (hard_fail, mut failed) = tokio::sync::mpsc::unbounded_channel();
    let hard_fail = config.bind_address_hard_fail.then_some(hard_fail);
    if let Some(address) = config.healthz_bind_address {
        tokio::spawn(observe.clone().serve_health(address, hard_fail.clone()));
    }
    for task in started.tasks {
        task(observe.feed());
    }
    let debug = debug::router(debug::Handles {
        peek: proxy.peek(),
        config: Arc::new(config.clone()),
        sync: proxy.status.clone(),
        health_checks: observe.health_checks(),
    });
    let metrics = config.metrics_bind_address;
    tokio::spawn(observe.serve_metrics(metrics, config.clone(), debug, hard_fail));
    tokio::select! {
        Some(failure) = failed.recv() => Err(Error::HardFail(failure)),
        () = shutdown::run_until_stopped(proxy.run(), &health, relay.as_deref()) => Ok(()),
    }
}

/// `--cleanup`: removes our nftables tables and upstream kube-proxy's leftovers, whatever the
/// mode, and says what it removed; an error when a tool refused.
fn cleanup(config: &Config) -> Result<(), Error> {
    let report = dataplane::cleanup::cleanup_with(&Launcher::here(), config);
    for removed in &report.removed {
        tracing::info!(what = %removed.what, count = removed.count, "--cleanup: removed");
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Error::Cleanup(report.errors))
    }
}

/// The blocking threads (each sync runs on one) are kept for an hour rather than tokio's 10 s:
/// with the default, every periodic sync after a quiet `syncPeriod` (30 s) would start a new
/// thread first, a hand-off many times slower than waking a kept thread (`handoff` in the
/// sync's debug line; docs/benchmarks.md, "Blocking threads kept").
const SYNC_THREAD_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The multi-threaded runtime the proxy and the commands that ask over the network run on.
pub fn runtime() -> Result<tokio::runtime::Runtime, RuntimeError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(SYNC_THREAD_KEEP_ALIVE)
        .build()
        .map_err(RuntimeError)
}

/// How the API watches read their lists: client-go's environment switch
/// `KUBE_FEATURE_WatchListClient`, which upstream's kube-proxy honours too.
#[allow(clippy::disallowed_methods)] // the one environment read: client-go's switch
fn watch_list_client() -> Result<api::Lists, api::NotABoolean> {
    let value = std::env::var("KUBE_FEATURE_WatchListClient").ok();
    api::Lists::from_env_value(value.as_deref())
}
/// A proxy ready to run.
pub struct Proxy {
    runner: Runner,
    events: BoxStream<'static, Event>,
    /// The runner's status, for `/healthz` and metrics.
    pub status: watch::Receiver<Status>,
    /// Whether the API server answers; `None` with `--manifests`.
    pub reachability: Option<api::Reachability>,
    /// The API client, for publishing Events; `None` with `--manifests`.
    pub client: Option<kube::Client>,
}

impl Proxy {
    /// Builds the source for `config` and a runner around `dataplane`. Connects nothing yet
    /// beyond reading the kubeconfig (or starting the directory watch).
    pub async fn build(
        config: &Config,
        node_name: &str,
        features: Features,
        dataplane: Box<dyn Dataplane>,
        lists: api::Lists,
        service_link: Option<&'static str>,
    ) -> Result<Proxy, BuildError> {
        let (events, reachability, client) = match &config.manifests {
            Some(dir) => {
                tracing::info!(manifests = %dir.display(), "source: manifest directory");
                (manifests::watch(dir.clone())?.boxed(), None, None)
            }
            None => {
                let (events, reachability, client) =
                    api::watch_on_own_thread(config.client.clone(), node_name.to_owned(), lists)
                        .await?;
                (events, Some(reachability), Some(client))
            }
        };
        // The host's interface addresses join the cluster's objects (nodePortAddresses CIDRs).
        // The proxy still ends when the cluster source does.
        let events = futures::stream::select(
            events.map(Some).chain(futures::stream::iter([None])),
            interfaces::watch(service_link).map(Some),
        )
        .take_while(|e| std::future::ready(e.is_some()))
        .filter_map(std::future::ready)
        .boxed();
        let runner = Runner::new(
            Tracker::new(node_name, features),
            dataplane,
            Periods::new(config.min_sync_period, config.sync_period),
        );
        Ok(Proxy {
            status: runner.status(),
            runner,
            events,
            reachability,
            client,
        })
    }

    /// Adds an observer of every sync report (health, metrics).
    pub fn on_report(
        &mut self,
        observer: impl FnMut(&crate::sync::Report, &crate::cluster::Snapshot) + Send + 'static,
    ) {
        self.runner.on_report(observer);
    }

    /// Adds an observer of the warnings that ask for an Event on their object.
    pub fn on_event_warning(
        &mut self,
        observer: impl FnMut(&crate::cluster::warning::Warning) + Send + 'static,
    ) {
        self.runner.on_event_warning(observer);
    }

    /// A handle on the runner's model for the debug endpoints.
    pub fn peek(&mut self) -> crate::sync::Peek {
        self.runner.peek()
    }

    /// Starts a full sync whenever `trigger` is notified (the dataplane's outside-change monitor).
    pub fn full_sync_on(&mut self, trigger: Arc<tokio::sync::Notify>) {
        self.runner.full_sync_on(trigger);
    }

    /// Runs until the source ends (a manifest directory's watch can; the API source cannot).
    pub async fn run(self) {
        self.runner.run(self.events).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hard_failure_keeps_the_servers_io_error_and_ends_its_line_with_the_flag() {
        let failure = ServeFailure::Bind {
            path: "/healthz",
            address: "127.0.0.1:10256".parse().unwrap(),
            cause: std::io::ErrorKind::AddrInUse.into(),
        };
        let cause = std::error::Error::source(&failure).expect("the bind's io error");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::AddrInUse)
        );
        let cause = cause.to_string();
        let line = crate::causes::one_line(&Error::HardFail(failure));
        assert_eq!(
            line,
            format!("cannot serve /healthz on 127.0.0.1:10256: {cause} (--bind-address-hard-fail)")
        );
    }
}
