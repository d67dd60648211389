//! Command-line flags and the KubeProxyConfiguration file (`kubeproxy.config.k8s.io/v1alpha1`)
//! turned into one validated, typed [`Config`].
//!
//! Upstream's flags, file schema and defaults are interfaces we match, so an operator's existing
//! DaemonSet works unchanged. Layering follows upstream (`cmd/kube-proxy/app/options.go`):
//!
//! 1. Without `--config`, upstream's defaults with the given flags on top; the mode decides
//!    which sync-period flags count.
//! 2. With `--config`, the file replaces the flags entirely, except those upstream still
//!    honours: `-v` and `--logging-format` (logging flags win over the file),
//!    `--hostname-override` (applied after the file), `--master`, and the one-shot flags.
//!    Other given flags produce a warning instead of silently doing nothing.
//! 3. Ours only: a non-empty `--proxy-mode-override` is the mode in either case, as if the file
//!    (or `--proxy-mode`) had said it, so the mode picks its own section's settings. Upstream's
//!    `--proxy-mode` keeps upstream's meaning (ignored beside `--config`), so a DaemonSet with
//!    an operator's KubeProxyConfiguration changes its mode with this flag alone.
//!
//! Pure: reads no file, environment or clock. The caller reads `--config`'s file and passes its
//! text; [`resolve`] returns the configuration and the warnings to log, and [`render`] returns
//! the YAML for `--write-config-to`.

mod decode;
pub mod defaults;
pub mod duration;
pub mod feature_gates;
mod file;
mod flags;
mod from_file;
mod from_flags;
mod go_values;
mod model;
pub mod not_acted_on;
mod render;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};

pub use flags::{Flags, HONOURED_WITH_CONFIG, VersionStyle};
pub use model::{
    ClientConnection, Config, Conntrack, DetectLocal, DetectLocalMode, Ipvs, LogFormat, Logging,
    NftablesEncoder, NodePortAddresses, ProxyMode, Userspace, WinKernel,
};
pub use render::render;
pub use validate::Invalid;

/// Why the flags or the file cannot be used. `Display` is one lower-case line naming the flag
/// or the field path and saying what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The configuration file is not valid YAML/JSON, or a field in it has the wrong type or a
    /// value outside what is accepted (an unknown or duplicate field is only a
    /// [`Warning::LenientDecoding`]). `field` is a dotted path such as `iptables.masqueradeBit`,
    /// empty when the document as a whole is at fault.
    #[error("config file {}: {}", path.display(), join(field, message))]
    File {
        /// The file, as given to `--config`.
        path: PathBuf,
        /// Dotted path of the field, or empty.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
    /// A command-line flag has a value outside what is accepted.
    #[error("--{flag}: {message}")]
    Flag {
        /// Flag name without dashes, e.g. `iptables-masquerade-bit`.
        flag: &'static str,
        /// What is wrong and what is accepted.
        message: validate::Invalid,
    },
}

fn join(field: &str, message: &str) -> String {
    if field.is_empty() {
        message.to_owned()
    } else {
        format!("{field}: {message}")
    }
}

