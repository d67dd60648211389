//! The effective configuration written back as KubeProxyConfiguration v1alpha1 YAML, for
//! `--write-config-to`.
//!
//! Like upstream, every field is written (keys in alphabetical order), the mode-specific values
//! go into the chosen mode's section and the other sections carry their defaults. Reading the
//! output back gives the same `Config`, except where upstream's own defaulting cannot express a
//! value: a zero `minSyncPeriod` in iptables or nftables mode reads back as 1s, and a disabled
//! health server (`--healthz-bind-address=`) reads back as the default address. Pure: returns the
//! text; the caller writes the file.

use std::collections::BTreeMap;

use super::defaults::{self, API_VERSION, KIND};
use super::feature_gates::{self, Stage};
use super::file::{self, KubeProxyConfiguration};
use super::model::{Config, NodePortAddresses, ProxyMode};

/// Renders `config` as a KubeProxyConfiguration YAML document.
pub fn render(config: &Config) -> String {
    let doc = document(config);
    // Serializing plain strings, numbers, maps and JSON values cannot fail.
    serde_saphyr::to_string(&doc).unwrap_or_default()
}

/// The gates to write: those that differ from their defaults, as an operator would write them,
/// plus every gate of a stage that `AllAlpha` / `AllBeta` switches, so reading back cannot
/// change them.
fn requested_gates(c: &Config) -> BTreeMap<String, bool> {
    let all_alpha = c.gate(feature_gates::ALL_ALPHA);
    let all_beta = c.gate(feature_gates::ALL_BETA);
    c.feature_gates
        .iter()
        .filter(|(name, value)| {
            feature_gates::find(name).is_none_or(|g| {
                g.default != **value
                    || (all_alpha && g.stage == Stage::Alpha)
                    || (all_beta && g.stage == Stage::Beta)
            })
        })
        .map(|(name, value)| (name.clone(), *value))
        .collect()
}

