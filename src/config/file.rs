//! The KubeProxyConfiguration `kubeproxy.config.k8s.io/v1alpha1` document as written on disk:
//! every field of upstream's schema, nothing defaulted or validated yet.
//!
//! Field names are the interface we match. `None` means the field was absent or null, which
//! matters because upstream defaults some fields only when they are unset and others when they
//! are zero. The same types serialize for `--write-config-to`, with keys in upstream's
//! (alphabetical) order. Pure: [`parse`] takes the file's text, not its path.
//!
//! Decoding follows upstream's: strictly first, where an unknown or duplicate field is an
//! error; when only that fails, the document is read again leniently (unknown fields ignored,
//! the last of duplicate keys kept) and the strict error is returned beside it for the caller to
//! log, so a file written for a newer release does not stop the proxy. Any other error (syntax,
//! a wrong type) fails either way.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::decode::{FieldError, Object, kind};
use super::defaults::{API_VERSION, KIND};
use super::duration;

fn go_duration<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&duration::format(*d)),
        None => s.serialize_none(),
    }
}

/// The whole document.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyConfiguration {
    pub api_version: Option<String>,
    pub bind_address: Option<String>,
    pub bind_address_hard_fail: Option<bool>,
    pub client_connection: ClientConnection,
    #[serde(rename = "clusterCIDR")]
    pub cluster_cidr: Option<String>,
    #[serde(serialize_with = "go_duration")]
    pub config_sync_period: Option<Duration>,
    pub conntrack: Conntrack,
    pub detect_local: DetectLocal,
    pub detect_local_mode: Option<String>,
    pub enable_profiling: Option<bool>,
    pub feature_gates: BTreeMap<String, bool>,
    pub healthz_bind_address: Option<String>,
    pub hostname_override: Option<String>,
    pub iptables: Iptables,
    pub ipvs: Ipvs,
    pub kind: Option<String>,
    pub logging: Logging,
    pub metrics_bind_address: Option<String>,
    pub mode: Option<String>,
    pub nftables: Nftables,
    pub node_port_addresses: Option<Vec<String>>,
    pub oom_score_adj: Option<i64>,
    pub port_range: Option<String>,
    pub show_hidden_metrics_for_version: Option<String>,
    pub windows_run_as_service: Option<bool>,
    pub winkernel: WinKernel,
}

/// `clientConnection`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientConnection {
    pub accept_content_types: Option<String>,
    pub burst: Option<i64>,
    pub content_type: Option<String>,
    pub kubeconfig: Option<String>,
    pub qps: Option<f64>,
}

/// `conntrack`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conntrack {
    pub max_per_core: Option<i64>,
    pub min: Option<i64>,
    pub tcp_be_liberal: Option<bool>,
    #[serde(serialize_with = "go_duration")]
    pub tcp_close_wait_timeout: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub tcp_established_timeout: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub udp_stream_timeout: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub udp_timeout: Option<Duration>,
}

/// `detectLocal`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetectLocal {
    pub bridge_interface: Option<String>,
    pub interface_name_prefix: Option<String>,
}

/// `iptables`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Iptables {
    pub localhost_node_ports: Option<bool>,
    pub masquerade_all: Option<bool>,
    pub masquerade_bit: Option<i64>,
    #[serde(serialize_with = "go_duration")]
    pub min_sync_period: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub sync_period: Option<Duration>,
}

/// `ipvs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipvs {
    #[serde(rename = "excludeCIDRs")]
    pub exclude_cidrs: Option<Vec<String>>,
    #[serde(serialize_with = "go_duration")]
    pub min_sync_period: Option<Duration>,
    pub scheduler: Option<String>,
    #[serde(rename = "strictARP")]
    pub strict_arp: Option<bool>,
    #[serde(serialize_with = "go_duration")]
    pub sync_period: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub tcp_fin_timeout: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub tcp_timeout: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub udp_timeout: Option<Duration>,
}

/// `logging` (component-base LoggingConfiguration); `vmodule` and `options` are kept as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Logging {
    #[serde(serialize_with = "go_duration")]
    pub flush_frequency: Option<Duration>,
    pub format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Value>,
    pub verbosity: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmodule: Option<Value>,
}

/// `nftables`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nftables {
    pub masquerade_all: Option<bool>,
    pub masquerade_bit: Option<i64>,
    #[serde(serialize_with = "go_duration")]
    pub min_sync_period: Option<Duration>,
    #[serde(serialize_with = "go_duration")]
    pub sync_period: Option<Duration>,
}

/// `winkernel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WinKernel {
    #[serde(rename = "enableDSR")]
    pub enable_dsr: Option<bool>,
    pub forward_health_check_vip: Option<bool>,
    pub network_name: Option<String>,
    pub root_hns_endpoint_name: Option<String>,
    pub source_vip: Option<String>,
}