/// Something the operator should know but that does not stop kube-proxy-rs; the caller logs
/// each one at warn level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// A setting is accepted for compatibility but kube-proxy-rs does not act on it (an entry
    /// of [`not_acted_on::LIST`]).
    NotActedOn {
        /// `--flag` or the field path.
        setting: String,
        /// Where it is not acted on; empty: anywhere.
        scope: &'static str,
        /// Why.
        why: &'static str,
    },
    /// The file did not decode strictly (an unknown or duplicate field), so it was read
    /// leniently, as upstream does: unknown fields ignored, the last of duplicate keys kept.
    LenientDecoding {
        /// The file, as given to `--config`.
        path: PathBuf,
        /// Dotted path of the field the strict reading stopped at, or empty.
        field: String,
        /// The strict reading's error.
        message: String,
    },
    /// A flag upstream deprecated was given; it is still acted on.
    Deprecated {
        /// Flag name without dashes.
        flag: &'static str,
        /// What to use instead.
        instead: &'static str,
    },
    /// A flag was given but has no effect.
    FlagIgnored {
        /// Flag name without dashes.
        flag: &'static str,
        /// Why, in a few lower-case words.
        reason: &'static str,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::NotActedOn {
                setting,
                scope,
                why,
            } => {
                write!(f, "{setting} is accepted but not acted on")?;
                if !scope.is_empty() {
                    write!(f, " ({scope})")?;
                }
                write!(f, ": {why}")
            }
            Warning::LenientDecoding {
                path,
                field,
                message,
            } => write!(
                f,
                "config file {}: strict decoding failed ({}); read leniently: unknown fields \
                 ignored, the last of duplicate keys kept",
                path.display(),
                join(field, message)
            ),
            Warning::Deprecated { flag, instead } => {
                write!(f, "--{flag} is deprecated; use {instead}")
            }
            Warning::FlagIgnored { flag, reason } => write!(f, "--{flag} is ignored: {reason}"),
        }
    }
}

/// The effective configuration and the warnings to log about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The effective configuration.
    pub config: Config,
    /// One entry per ignored flag or not-yet-supported setting, for the caller to log.
    pub warnings: Vec<Warning>,
}

/// The configuration a KubeProxyConfiguration file gives on its own: what `--config PATH`
/// without other flags resolves to. `text` is the file's content.
pub fn from_file(path: &Path, text: &str) -> Result<Config, Error> {
    let flags = Flags {
        config: Some(path.to_owned()),
        ..Flags::default()
    };
    resolve(&flags, Some((path, text))).map(|r| r.config)
}

/// Builds the effective configuration from the flags and, when `--config` was given, the
/// file's path and text (`file` must be `Some` exactly when `flags.config` is).
pub fn resolve(flags: &Flags, file: Option<(&Path, &str)>) -> Result<Resolved, Error> {
    let mut warnings = Vec::new();
    let mode_override = flags
        .proxy_mode_override
        .as_deref()
        .filter(|m| !m.trim().is_empty());
    if let Some(mode) = mode_override {
        validate::proxy_mode(mode).map_err(|message| Error::Flag {
            flag: "proxy-mode-override",
            message,
        })?;
    }
    let mut config = match file {
        Some((path, text)) => {
            let (mut config, strict_error) =
                from_file::config(text, mode_override).map_err(|e| Error::File {
                    path: path.to_owned(),
                    field: e.field,
                    message: e.message,
                })?;
            config.config_file = Some(path.to_owned());
            warnings.extend(strict_error.map(|e| Warning::LenientDecoding {
                path: path.to_owned(),
                field: e.field,
                message: e.message,
            }));
            warnings.extend(
                flags
                    .changed()
                    .into_iter()
                    .filter(|name| !HONOURED_WITH_CONFIG.contains(name))
                    .map(|flag| Warning::FlagIgnored {
                        flag,
                        reason: "--config is given and the file replaces it",
                    }),
            );
            config
        }
        None => match mode_override {
            Some(mode) => {
                let flags = Flags {
                    proxy_mode: Some(mode.to_owned()),
                    ..flags.clone()
                };
                from_flags::config(&flags, &mut warnings)?
            }
            None => from_flags::config(flags, &mut warnings)?,
        },
    };
    apply_always(flags, &mut config)?;
    warnings.extend(not_acted_on::warnings(&config, file.is_some()));
    Ok(Resolved { config, warnings })
}

