//! The effective configuration from a KubeProxyConfiguration file: upstream's v1alpha1
//! defaulting, then validation, then the mode-specific settings resolved for the chosen mode.
//!
//! Defaulting follows upstream: most fields default when absent or zero (`syncPeriod: 0s`
//! becomes 30s, `minSyncPeriod: 0s` becomes 1s in iptables and nftables), while the fields
//! upstream keeps as pointers (`masqueradeBit`, `oomScoreAdj`, `localhostNodePorts`, the
//! conntrack limits and TCP timeouts) default only when absent. The mode's own section supplies
//! the sync periods, masquerade bit and masquerade-all (ipvs uses iptables' bit). Errors name
//! the field path. Pure: no I/O.

use std::time::Duration;

use super::decode::FieldError;
use super::defaults::{self, HEALTHZ_PORT, METRICS_PORT};
use super::file::{self, KubeProxyConfiguration};
use super::model::{Config, DetectLocalMode, LogFormat, NodePortAddresses, ProxyMode};
use super::{feature_gates, validate};

/// Attaches the field path to a validation message.
fn field<T>(path: &str, result: validate::Result<T>) -> Result<T, FieldError> {
    result.map_err(|invalid| FieldError::new(path, invalid.0))
}

/// A duration upstream defaults when absent or zero.
fn or_default(value: Option<Duration>, default: Duration) -> Duration {
    value.filter(|d| !d.is_zero()).unwrap_or(default)
}

/// A string upstream treats as unset when empty.
fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

/// Parses, defaults and validates the file's text; with the strict decoding's error when the
/// file was read leniently (see [`file::parse`]). `mode`, when given, stands in for the file's
/// own `mode` (`--proxy-mode-override`), before the mode picks its section's settings.
pub fn config(text: &str, mode: Option<&str>) -> Result<(Config, Option<FieldError>), FieldError> {
    let mut decoded = file::parse(text)?;
    if let Some(mode) = mode {
        decoded.document.mode = Some(mode.to_owned());
    }
    Ok((from_document(decoded.document)?, decoded.strict_error))
}

