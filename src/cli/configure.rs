//! From the flags to the effective configuration, and what follows from it at once: the config
//! file read, logging started with the configured format and verbosity, `--write-config-to`,
//! the node's name and the feature gates the cluster model reads.

use std::path::Path;

use crate::cluster::Features;
use crate::config::{self, Config, Flags};

/// The configuration of `flags` (and of the `--config` file they name); logging is started
/// with it and the warnings of resolving it are its first lines.
pub fn configure(flags: &Flags) -> Result<Config, String> {
    let file_text = match &flags.config {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| format!("config file {}: cannot read: {e}", path.display()))?,
        ),
        None => None,
    };
    let file = flags.config.as_deref().zip(file_text.as_deref());
    let resolved = config::resolve(flags, file).map_err(|e| e.to_string())?;
    super::logging::init(&resolved.config);
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    Ok(resolved.config)
}

/// `--write-config-to`: the effective configuration as a file.
#[allow(clippy::disallowed_methods)] // the one place that writes the requested config file
pub fn write_config(path: &Path, config: &Config) -> Result<(), String> {
    std::fs::write(path, config::render(config))
        .map_err(|e| format!("--write-config-to {}: {e}", path.display()))
}

/// `--hostname-override`, else the kernel's host name, lower-cased as upstream does.
pub fn node_name(config: &Config) -> Result<String, String> {
    if let Some(name) = &config.hostname_override {
        return Ok(name.clone());
    }
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .map_err(|e| format!("cannot read the host name ({e}); give --hostname-override"))
}

/// The feature gates the cluster model follows.
pub fn features(config: &Config) -> Features {
    Features {
        prefer_same_node: config.gate("PreferSameTrafficDistribution"),
    }
}