/// A decoded document, and why strict decoding refused it when it was read leniently.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The document.
    pub document: KubeProxyConfiguration,
    /// The strict decoding's error, when the document was read leniently.
    pub strict_error: Option<FieldError>,
}

/// Parses the file's text (YAML 1.2 or JSON) as upstream does: strictly, then leniently when
/// only strict decoding fails. Wrong types and a wrong `apiVersion`/`kind` are errors naming
/// the field.
pub fn parse(text: &str) -> Result<Decoded, FieldError> {
    match read(text, false) {
        Ok(document) => Ok(Decoded {
            document,
            strict_error: None,
        }),
        Err(strict) if strict.strict => read(text, true).map(|document| Decoded {
            document,
            strict_error: Some(strict),
        }),
        Err(other) => Err(other),
    }
}

/// The document as YAML values; strict refuses duplicate keys, lenient keeps the last one.
fn value(text: &str, lenient: bool) -> Result<Value, FieldError> {
    let with = |duplicate_keys| {
        let mut options = serde_saphyr::Options::default();
        options.duplicate_keys = duplicate_keys;
        serde_saphyr::from_str_with_options::<Value>(text, options)
    };
    let last_wins = serde_saphyr::DuplicateKeyPolicy::LastWins;
    let first = with(if lenient {
        last_wins
    } else {
        serde_saphyr::DuplicateKeyPolicy::Error
    });
    first.map_err(|e| {
        // Keep the parser's message and position on one line; drop its hint about options.
        let message = e.without_snippet().to_string();
        let message = message.replace(", set DuplicateKeyPolicy in Options if acceptable", "");
        let message = message.lines().collect::<Vec<_>>().join(" ");
        // Only a duplicate key makes the strict reading fail where the lenient one does not.
        if !lenient && with(last_wins).is_ok() {
            FieldError::strict("", message)
        } else {
            FieldError::new("", message)
        }
    })
}

/// Reads the document strictly (unknown keys are errors) or leniently (they are skipped).
fn read(text: &str, lenient: bool) -> Result<KubeProxyConfiguration, FieldError> {
    let mut root = Object::document(value(text, lenient)?, lenient)?;
    check_type(&mut root, "apiVersion", API_VERSION)?;
    check_type(&mut root, "kind", KIND)?;
    let cfg = KubeProxyConfiguration {
        api_version: Some(API_VERSION.to_owned()),
        kind: Some(KIND.to_owned()),
        bind_address: root.get("bindAddress")?,
        bind_address_hard_fail: root.get("bindAddressHardFail")?,
        client_connection: client_connection(root.object("clientConnection")?)?,
        cluster_cidr: root.get("clusterCIDR")?,
        config_sync_period: root.duration("configSyncPeriod")?,
        conntrack: conntrack(root.object("conntrack")?)?,
        detect_local: detect_local(root.object("detectLocal")?)?,
        detect_local_mode: root.get("detectLocalMode")?,
        enable_profiling: root.get("enableProfiling")?,
        feature_gates: feature_gates(root.object("featureGates")?)?,
        healthz_bind_address: root.get("healthzBindAddress")?,
        hostname_override: root.get("hostnameOverride")?,
        iptables: iptables(root.object("iptables")?)?,
        ipvs: ipvs(root.object("ipvs")?)?,
        logging: logging(root.object("logging")?)?,
        metrics_bind_address: root.get("metricsBindAddress")?,
        mode: root.get("mode")?,
        nftables: nftables(root.object("nftables")?)?,
        node_port_addresses: root.get("nodePortAddresses")?,
        oom_score_adj: root.get("oomScoreAdj")?,
        port_range: root.get("portRange")?,
        show_hidden_metrics_for_version: root.get("showHiddenMetricsForVersion")?,
        windows_run_as_service: root.get("windowsRunAsService")?,
        winkernel: winkernel(root.object("winkernel")?)?,
    };
    root.finish()?;
    Ok(cfg)
}

/// `apiVersion` and `kind` must be present and exactly upstream's.
fn check_type(root: &mut Object, key: &'static str, want: &str) -> Result<(), FieldError> {
    match root.get::<String>(key)? {
        Some(got) if got == want => Ok(()),
        Some(got) => Err(FieldError::new(key, format!("must be {want}, got {got:?}"))),
        None => Err(FieldError::new(key, format!("missing; must be {want}"))),
    }
}

fn client_connection(mut o: Object) -> Result<ClientConnection, FieldError> {
    let out = ClientConnection {
        accept_content_types: o.get("acceptContentTypes")?,
        burst: o.get("burst")?,
        content_type: o.get("contentType")?,
        kubeconfig: o.get("kubeconfig")?,
        qps: o.get("qps")?,
    };
    o.finish().map(|()| out)
}

