//! The one list of settings kube-proxy-rs accepts, for compatibility with upstream files and
//! command lines, but does not act on, each with the reason.
//!
//! Both the start-up warnings ([`warnings`]) and `--help` (through [`flag_note`]) read this list,
//! so the two cannot disagree; a setting that is acted on has no entry. A setting left at its
//! default says nothing, so it produces no warning; one set to anything else produces one warning
//! naming it (the flag when it came from the command line, the field path when it came from the
//! file). Pure: returns warnings, logs nothing.

use serde_json::Value;

use super::Warning;
use super::defaults;
use super::model::{Config, ProxyMode};

/// A setting accepted but not acted on.
pub struct NotActedOn {
    /// Its path in the KubeProxyConfiguration file.
    pub field: &'static str,
    /// Its flag without dashes, if it has one.
    pub flag: Option<&'static str>,
    /// Where it is not acted on, e.g. `outside userspace mode`; empty: anywhere.
    pub scope: &'static str,
    /// Why, in a few lower-case words.
    pub why: &'static str,
    /// Whether a configuration sets it away from its default (in the scope).
    is_set: fn(&Config) -> bool,
}

/// Every setting accepted but not acted on. Remove an entry when its feature lands.
pub const LIST: &[NotActedOn] = &[
    NotActedOn {
        field: "enableProfiling",
        flag: Some("profiling"),
        scope: "",
        why: "kube-proxy-rs serves no /debug/pprof",
        is_set: |c| c.enable_profiling,
    },
    NotActedOn {
        field: "showHiddenMetricsForVersion",
        flag: Some("show-hidden-metrics-for-version"),
        scope: "",
        why: "kube-proxy-rs hides no metrics",
        is_set: |c| !c.show_hidden_metrics_for_version.is_empty(),
    },
    NotActedOn {
        field: "clientConnection.acceptContentTypes",
        flag: None,
        scope: "",
        why: "each request asks for the content types it reads",
        is_set: |c| !c.client.accept_content_types.is_empty(),
    },
    NotActedOn {
        field: "configSyncPeriod",
        flag: Some("config-sync-period"),
        scope: "",
        why: "the watches have no periodic resync",
        is_set: |c| c.config_sync_period != defaults::CONFIG_SYNC_PERIOD,
    },
    NotActedOn {
        field: "winkernel.networkName",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| !c.winkernel.network_name.is_empty(),
    },
    NotActedOn {
        field: "winkernel.sourceVip",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| !c.winkernel.source_vip.is_empty(),
    },
    NotActedOn {
        field: "winkernel.enableDSR",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| c.winkernel.enable_dsr,
    },
    NotActedOn {
        field: "winkernel.rootHnsEndpointName",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| !c.winkernel.root_hns_endpoint_name.is_empty(),
    },
    NotActedOn {
        field: "winkernel.forwardHealthCheckVip",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| c.winkernel.forward_health_check_vip,
    },
    NotActedOn {
        field: "windowsRunAsService",
        flag: None,
        scope: "",
        why: "Windows only",
        is_set: |c| c.windows_run_as_service,
    },
    NotActedOn {
        field: "--nodeport-localhost",
        flag: Some("nodeport-localhost"),
        scope: "outside nftables and userspace mode",
        why: "only those modes relay localhost NodePorts",
        is_set: |c| {
            c.userspace.node_port_localhost
                && !matches!(c.mode, ProxyMode::Nftables | ProxyMode::Userspace)
        },
    },
    NotActedOn {
        field: "portRange",
        flag: Some("proxy-port-range"),
        scope: "outside userspace mode",
        why: "only userspace mode opens listeners",
        is_set: |c| !c.port_range.is_empty() && c.mode != ProxyMode::Userspace,
    },
    NotActedOn {
        field: "logging.flushFrequency",
        flag: Some("log-flush-frequency"),
        scope: "",
        why: "every log line is written at once, unbuffered",
        is_set: |c| c.logging.flush_frequency != defaults::LOG_FLUSH_FREQUENCY,
    },
    NotActedOn {
        field: "logging.vmodule",
        flag: Some("vmodule"),
        scope: "",
        why: "-v applies to every source file",
        is_set: |c| !is_zero(&c.logging.vmodule),
    },
    NotActedOn {
        field: "logging.options.text.splitStream",
        flag: Some("log-text-split-stream"),
        scope: "",
        why: "every log line goes to stderr",
        is_set: |c| !is_zero(&c.logging.options["text"]["splitStream"]),
    },
    NotActedOn {
        field: "logging.options.text.infoBufferSize",
        flag: Some("log-text-info-buffer-size"),
        scope: "",
        why: "every log line is written at once, unbuffered",
        is_set: |c| !is_zero(&c.logging.options["text"]["infoBufferSize"]),
    },
    NotActedOn {
        field: "logging.options.json.splitStream",
        flag: Some("log-json-split-stream"),
        scope: "",
        why: "every log line goes to stderr",
        is_set: |c| !is_zero(&c.logging.options["json"]["splitStream"]),
    },
    NotActedOn {
        field: "logging.options.json.infoBufferSize",
        flag: Some("log-json-info-buffer-size"),
        scope: "",
        why: "every log line is written at once, unbuffered",
        is_set: |c| !is_zero(&c.logging.options["json"]["infoBufferSize"]),
    },
];

