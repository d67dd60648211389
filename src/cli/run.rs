//! The long-running proxy: a source (the API server, or a manifest directory with
//! `--manifests`), the sync runner, and a dataplane.
//!
//! Wiring only: building the values and handing them to each other. The handles health and
//! metrics need ([`Proxy::status`], [`Proxy::reachability`]) are exposed before it runs.

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio::sync::watch;

use crate::cluster::source::{Event, api, manifests};
use crate::cluster::{Features, Tracker};
use crate::config::Config;
use crate::dataplane::Dataplane;
use crate::sync::{LogOnly, Periods, Runner, Status};

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Manifests(#[from] manifests::Error),
}

/// The dataplane for `config`. No mode is implemented yet, so this is the stand-in that follows
/// and logs the model, and it says so: a mode's `Box<dyn Dataplane>` goes here when it lands.
pub fn dataplane(config: &Config) -> Box<dyn Dataplane> {
    tracing::warn!(
        mode = config.mode.as_str(),
        "no dataplane mode is implemented yet: the cluster model is followed and logged, no rules are programmed"
    );
    Box::new(LogOnly)
}

/// A proxy ready to run.
pub struct Proxy {
    runner: Runner,
    events: BoxStream<'static, Event>,
    /// The runner's status, for `/healthz` and metrics.
    pub status: watch::Receiver<Status>,
    /// Whether the API server answers; `None` with `--manifests`.
    pub reachability: Option<api::Reachability>,
}

impl Proxy {
    /// Builds the source for `config` and a runner around `dataplane`. Connects nothing yet
    /// beyond reading the kubeconfig (or starting the directory watch).
    pub async fn build(
        config: &Config,
        node_name: &str,
        features: Features,
        dataplane: Box<dyn Dataplane>,
    ) -> Result<Proxy, Error> {
        let (events, reachability) = match &config.manifests {
            Some(dir) => {
                tracing::info!(manifests = %dir.display(), "source: manifest directory");
                (manifests::watch(dir.clone())?.boxed(), None)
            }
            None => {
                let (client, reachability) = api::client(&config.client).await?;
                (api::watch(client, node_name), Some(reachability))
            }
        };
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
        })
    }

    /// Adds an observer of every sync report (health, metrics).
    pub fn on_report(
        &mut self,
        observer: impl FnMut(&crate::sync::Report, &crate::cluster::Snapshot) + Send + 'static,
    ) {
        self.runner.on_report(observer);
    }

    /// Runs until the source ends (a manifest directory's watch can; the API source cannot).
    pub async fn run(self) {
        self.runner.run(self.events).await;
    }
}
