//! From the flags to the effective configuration, and what follows from it at once: the config
//! file read, logging started with the configured format and verbosity, `--write-config-to`,
//! the node's name and the feature gates the cluster model reads.

use std::path::{Path, PathBuf};

use crate::cluster::Features;
use crate::config::{self, Config, Flags};

/// Why the configuration could not be had or written, or the node not named.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--config` file could not be read.
    #[error("config file {}: cannot read", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// The flags or the file hold a value that is not accepted.
    #[error(transparent)]
    Invalid(#[from] config::Error),
    /// The `--write-config-to` file could not be written.
    #[error("--write-config-to {}", path.display())]
    WriteConfig {
        path: PathBuf,
        #[source]
        cause: std::io::Error,
    },
    /// The kernel's host name could not be read. The cause is told inside the sentence, not
    /// after it, so that the way out (`--hostname-override`) ends the line; it is therefore
    /// not a `source`, which [`crate::causes::one_line`] would repeat at the end.
    #[error("cannot read the host name ({0}); give --hostname-override")]
    HostName(std::io::Error),
}

/// The configuration of `flags` (and of the `--config` file they name); logging is started
/// with it and the warnings of resolving it are its first lines.
pub fn configure(flags: &Flags) -> Result<Config, Error> {
    let file_text = match &flags.config {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|cause| Error::ReadFile {
                path: path.clone(),
                cause,
            })?,
        ),
        None => None,
    };
    let file = flags.config.as_deref().zip(file_text.as_deref());
    let resolved = config::resolve(flags, file)?;
    super::logging::init(&resolved.config);
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    Ok(resolved.config)
}

/// `--write-config-to`: the effective configuration as a file.
#[allow(clippy::disallowed_methods)] // the one place that writes the requested config file
pub fn write_config(path: &Path, config: &Config) -> Result<(), Error> {
    std::fs::write(path, config::render(config)).map_err(|cause| Error::WriteConfig {
        path: path.to_owned(),
        cause,
    })
}

/// `--hostname-override`, else the kernel's host name, lower-cased as upstream does.
pub fn node_name(config: &Config) -> Result<String, Error> {
    if let Some(name) = &config.hostname_override {
        return Ok(name.clone());
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .map_err(Error::HostName)
}

/// The feature gates the cluster model follows.
pub fn features(config: &Config) -> Features {
    Features {
        prefer_same_node: config.gate("PreferSameTrafficDistribution"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_config_file_keeps_its_io_error_and_names_the_file() {
        let flags = Flags {
            config: Some("/nonexistent/kube-proxy.yaml".into()),
            ..Flags::default()
        };
        let error = configure(&flags).unwrap_err();
        let Error::ReadFile { path, cause } = &error else {
            panic!("{error:?}");
        };
        assert_eq!(path, Path::new("/nonexistent/kube-proxy.yaml"));
        assert_eq!(cause.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(
            crate::causes::one_line(&error),
            format!("config file /nonexistent/kube-proxy.yaml: cannot read: {cause}")
        );
    }
}
