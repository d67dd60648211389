//! The effective configuration when no `--config` file is given: upstream's defaults with the
//! given flags on top.
//!
//! As upstream does, the mode picks which sync-period flags count (`--ipvs-*` in ipvs mode,
//! `--iptables-*` otherwise, nftables included), `--iptables-masquerade-bit` does not reach
//! nftables mode, and `--cluster-cidr` is split on commas. A flag that therefore has no effect
//! produces a warning. Upstream's deprecated `--healthz-port` and `--metrics-port` give the
//! port of a server address given without one, and `--healthz-port=0` turns the health server
//! off. Errors name the flag. Pure: no I/O.

use std::time::Duration;

use super::defaults::{self, HEALTHZ_PORT, METRICS_PORT};
use super::flags::Flags;
use super::model::{Config, DetectLocalMode, NodePortAddresses, ProxyMode};
use super::{Error, Warning, feature_gates, validate};

/// Attaches the flag name to a validation message.
fn flag<T>(name: &'static str, result: validate::Result<T>) -> Result<T, Error> {
    result.map_err(|message| Error::Flag {
        flag: name,
        message,
    })
}

/// Builds the configuration from the flags that describe it (not the one-shot or logging
/// flags, which `resolve` applies in every case).
pub fn config(flags: &Flags, warnings: &mut Vec<Warning>) -> Result<Config, Error> {
    let mut c = Config::default();
    let ignored = |flag: &'static str, reason: &'static str| Warning::FlagIgnored { flag, reason };

    if let Some(mode) = flag(
        "proxy-mode",
        validate::proxy_mode(flags.proxy_mode.as_deref().unwrap_or("")),
    )? {
        c.mode = mode;
        c.mode_explicit = true;
    }

    // Sync periods: the mode decides which pair of flags counts.
    let (sync, min, sync_name, min_name, other) = if c.mode == ProxyMode::Ipvs {
        (
            flags.ipvs_sync_period,
            flags.ipvs_min_sync_period,
            "ipvs-sync-period",
            "ipvs-min-sync-period",
            [
                ("iptables-sync-period", flags.iptables_sync_period),
                ("iptables-min-sync-period", flags.iptables_min_sync_period),
            ],
        )
    } else {
        (
            flags.iptables_sync_period,
            flags.iptables_min_sync_period,
            "iptables-sync-period",
            "iptables-min-sync-period",
            [
                ("ipvs-sync-period", flags.ipvs_sync_period),
                ("ipvs-min-sync-period", flags.ipvs_min_sync_period),
            ],
        )
    };
    for (name, value) in other {
        if value.is_some() {
            let reason = if c.mode == ProxyMode::Ipvs {
                "it applies to iptables and nftables mode, not ipvs"
            } else {
                "it applies only to ipvs mode"
            };
            warnings.push(ignored(name, reason));
        }
    }
    c.sync_period = flag(
        sync_name,
        validate::positive(sync.unwrap_or(defaults::SYNC_PERIOD)),
    )?;
    c.min_sync_period = min.unwrap_or(defaults::MIN_SYNC_PERIOD);
    flag(
        sync_name,
        validate::sync_covers_min(c.sync_period, c.min_sync_period, &format!("--{min_name}")),
    )?;

    if let Some(bit) = flags.iptables_masquerade_bit {
        let bit = flag("iptables-masquerade-bit", validate::masquerade_bit(bit))?;
        if c.mode == ProxyMode::Nftables {
            warnings.push(ignored(
                "iptables-masquerade-bit",
                "nftables mode takes its masquerade bit only from the config file",
            ));
        } else {
            c.masquerade_bit = bit;
        }
    }
    c.masquerade_all = flags.masquerade_all.unwrap_or(c.masquerade_all);
    c.localhost_node_ports = flags
        .iptables_localhost_nodeports
        .unwrap_or(c.localhost_node_ports);

    c.ipvs.scheduler = flags.ipvs_scheduler.clone().unwrap_or_default();
    if let Some(cidrs) = &flags.ipvs_exclude_cidrs {
        let cidrs: Vec<String> = cidrs
            .iter()
            .filter(|s| !s.trim().is_empty())
            .cloned()
            .collect();
        c.ipvs.exclude_cidrs = flag("ipvs-exclude-cidrs", validate::cidrs(&cidrs))?;
    }
    c.ipvs.strict_arp = flags.ipvs_strict_arp.unwrap_or(false);
    c.ipvs.tcp_timeout = flags.ipvs_tcp_timeout.unwrap_or(Duration::ZERO);
    c.ipvs.tcp_fin_timeout = flags.ipvs_tcpfin_timeout.unwrap_or(Duration::ZERO);
    c.ipvs.udp_timeout = flags.ipvs_udp_timeout.unwrap_or(Duration::ZERO);

    if let Some(mode) = flag(
        "detect-local-mode",
        validate::detect_local_mode(flags.detect_local_mode.as_deref().unwrap_or("")),
    )? {
        c.detect_local_mode = mode;
    }
    c.detect_local.bridge_interface = flags.pod_bridge_interface.clone().unwrap_or_default();
    c.detect_local.interface_name_prefix =
        flags.pod_interface_name_prefix.clone().unwrap_or_default();
    match c.detect_local_mode {
        DetectLocalMode::BridgeInterface => flag(
            "pod-bridge-interface",
            validate::interface(&c.detect_local.bridge_interface, c.detect_local_mode),
        )?,
        DetectLocalMode::InterfaceNamePrefix => flag(
            "pod-interface-name-prefix",
            validate::interface(&c.detect_local.interface_name_prefix, c.detect_local_mode),
        )?,
        DetectLocalMode::ClusterCidr | DetectLocalMode::NodeCidr => {}
    }
    if let Some(text) = &flags.cluster_cidr {
        c.cluster_cidrs = flag("cluster-cidr", validate::cluster_cidrs(text))?;
    }
    c.node_port_addresses = match &flags.nodeport_addresses {
        Some(entries) => flag("nodeport-addresses", validate::node_port_addresses(entries))?,
        None => None,
    }
    .unwrap_or_else(|| NodePortAddresses::default_for(c.mode));

    if let Some(v) = flags.oom_score_adj {
        c.oom_score_adj = flag("oom-score-adj", validate::oom_score_adj(v))?;
    }
    if let Some(v) = flags.conntrack_max_per_core {
        c.conntrack.max_per_core = flag("conntrack-max-per-core", validate::count(v))?;
    }
    if let Some(v) = flags.conntrack_min {
        c.conntrack.min = flag("conntrack-min", validate::count(v))?;
    }
    let ct = &mut c.conntrack;
    ct.tcp_established_timeout = flags
        .conntrack_tcp_timeout_established
        .unwrap_or(ct.tcp_established_timeout);
    ct.tcp_close_wait_timeout = flags
        .conntrack_tcp_timeout_close_wait
        .unwrap_or(ct.tcp_close_wait_timeout);
    ct.tcp_be_liberal = flags.conntrack_tcp_be_liberal.unwrap_or(false);
    ct.udp_timeout = flags.conntrack_udp_timeout.unwrap_or(Duration::ZERO);
    ct.udp_stream_timeout = flags.conntrack_udp_timeout_stream.unwrap_or(Duration::ZERO);
    if let Some(d) = flags.config_sync_period {
        c.config_sync_period = flag("config-sync-period", validate::positive(d))?;
    }

    c.client.kubeconfig = flags
        .kubeconfig
        .clone()
        .filter(|p| !p.as_os_str().is_empty());
    if let Some(t) = &flags.kube_api_content_type {
        c.client.content_type = flag("kube-api-content-type", validate::content_type(t))?;
    }
    if let Some(q) = flags.kube_api_qps {
        c.client.qps = flag("kube-api-qps", validate::qps(q))?;
    }
    if let Some(b) = flags.kube_api_burst {
        c.client.burst = flag("kube-api-burst", validate::count(b))?;
    }

    if let Some(text) = &flags.proxy_port_range {
        flag("proxy-port-range", validate::port_range(text))?;
        c.port_range = text.trim().to_owned();
    }
    if let Some(text) = &flags.bind_address {
        c.bind_address = flag("bind-address", validate::ip(text))?;
    }
    // Upstream's flag defaults come from bindAddress 0.0.0.0, whatever --bind-address says.
    let healthz_port = deprecated_port(flags, "healthz-port", flags.healthz_port, warnings);
    let metrics_port = deprecated_port(flags, "metrics-port", flags.metrics_port, warnings);
    if let Some(text) = &flags.healthz_bind_address {
        c.healthz_bind_address = if text.trim().is_empty() {
            None
        } else {
            let port = port_for("healthz-port", text, healthz_port, HEALTHZ_PORT)?;
            Some(flag(
                "healthz-bind-address",
                validate::host_port(text, port),
            )?)
        };
    }
    if healthz_port == Some(0) {
        c.healthz_bind_address = None;
    }
    if let Some(text) = &flags.metrics_bind_address {
        let port = port_for("metrics-port", text, metrics_port, METRICS_PORT)?;
        c.metrics_bind_address = flag("metrics-bind-address", validate::host_port(text, port))?;
    }
    if metrics_port == Some(0) {
        return Err(Error::Flag {
            flag: "metrics-port",
            message: "0 would leave the metrics server without an address; give 1 to 65535".into(),
        });
    }
    c.bind_address_hard_fail = flags.bind_address_hard_fail.unwrap_or(false);
    c.enable_profiling = flags.profiling.unwrap_or(false);
    if let Some(v) = &flags.show_hidden_metrics_for_version {
        flag(
            "show-hidden-metrics-for-version",
            validate::metrics_version(v),
        )?;
        c.show_hidden_metrics_for_version = v.clone();
    }

    if let Some(entries) = &flags.feature_gates {
        let requested = flag("feature-gates", feature_gates::parse_pairs(entries))?;
        c.feature_gates =
            feature_gates::resolve(&requested).map_err(|(gate, message)| Error::Flag {
                flag: "feature-gates",
                message: validate::Invalid(format!("{gate}: {message}")),
            })?;
    }
    Ok(c)
}

/// One of upstream's deprecated `--healthz-port` / `--metrics-port`, with a warning; as upstream,
/// they count only without `--config` and `--write-config-to`.
fn deprecated_port(
    flags: &Flags,
    name: &'static str,
    value: Option<i64>,
    warnings: &mut Vec<Warning>,
) -> Option<i64> {
    let value = value?;
    warnings.push(Warning::Deprecated {
        flag: name,
        instead: if name == "healthz-port" {
            "--healthz-bind-address"
        } else {
            "--metrics-bind-address"
        },
    });
    flags.write_config_to.is_none().then_some(value)
}

/// The port a server address given without one gets: the deprecated port flag's, when given
/// (checked only then, as upstream uses it only then), else the default.
fn port_for(
    name: &'static str,
    address: &str,
    port: Option<i64>,
    default: u16,
) -> Result<u16, Error> {
    let bare_ip = address.trim().parse::<std::net::IpAddr>().is_ok();
    match port {
        Some(p) if bare_ip && p != 0 => {
            flag(name, validate::in_range(p, 1, 65535)).map(|p| p as u16)
        }
        _ => Ok(default),
    }
}