/// The v1alpha1 document for `c`.
pub fn document(c: &Config) -> KubeProxyConfiguration {
    // Userspace mode keeps its sync periods in the iptables section, as upstream's did; so
    // does our eBPF mode.
    let mode_is = |m| {
        c.mode == m
            || (m == ProxyMode::Iptables
                && matches!(c.mode, ProxyMode::Userspace | ProxyMode::Ebpf))
    };
    let mode_or = |m, here, default| Some(if mode_is(m) { here } else { default });
    let not_nft = c.mode != ProxyMode::Nftables;
    KubeProxyConfiguration {
        api_version: Some(API_VERSION.to_owned()),
        bind_address: Some(c.bind_address.to_string()),
        bind_address_hard_fail: Some(c.bind_address_hard_fail),
        client_connection: file::ClientConnection {
            accept_content_types: Some(c.client.accept_content_types.clone()),
            burst: Some(c.client.burst.into()),
            content_type: Some(c.client.content_type.clone()),
            kubeconfig: Some(
                c.client
                    .kubeconfig
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            ),
            qps: Some(c.client.qps.into()),
        },
        cluster_cidr: Some(
            c.cluster_cidrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ),
        config_sync_period: Some(c.config_sync_period),
        conntrack: file::Conntrack {
            max_per_core: Some(c.conntrack.max_per_core.into()),
            min: Some(c.conntrack.min.into()),
            tcp_be_liberal: Some(c.conntrack.tcp_be_liberal),
            tcp_close_wait_timeout: Some(c.conntrack.tcp_close_wait_timeout),
            tcp_established_timeout: Some(c.conntrack.tcp_established_timeout),
            udp_stream_timeout: Some(c.conntrack.udp_stream_timeout),
            udp_timeout: Some(c.conntrack.udp_timeout),
        },
        detect_local: file::DetectLocal {
            bridge_interface: Some(c.detect_local.bridge_interface.clone()),
            interface_name_prefix: Some(c.detect_local.interface_name_prefix.clone()),
        },
        detect_local_mode: Some(c.detect_local_mode.as_str().to_owned()),
        enable_profiling: Some(c.enable_profiling),
        feature_gates: requested_gates(c),
        healthz_bind_address: Some(
            c.healthz_bind_address
                .map(|a| a.to_string())
                .unwrap_or_default(),
        ),
        hostname_override: Some(c.hostname_override.clone().unwrap_or_default()),
        iptables: file::Iptables {
            localhost_node_ports: Some(c.localhost_node_ports),
            masquerade_all: Some(not_nft && c.masquerade_all),
            masquerade_bit: Some(
                if not_nft {
                    c.masquerade_bit
                } else {
                    defaults::MASQUERADE_BIT
                }
                .into(),
            ),
            min_sync_period: mode_or(
                ProxyMode::Iptables,
                c.min_sync_period,
                defaults::MIN_SYNC_PERIOD,
            ),
            sync_period: mode_or(ProxyMode::Iptables, c.sync_period, defaults::SYNC_PERIOD),
        },
        ipvs: file::Ipvs {
            exclude_cidrs: Some(
                c.ipvs
                    .exclude_cidrs
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            ),
            min_sync_period: mode_or(
                ProxyMode::Ipvs,
                c.min_sync_period,
                defaults::IPVS_FILE_MIN_SYNC_PERIOD,
            ),
            scheduler: Some(c.ipvs.scheduler.clone()),
            strict_arp: Some(c.ipvs.strict_arp),
            sync_period: mode_or(ProxyMode::Ipvs, c.sync_period, defaults::SYNC_PERIOD),
            tcp_fin_timeout: Some(c.ipvs.tcp_fin_timeout),
            tcp_timeout: Some(c.ipvs.tcp_timeout),
            udp_timeout: Some(c.ipvs.udp_timeout),
        },
        kind: Some(KIND.to_owned()),
        logging: file::Logging {
            flush_frequency: Some(c.logging.flush_frequency),
            format: Some(c.logging.format.as_str().to_owned()),
            options: Some(c.logging.options.clone()).filter(|v| !v.is_null()),
            verbosity: Some(c.logging.verbosity.into()),
            vmodule: Some(c.logging.vmodule.clone()).filter(|v| !v.is_null()),
        },
        metrics_bind_address: Some(c.metrics_bind_address.to_string()),
        mode: Some(if c.mode_explicit { c.mode.as_str() } else { "" }.to_owned()),
        nftables: file::Nftables {
            masquerade_all: Some(!not_nft && c.masquerade_all),
            masquerade_bit: Some(
                if not_nft {
                    defaults::MASQUERADE_BIT
                } else {
                    c.masquerade_bit
                }
                .into(),
            ),
            min_sync_period: mode_or(
                ProxyMode::Nftables,
                c.min_sync_period,
                defaults::MIN_SYNC_PERIOD,
            ),
            sync_period: mode_or(ProxyMode::Nftables, c.sync_period, defaults::SYNC_PERIOD),
        },
        // The mode's default is written as null, so the file keeps following the mode.
        node_port_addresses: (c.node_port_addresses != NodePortAddresses::default_for(c.mode))
            .then(|| c.node_port_addresses.entries()),
        oom_score_adj: Some(c.oom_score_adj.into()),
        port_range: Some(c.port_range.clone()),
        show_hidden_metrics_for_version: Some(c.show_hidden_metrics_for_version.clone()),
        windows_run_as_service: Some(c.windows_run_as_service),
        winkernel: file::WinKernel {
            enable_dsr: Some(c.winkernel.enable_dsr),
            forward_health_check_vip: Some(c.winkernel.forward_health_check_vip),
            network_name: Some(c.winkernel.network_name.clone()),
            root_hns_endpoint_name: Some(c.winkernel.root_hns_endpoint_name.clone()),
            source_vip: Some(c.winkernel.source_vip.clone()),
        },
    }
}
