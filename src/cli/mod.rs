//! The command line: the proxy itself (upstream's flags) and the `plan`, `explain` and
//! `status` subcommands.
//!
//! Parsing and wiring only; decisions live in `config`, `cluster` and each mode's folder
//! (through [`crate::dataplane::modes`]).

mod args;
pub mod configure;
pub mod debug;
pub mod events;
pub mod explain;
pub mod host_setup;
pub mod json_log;
pub mod klog;
pub mod logging;
pub mod observe;
pub mod parse;
pub mod plan;
pub mod run;
pub mod shutdown;
pub mod status;
pub mod version;

pub use args::{Cli, Command, ExplainArgs, PlanArgs, StatusArgs};

use std::path::Path;

use crate::cluster::service::Ignored;
use crate::cluster::source::{Event, api, manifests};
use crate::cluster::{Features, ServiceKey, Snapshot, Tracker, Warning};
use crate::config::{ClientConnection, Config};
use crate::dataplane::modes;

/// How `plan` prints its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned text for people.
    #[default]
    Table,
    /// Stable JSON for scripts.
    Json,
}

/// What a manifest directory means on one node: the snapshot, what was ignored, and warnings.
pub struct Loaded {
    pub snapshot: Snapshot,
    pub ignored: Vec<(ServiceKey, Ignored)>,
    pub warnings: Vec<Warning>,
}

/// Why a command ended with an error; [`crate::causes::one_line`] is its line for the user.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `status --service` is not a service's name.
    #[error("--{0}")]
    Service(status::BadService),
    #[error(transparent)]
    Explain(#[from] explain::command::Error),
    #[error(transparent)]
    Configure(#[from] configure::Error),
    #[error(transparent)]
    Status(#[from] status::ask::Error),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Run(#[from] run::Error),
}

/// Why the cluster's objects could not be loaded for `plan` or `explain`.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manifests(#[from] manifests::Error),
    #[error(transparent)]
    Api(#[from] api::Error),
    #[error(transparent)]
    Runtime(#[from] run::RuntimeError),
}

/// Why `plan` has no report.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The configuration gives the mode no node policy to plan with.
    #[error(transparent)]
    Node(#[from] crate::dataplane::node::Error),
}

/// The cluster's objects as `plan` and `explain` see them: from `--manifests`, else listed
/// once from the API server.
pub fn load(config: &Config, node_name: &str, features: Features) -> Result<Loaded, LoadError> {
    Ok(match &config.manifests {
        Some(dir) => load_manifests(dir, node_name, features)?,
        None => run::runtime()?.block_on(load_cluster(
            &config.client,
            node_name,
            features,
            modes::of(config.mode).service_address_link(),
        ))?,
    })
}

/// Loads a manifest directory and folds it into a tracker for `node_name`. Warnings from the
/// files and from the tracker end up in the result, not in the log.
pub fn load_manifests(
    dir: &Path,
    node_name: &str,
    features: Features,
) -> Result<Loaded, manifests::Error> {
    let loaded = manifests::load_dir(dir)?;
    let warnings: Vec<Warning> = loaded
        .warnings
        .iter()
        .map(|w| {
            let object = match &w.object {
                Some(o) => format!("{} ({o})", w.place),
                None => w.place.to_string(),
            };
            Warning::new(&object, w.problem.to_string())
        })
        .collect();
    Ok(fold(loaded.into_events(), warnings, node_name, features))
}

/// Lists the live cluster once (one list per kind with the running proxy's selectors, no
/// watch) and folds it like [`load_manifests`], for `plan` without `--manifests`, with this
/// host's addresses but `service_link`'s (the mode's link for Service addresses).
pub async fn load_cluster(
    connection: &ClientConnection,
    node_name: &str,
    features: Features,
    service_link: Option<&str>,
) -> Result<Loaded, api::Error> {
    let (client, _) = api::client(connection).await?;
    let mut events = api::list(&client, node_name).await?;
    // The host's addresses, as the running proxy follows them: NodePorts on every address (or
    // on the nodePortAddresses CIDRs) are planned over them, not over the Node object's.
    match crate::cluster::source::interfaces::read(service_link) {
        Ok(addresses) => events.push(Event::HostAddresses(addresses)),
        Err(error) => tracing::warn!(
            %error,
            "cannot read this host's interface addresses; planning NodePorts over the Node \
             object's addresses"
        ),
    }
    Ok(fold(events, Vec::new(), node_name, features))
}

/// Folds `events` into a fresh tracker; the tracker's warnings follow `warnings`.
fn fold(
    events: Vec<Event>,
    mut warnings: Vec<Warning>,
    node_name: &str,
    features: Features,
) -> Loaded {
    let mut tracker = Tracker::new(node_name, features);
    for event in events {
        warnings.extend(tracker.apply(&event));
    }
    let (snapshot, _) = tracker.snapshot();
    Loaded {
        snapshot,
        ignored: tracker.ignored_services(),
        warnings,
    }
}

/// Loads a manifest directory, folds it into a tracker for `node_name`, and builds the report.
pub fn plan_manifests(
    dir: &Path,
    node_name: &str,
    features: Features,
) -> Result<plan::Report, manifests::Error> {
    let l = load_manifests(dir, node_name, features)?;
    Ok(plan::report(&l.snapshot, &l.ignored, &l.warnings))
}

/// `plan`: the report of the loaded objects in `format`; in table format the configured mode's
/// own desired state follows it ([`crate::dataplane::mode::Mode::render_plan`]).
pub fn plan(
    config: &Config,
    node_name: &str,
    features: Features,
    format: OutputFormat,
) -> Result<String, PlanError> {
    let loaded = load(config, node_name, features)?;
    let report = plan::report(&loaded.snapshot, &loaded.ignored, &loaded.warnings);
    let mut text = render(&report, format);
    if format == OutputFormat::Table {
        let mode = modes::of(config.mode);
        text.push_str(&mode.render_plan(config, &loaded.snapshot)?);
    }
    Ok(text)
}

/// Renders a report in the chosen format.
pub fn render(report: &plan::Report, format: OutputFormat) -> String {
    match format {
        OutputFormat::Table => plan::render_table(report),
        OutputFormat::Json => plan::render_json(report),
    }
}

#[cfg(test)]
mod golden_tests;