/// The flags that apply whether or not a file was given.
fn apply_always(flags: &Flags, c: &mut Config) -> Result<(), Error> {
    c.write_config_to.clone_from(&flags.write_config_to);
    c.cleanup = flags.cleanup.unwrap_or(false);
    c.init_only = flags.init_only.unwrap_or(false);
    c.manifests.clone_from(&flags.manifests);
    c.bpf_cgroup.clone_from(&flags.bpf_cgroup);
    c.bpf_pin_root.clone_from(&flags.bpf_pin_root);
    if let Some(text) = &flags.nftables_encoder {
        c.nftables_encoder = validate::nftables_encoder(text).map_err(|message| Error::Flag {
            flag: "nftables-encoder",
            message,
        })?;
    }
    if let Some(on) = flags.nodeport_localhost {
        c.userspace.node_port_localhost = on;
    }
    if let Some(d) = flags.udp_timeout {
        c.userspace.udp_idle_timeout = validate::positive(d).map_err(|message| Error::Flag {
            flag: "udp-timeout",
            message,
        })?;
    }
    let limit = |flag: &'static str, value: i64| {
        validate::count(value)
            .and_then(|n| match n {
                0 => Err("must be 1 or more, got 0".into()),
                n => Ok(n),
            })
            .map_err(|message| Error::Flag { flag, message })
    };
    if let Some(n) = flags.userspace_max_connections {
        c.userspace.max_connections = limit("userspace-max-connections", n)?;
    }
    if let Some(n) = flags.userspace_max_connections_per_service {
        c.userspace.max_connections_per_service =
            limit("userspace-max-connections-per-service", n)?;
    }
    if let Some(master) = flags.master.as_deref().filter(|m| !m.is_empty()) {
        c.client.master = Some(master.to_owned());
    }
    // Upstream ignores an empty --hostname-override but refuses one of only spaces.
    if let Some(name) = flags.hostname_override.as_deref().filter(|n| !n.is_empty()) {
        c.hostname_override = Some(validate::hostname(name).ok_or(Error::Flag {
            flag: "hostname-override",
            message: "must not be blank".into(),
        })?);
    }
    apply_logging(flags, &mut c.logging)
}

/// The logging flags, which win over the file's `logging` as upstream's do; `--vmodule` adds
/// to the file's list, as upstream's does.
fn apply_logging(flags: &Flags, log: &mut model::Logging) -> Result<(), Error> {
    let flag_error = |flag: &'static str| move |message| Error::Flag { flag, message };
    if let Some(v) = flags.verbosity {
        log.verbosity = v;
    }
    if let Some(format) = &flags.logging_format {
        log.format = validate::log_format(format).map_err(flag_error("logging-format"))?;
    }
    if let Some(entries) = &flags.vmodule {
        let items = go_values::vmodule(&entries.join(",")).map_err(flag_error("vmodule"))?;
        let mut list = match std::mem::take(&mut log.vmodule) {
            serde_json::Value::Array(list) => list,
            _ => Vec::new(),
        };
        list.extend(
            items.into_iter().map(
                |i| serde_json::json!({"filePattern": i.file_pattern, "verbosity": i.verbosity}),
            ),
        );
        log.vmodule = serde_json::Value::Array(list);
    }
    if let Some(d) = flags.log_flush_frequency {
        log.flush_frequency = validate::positive(d).map_err(flag_error("log-flush-frequency"))?;
    }
    let options = [
        (
            "text",
            "splitStream",
            flags.log_text_split_stream.map(Into::into),
        ),
        (
            "text",
            "infoBufferSize",
            flags.log_text_info_buffer_size.clone().map(Into::into),
        ),
        (
            "json",
            "splitStream",
            flags.log_json_split_stream.map(Into::into),
        ),
        (
            "json",
            "infoBufferSize",
            flags.log_json_info_buffer_size.clone().map(Into::into),
        ),
    ];
    for (format, key, value) in options {
        if let Some(value) = value {
            if !log.options.is_object() {
                log.options = serde_json::json!({});
            }
            if !log.options[format].is_object() {
                log.options[format] = serde_json::json!({});
            }
            log.options[format][key] = value;
        }
    }
    Ok(())
}