/// Defaults and validates a parsed document.
pub fn from_document(f: KubeProxyConfiguration) -> Result<Config, FieldError> {
    let mut c = Config::default();

    if let Some(mode) = field(
        "mode",
        validate::proxy_mode(f.mode.as_deref().unwrap_or("")),
    )? {
        c.mode = mode;
        c.mode_explicit = true;
    }

    // The iptables bit is validated in every mode, as upstream does; nftables' only when used.
    let iptables_bit = field(
        "iptables.masqueradeBit",
        validate::masquerade_bit(
            f.iptables
                .masquerade_bit
                .unwrap_or(defaults::MASQUERADE_BIT.into()),
        ),
    )?;
    let (section, sync, min, min_default) = match c.mode {
        // Upstream's userspace mode took its sync periods from the iptables section; our eBPF
        // mode, which has no section of its own, does the same.
        ProxyMode::Iptables | ProxyMode::Userspace | ProxyMode::Ebpf => (
            "iptables",
            f.iptables.sync_period,
            f.iptables.min_sync_period,
            defaults::MIN_SYNC_PERIOD,
        ),
        ProxyMode::Nftables => (
            "nftables",
            f.nftables.sync_period,
            f.nftables.min_sync_period,
            defaults::MIN_SYNC_PERIOD,
        ),
        ProxyMode::Ipvs => (
            "ipvs",
            f.ipvs.sync_period,
            f.ipvs.min_sync_period,
            defaults::IPVS_FILE_MIN_SYNC_PERIOD,
        ),
    };
    c.sync_period = or_default(sync, defaults::SYNC_PERIOD);
    c.min_sync_period = if c.mode == ProxyMode::Ipvs {
        min.unwrap_or(min_default)
    } else {
        or_default(min, min_default)
    };
    field(
        &format!("{section}.syncPeriod"),
        validate::sync_covers_min(
            c.sync_period,
            c.min_sync_period,
            &format!("{section}.minSyncPeriod"),
        ),
    )?;
    if c.mode == ProxyMode::Nftables {
        c.masquerade_bit = field(
            "nftables.masqueradeBit",
            validate::masquerade_bit(
                f.nftables
                    .masquerade_bit
                    .unwrap_or(defaults::MASQUERADE_BIT.into()),
            ),
        )?;
        c.masquerade_all = f.nftables.masquerade_all.unwrap_or(false);
    } else {
        c.masquerade_bit = iptables_bit;
        c.masquerade_all = f.iptables.masquerade_all.unwrap_or(false);
    }
    c.localhost_node_ports = f.iptables.localhost_node_ports.unwrap_or(true);

    c.ipvs.scheduler = f.ipvs.scheduler.unwrap_or_default();
    c.ipvs.exclude_cidrs = field(
        "ipvs.excludeCIDRs",
        validate::cidrs(&f.ipvs.exclude_cidrs.unwrap_or_default()),
    )?;
    c.ipvs.strict_arp = f.ipvs.strict_arp.unwrap_or(false);
    c.ipvs.tcp_timeout = f.ipvs.tcp_timeout.unwrap_or_default();
    c.ipvs.tcp_fin_timeout = f.ipvs.tcp_fin_timeout.unwrap_or_default();
    c.ipvs.udp_timeout = f.ipvs.udp_timeout.unwrap_or_default();

    let w = f.winkernel;
    c.winkernel.network_name = w.network_name.unwrap_or_default();
    c.winkernel.source_vip = w.source_vip.unwrap_or_default();
    c.winkernel.enable_dsr = w.enable_dsr.unwrap_or(false);
    c.winkernel.root_hns_endpoint_name = w.root_hns_endpoint_name.unwrap_or_default();
    c.winkernel.forward_health_check_vip = w.forward_health_check_vip.unwrap_or(false);
    c.windows_run_as_service = f.windows_run_as_service.unwrap_or(false);

    if let Some(mode) = field(
        "detectLocalMode",
        validate::detect_local_mode(f.detect_local_mode.as_deref().unwrap_or("")),
    )? {
        c.detect_local_mode = mode;
    }
    c.detect_local.bridge_interface = f.detect_local.bridge_interface.unwrap_or_default();
    c.detect_local.interface_name_prefix = f.detect_local.interface_name_prefix.unwrap_or_default();
    match c.detect_local_mode {
        DetectLocalMode::BridgeInterface => field(
            "detectLocal.bridgeInterface",
            validate::interface(&c.detect_local.bridge_interface, c.detect_local_mode),
        )?,
        DetectLocalMode::InterfaceNamePrefix => field(
            "detectLocal.interfaceNamePrefix",
            validate::interface(&c.detect_local.interface_name_prefix, c.detect_local_mode),
        )?,
        DetectLocalMode::ClusterCidr | DetectLocalMode::NodeCidr => {}
    }
    c.cluster_cidrs = field(
        "clusterCIDR",
        validate::cluster_cidrs(f.cluster_cidr.as_deref().unwrap_or("")),
    )?;
    c.node_port_addresses = field(
        "nodePortAddresses",
        validate::node_port_addresses(&f.node_port_addresses.unwrap_or_default()),
    )?
    .unwrap_or_else(|| NodePortAddresses::default_for(c.mode));

    if let Some(v) = f.oom_score_adj {
        c.oom_score_adj = field("oomScoreAdj", validate::oom_score_adj(v))?;
    }
    let ct = f.conntrack;
    if let Some(v) = ct.max_per_core {
        c.conntrack.max_per_core = field("conntrack.maxPerCore", validate::count(v))?;
    }
    if let Some(v) = ct.min {
        c.conntrack.min = field("conntrack.min", validate::count(v))?;
    }
    c.conntrack.tcp_established_timeout = ct
        .tcp_established_timeout
        .unwrap_or(defaults::CONNTRACK_TCP_ESTABLISHED);
    c.conntrack.tcp_close_wait_timeout = ct
        .tcp_close_wait_timeout
        .unwrap_or(defaults::CONNTRACK_TCP_CLOSE_WAIT);
    c.conntrack.tcp_be_liberal = ct.tcp_be_liberal.unwrap_or(false);
    c.conntrack.udp_timeout = ct.udp_timeout.unwrap_or_default();
    c.conntrack.udp_stream_timeout = ct.udp_stream_timeout.unwrap_or_default();
    c.config_sync_period = or_default(f.config_sync_period, defaults::CONFIG_SYNC_PERIOD);
    c.port_range = f.port_range.unwrap_or_default();
    field("portRange", validate::port_range(&c.port_range))?;

    let cc = f.client_connection;
    c.client.kubeconfig = non_empty(cc.kubeconfig).map(Into::into);
    c.client.accept_content_types = cc.accept_content_types.unwrap_or_default();
    c.client.content_type = field(
        "clientConnection.contentType",
        validate::content_type(cc.content_type.as_deref().unwrap_or("")),
    )?;
    if let Some(q) = cc.qps.filter(|q| *q != 0.0) {
        c.client.qps = field("clientConnection.qps", validate::qps(q))?;
    }
    if let Some(b) = cc.burst.filter(|b| *b != 0) {
        c.client.burst = field("clientConnection.burst", validate::count(b))?;
    }

    if let Some(text) = non_empty(f.bind_address) {
        c.bind_address = field("bindAddress", validate::ip(&text))?;
    }
    c.healthz_bind_address = Some(match non_empty(f.healthz_bind_address) {
        Some(text) => field(
            "healthzBindAddress",
            validate::host_port(&text, HEALTHZ_PORT),
        )?,
        None => defaults::healthz_bind_address(c.bind_address),
    });
    c.metrics_bind_address = match non_empty(f.metrics_bind_address) {
        Some(text) => field(
            "metricsBindAddress",
            validate::host_port(&text, METRICS_PORT),
        )?,
        None => defaults::metrics_bind_address(c.bind_address),
    };
    c.bind_address_hard_fail = f.bind_address_hard_fail.unwrap_or(false);
    c.enable_profiling = f.enable_profiling.unwrap_or(false);
    c.show_hidden_metrics_for_version = f.show_hidden_metrics_for_version.unwrap_or_default();
    field(
        "showHiddenMetricsForVersion",
        validate::metrics_version(&c.show_hidden_metrics_for_version),
    )?;
    c.hostname_override = f.hostname_override.as_deref().and_then(validate::hostname);

    c.feature_gates = feature_gates::resolve(&f.feature_gates)
        .map_err(|(gate, message)| FieldError::new(format!("featureGates.{gate}"), message))?;

    let log = f.logging;
    c.logging.format = match log.format.as_deref() {
        Some(text) => field("logging.format", validate::log_format(text))?,
        None => LogFormat::Text,
    };
    if let Some(v) = log.verbosity {
        c.logging.verbosity = field(
            "logging.verbosity",
            validate::in_range(v, 0, i32::MAX.into()),
        )? as u32;
    }
    c.logging.flush_frequency = or_default(log.flush_frequency, defaults::LOG_FLUSH_FREQUENCY);
    c.logging.vmodule = log.vmodule.unwrap_or_default();
    c.logging.options = log.options.unwrap_or_default();
    Ok(c)
}