fn conntrack(mut o: Object) -> Result<Conntrack, FieldError> {
    let out = Conntrack {
        max_per_core: o.get("maxPerCore")?,
        min: o.get("min")?,
        tcp_be_liberal: o.get("tcpBeLiberal")?,
        tcp_close_wait_timeout: o.duration("tcpCloseWaitTimeout")?,
        tcp_established_timeout: o.duration("tcpEstablishedTimeout")?,
        udp_stream_timeout: o.duration("udpStreamTimeout")?,
        udp_timeout: o.duration("udpTimeout")?,
    };
    o.finish().map(|()| out)
}

fn detect_local(mut o: Object) -> Result<DetectLocal, FieldError> {
    let out = DetectLocal {
        bridge_interface: o.get("bridgeInterface")?,
        interface_name_prefix: o.get("interfaceNamePrefix")?,
    };
    o.finish().map(|()| out)
}

/// Gate values must be booleans; names are checked against the known gates later.
fn feature_gates(o: Object) -> Result<BTreeMap<String, bool>, FieldError> {
    let mut out = BTreeMap::new();
    for (name, value) in o.into_entries() {
        match value {
            Value::Bool(b) => {
                out.insert(name, b);
            }
            other => {
                return Err(FieldError::new(
                    format!("featureGates.{name}"),
                    format!("invalid type: {}, expected true or false", kind(&other)),
                ));
            }
        }
    }
    Ok(out)
}

fn iptables(mut o: Object) -> Result<Iptables, FieldError> {
    let out = Iptables {
        localhost_node_ports: o.get("localhostNodePorts")?,
        masquerade_all: o.get("masqueradeAll")?,
        masquerade_bit: o.get("masqueradeBit")?,
        min_sync_period: o.duration("minSyncPeriod")?,
        sync_period: o.duration("syncPeriod")?,
    };
    o.finish().map(|()| out)
}

fn ipvs(mut o: Object) -> Result<Ipvs, FieldError> {
    let out = Ipvs {
        exclude_cidrs: o.get("excludeCIDRs")?,
        min_sync_period: o.duration("minSyncPeriod")?,
        scheduler: o.get("scheduler")?,
        strict_arp: o.get("strictARP")?,
        sync_period: o.duration("syncPeriod")?,
        tcp_fin_timeout: o.duration("tcpFinTimeout")?,
        tcp_timeout: o.duration("tcpTimeout")?,
        udp_timeout: o.duration("udpTimeout")?,
    };
    o.finish().map(|()| out)
}

/// `flushFrequency` may be a duration string or a number of nanoseconds, as component-base
/// accepts; `vmodule` and `options` are taken as written.
fn logging(mut o: Object) -> Result<Logging, FieldError> {
    let flush_frequency = match o.raw("flushFrequency") {
        None => None,
        Some(Value::String(text)) => Some(
            duration::parse(&text)
                .map_err(|e| FieldError::new(o.path("flushFrequency"), e.to_string()))?,
        ),
        Some(Value::Number(n)) => Some(n.as_u64().map(Duration::from_nanos).ok_or_else(|| {
            FieldError::new(
                o.path("flushFrequency"),
                format!("must be a duration or a number of nanoseconds 0 or more, got {n}"),
            )
        })?),
        Some(other) => {
            return Err(FieldError::new(
                o.path("flushFrequency"),
                format!(
                    "invalid type: {}, expected a duration such as 5s",
                    kind(&other)
                ),
            ));
        }
    };
    let out = Logging {
        flush_frequency,
        format: o.get("format")?,
        options: o.raw("options"),
        verbosity: o.get("verbosity")?,
        vmodule: o.raw("vmodule"),
    };
    o.finish().map(|()| out)
}

fn nftables(mut o: Object) -> Result<Nftables, FieldError> {
    let out = Nftables {
        masquerade_all: o.get("masqueradeAll")?,
        masquerade_bit: o.get("masqueradeBit")?,
        min_sync_period: o.duration("minSyncPeriod")?,
        sync_period: o.duration("syncPeriod")?,
    };
    o.finish().map(|()| out)
}

fn winkernel(mut o: Object) -> Result<WinKernel, FieldError> {
    let out = WinKernel {
        enable_dsr: o.get("enableDSR")?,
        forward_health_check_vip: o.get("forwardHealthCheckVip")?,
        network_name: o.get("networkName")?,
        root_hns_endpoint_name: o.get("rootHnsEndpointName")?,
        source_vip: o.get("sourceVip")?,
    };
    o.finish().map(|()| out)
}
