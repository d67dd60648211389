//! The settings kube-proxy-rs accepts, for compatibility with upstream files and command
//! lines, but does not act on yet: the one place to shrink as features land.
//!
//! A setting left at its default says nothing, so it produces no warning; one set to anything
//! else produces one warning naming it (the flag when it came from the command line, the field
//! path when it came from the file). Pure: returns warnings, logs nothing.

use serde_json::Value;

use super::Warning;
use super::defaults;
use super::model::{Config, ProxyMode};

/// A setting accepted but not acted on: its file path, its flag (if any), and whether a
/// configuration sets it away from its default.
struct Pending {
    field: &'static str,
    flag: Option<&'static str>,
    is_set: fn(&Config) -> bool,
}

const fn pending(
    field: &'static str,
    flag: Option<&'static str>,
    is_set: fn(&Config) -> bool,
) -> Pending {
    Pending {
        field,
        flag,
        is_set,
    }
}

/// Every setting not acted on yet. Remove an entry when its feature lands.
const PENDING: &[Pending] = &[
    pending("bindAddressHardFail", Some("bind-address-hard-fail"), |c| {
        c.bind_address_hard_fail
    }),
    pending("enableProfiling", Some("profiling"), |c| c.enable_profiling),
    pending(
        "showHiddenMetricsForVersion",
        Some("show-hidden-metrics-for-version"),
        |c| !c.show_hidden_metrics_for_version.is_empty(),
    ),
    pending("clientConnection.acceptContentTypes", None, |c| {
        !c.client.accept_content_types.is_empty()
    }),
    pending("configSyncPeriod", Some("config-sync-period"), |c| {
        c.config_sync_period != defaults::CONFIG_SYNC_PERIOD
    }),
    pending("ipvs.scheduler", Some("ipvs-scheduler"), |c| {
        !c.ipvs.scheduler.is_empty()
    }),
    pending("ipvs.excludeCIDRs", Some("ipvs-exclude-cidrs"), |c| {
        !c.ipvs.exclude_cidrs.is_empty()
    }),
    pending("ipvs.strictARP", Some("ipvs-strict-arp"), |c| {
        c.ipvs.strict_arp
    }),
    pending("ipvs.tcpTimeout", Some("ipvs-tcp-timeout"), |c| {
        !c.ipvs.tcp_timeout.is_zero()
    }),
    pending("ipvs.tcpFinTimeout", Some("ipvs-tcpfin-timeout"), |c| {
        !c.ipvs.tcp_fin_timeout.is_zero()
    }),
    pending("ipvs.udpTimeout", Some("ipvs-udp-timeout"), |c| {
        !c.ipvs.udp_timeout.is_zero()
    }),
    pending("winkernel.networkName", None, |c| {
        !c.winkernel.network_name.is_empty()
    }),
    pending("winkernel.sourceVip", None, |c| {
        !c.winkernel.source_vip.is_empty()
    }),
    pending("winkernel.enableDSR", None, |c| c.winkernel.enable_dsr),
    pending("winkernel.rootHnsEndpointName", None, |c| {
        !c.winkernel.root_hns_endpoint_name.is_empty()
    }),
    pending("winkernel.forwardHealthCheckVip", None, |c| {
        c.winkernel.forward_health_check_vip
    }),
    pending("windowsRunAsService", None, |c| c.windows_run_as_service),
    pending("--nodeport-localhost", Some("nodeport-localhost"), |c| {
        c.userspace.node_port_localhost
            && !matches!(c.mode, ProxyMode::Nftables | ProxyMode::Userspace)
    }),
    pending("portRange", None, |c| {
        !c.port_range.is_empty() && c.mode != ProxyMode::Userspace
    }),
    pending("logging.flushFrequency", None, |c| {
        c.logging.flush_frequency != defaults::LOG_FLUSH_FREQUENCY
    }),
    pending("logging.vmodule", None, |c| !is_zero(&c.logging.vmodule)),
    pending("logging.options", None, |c| !is_zero(&c.logging.options)),
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

/// One warning per pending setting that `config` sets; named by flag unless the configuration
/// came from a file.
pub fn warnings(config: &Config, from_file: bool) -> Vec<Warning> {
    PENDING
        .iter()
        .filter(|p| (p.is_set)(config))
        .map(|p| Warning::NotActedOn {
            setting: match (from_file, p.flag) {
                (false, Some(flag)) => format!("--{flag}"),
                _ => p.field.to_owned(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_warn_about_nothing() {
        assert!(warnings(&Config::default(), true).is_empty());
    }

    #[test]
    fn each_set_pending_setting_warns_once_by_its_name() {
        let mut c = Config::default();
        c.ipvs.scheduler = "wrr".into();
        c.winkernel.enable_dsr = true;
        c.logging.options = serde_json::json!({"json": {"infoBufferSize": "0"}});
        let names: Vec<String> = warnings(&c, false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            names,
            [
                "--ipvs-scheduler is accepted but not acted on yet",
                "winkernel.enableDSR is accepted but not acted on yet",
            ]
        );
        let names: Vec<String> = warnings(&c, true).iter().map(ToString::to_string).collect();
        assert_eq!(names[0], "ipvs.scheduler is accepted but not acted on yet");
    }
}