/// Whether a free-form value holds nothing but zero values (`{json: {infoBufferSize: "0"}}`
/// is what upstream writes by default).
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0",
        Value::Array(items) => items.iter().all(is_zero),
        Value::Object(map) => map.values().all(is_zero),
    }
}

/// What `--help` adds to a flag's description when the flag is on the list: `Not acted on
/// (outside userspace mode): only userspace mode opens listeners`.
pub fn flag_note(flag: &str) -> Option<String> {
    LIST.iter()
        .find(|s| s.flag == Some(flag))
        .map(|s| format!("Not acted on{}: {}", scope(s.scope), s.why))
}

fn scope(scope: &str) -> String {
    if scope.is_empty() {
        String::new()
    } else {
        format!(" ({scope})")
    }
}

/// One warning per listed setting that `config` sets; named by flag unless the configuration
/// came from a file.
pub fn warnings(config: &Config, from_file: bool) -> Vec<Warning> {
    LIST.iter()
        .filter(|s| (s.is_set)(config))
        .map(|s| Warning::NotActedOn {
            setting: match (from_file, s.flag) {
                (false, Some(flag)) => format!("--{flag}"),
                _ => s.field.to_owned(),
            },
            scope: s.scope,
            why: s.why,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_warn_about_nothing() {
        assert!(warnings(&Config::default(), true).is_empty());
        assert!(warnings(&Config::default(), false).is_empty());
    }

    #[test]
    fn each_set_setting_warns_once_by_its_name_and_reason() {
        let mut c = Config {
            enable_profiling: true,
            ..Config::default()
        };
        c.winkernel.enable_dsr = true;
        c.logging.options = serde_json::json!({"json": {"infoBufferSize": "0"}});
        let names: Vec<String> = warnings(&c, false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "--profiling is accepted but not acted on: kube-proxy-rs serves no /debug/pprof",
                "winkernel.enableDSR is accepted but not acted on: Windows only",
            ]
        );
        let names: Vec<String> = warnings(&c, true).iter().map(ToString::to_string).collect();
        assert_eq!(
            names[0],
            "enableProfiling is accepted but not acted on: kube-proxy-rs serves no /debug/pprof"
        );
    }

    #[test]
    fn the_ipvs_settings_are_acted_on() {
        let mut c = Config {
            mode: ProxyMode::Ipvs,
            ..Config::default()
        };
        c.ipvs.scheduler = "wrr".into();
        c.ipvs.strict_arp = true;
        c.ipvs.exclude_cidrs = vec!["10.0.0.0/8".parse().unwrap()];
        c.ipvs.tcp_timeout = std::time::Duration::from_secs(5);
        c.ipvs.tcp_fin_timeout = std::time::Duration::from_secs(5);
        c.ipvs.udp_timeout = std::time::Duration::from_secs(5);
        assert!(warnings(&c, false).is_empty());
        assert!(LIST.iter().all(|s| !s.field.starts_with("ipvs.")));
    }

    #[test]
    fn each_entry_is_named_once() {
        let mut fields: Vec<&str> = LIST.iter().map(|s| s.field).collect();
        fields.sort_unstable();
        fields.dedup();
        assert_eq!(fields.len(), LIST.len());
        let flags: Vec<&str> = LIST.iter().filter_map(|s| s.flag).collect();
        let mut unique = flags.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), flags.len());
    }

    #[test]
    fn a_scoped_entry_says_where_in_help_and_warns_only_there() {
        assert_eq!(
            flag_note("proxy-port-range").as_deref(),
            Some("Not acted on (outside userspace mode): only userspace mode opens listeners")
        );
        assert_eq!(flag_note("proxy-mode"), None);
        let mut c = Config {
            port_range: "30000-30100".into(),
            mode: ProxyMode::Userspace,
            ..Config::default()
        };
        assert!(warnings(&c, false).is_empty());
        c.mode = ProxyMode::Nftables;
        assert_eq!(
            warnings(&c, false)[0].to_string(),
            "--proxy-port-range is accepted but not acted on (outside userspace mode): only \
             userspace mode opens listeners"
        );
    }
}
