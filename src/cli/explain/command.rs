//! The `explain` command: its arguments checked before the configuration is read, then the
//! running proxy's answer, or (without one, or with `--manifests`) an explanation over the
//! objects loaded here.

use super::super::LoadError;
use super::super::status::ask;
use super::super::{ExplainArgs, OutputFormat};
use super::{Request, live, remote, render, request};
use crate::cluster::Features;
use crate::config::Config;

/// Why `explain` has no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The packet's flags do not describe one.
    #[error(transparent)]
    Request(#[from] request::Error),
    /// The running proxy was there but gave no answer.
    #[error(transparent)]
    Remote(#[from] ask::Error),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Explain(#[from] live::Error),
}

/// What `explain` was asked: the packet, the output format, and the same question as the
/// running proxy's `/debug/explain` path takes it.
pub struct Asked {
    request: Request,
    format: OutputFormat,
    remote: String,
}

impl Asked {
    /// The question in `args`, or why it is not one.
    pub fn of(args: &ExplainArgs) -> Result<Asked, Error> {
        let (to, from, in_interface) =
            (&args.to, args.from.as_deref(), args.in_interface.as_deref());
        Ok(Asked {
            request: Request::parse(to, from, in_interface)?,
            format: args.output,
            remote: remote::path(to, from, in_interface, args.output),
        })
    }
}

/// The explanation, rendered. Without `--manifests` the running proxy answers first, as for
/// `status`.
pub fn answer(
    config: &Config,
    node_name: &str,
    features: Features,
    asked: &Asked,
) -> Result<String, Error> {
    if config.manifests.is_none() {
        match remote::ask(config.metrics_bind_address, &asked.remote)? {
            Some(answer) => return Ok(answer),
            None => {
                tracing::info!("no proxy answers on the metrics address; asking the API server")
            }
        }
    }
    let loaded = super::super::load(config, node_name, features)?;
    let offline = config.manifests.is_some();
    let explanation = live::explain_on_node(config, &loaded.snapshot, &asked.request, offline)?;
    Ok(match asked.format {
        OutputFormat::Table => render::text(&explanation),
        OutputFormat::Json => render::json(&explanation),
    })
}
