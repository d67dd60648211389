//! The command line: the proxy itself (upstream's flags) and the `plan` subcommand.
//!
//! Parsing and wiring only; decisions live in `config` and `cluster`.

mod args;
pub mod plan;
pub mod run;

pub use args::{Cli, Command, PlanArgs};

use std::path::Path;

use crate::cluster::source::manifests;
use crate::cluster::{Features, Tracker, Warning};

/// How `plan` prints its report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned text for people.
    #[default]
    Table,
    /// Stable JSON for scripts.
    Json,
}

/// Loads a manifest directory, folds it into a tracker for `node_name`, and builds the report.
/// Warnings from the files and from the tracker end up in the report, not in the log.
pub fn plan_manifests(
    dir: &Path,
    node_name: &str,
    features: Features,
) -> Result<plan::Report, manifests::Error> {
    let loaded = manifests::load_dir(dir)?;
    let mut warnings: Vec<Warning> = loaded
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
    let mut tracker = Tracker::new(node_name, features);
    for event in loaded.into_events() {
        warnings.extend(tracker.apply(&event));
    }
    let (snapshot, _) = tracker.snapshot();
    Ok(plan::report(
        &snapshot,
        &tracker.ignored_services(),
        &warnings,
    ))
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
