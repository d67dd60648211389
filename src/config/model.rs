//! The effective configuration: typed, validated, with every default applied and every
//! mode-specific setting resolved for the chosen mode.
//!
//! Everything after `config` reads these values and never re-parses strings. Fields mirror
//! KubeProxyConfiguration v1alpha1 where they have a counterpart (the doc line names it), so
//! `render` can write the effective configuration back out. Plain data: no I/O, no methods
//! that decide anything beyond small accessors.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

/// How nftables mode programs the kernel (`--nftables-encoder`; ours, not upstream's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NftablesEncoder {
    /// nf_tables netlink messages, and netlink dumps to read our table back.
    #[default]
    Netlink,
    /// `nft -f -` text and `nft -j list`, for debugging.
    Nft,
}

/// The dataplane kube-proxy programs (`mode`, `--proxy-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyMode {
    /// iptables-restore rules; upstream's default on Linux.
    #[default]
    Iptables,
    /// IPVS virtual servers (deprecated upstream).
    Ipvs,
    /// One private nftables table.
    Nftables,
    /// The proxy relays each connection itself (`dataplane::userspace`); upstream removed its
    /// own in 1.26.
    Userspace,
    /// cgroup socket programs balance Services at connect() time, tc programs translate
    /// traffic from outside the node (`dataplane::ebpf`; ours, not upstream's).
    Ebpf,
}

impl ProxyMode {
    /// The spelling used in flags and files.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Ipvs => "ipvs",
            ProxyMode::Nftables => "nftables",
            ProxyMode::Userspace => "userspace",
            ProxyMode::Ebpf => "ebpf",
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How kube-proxy tells traffic from local pods apart (`detectLocalMode`, `--detect-local-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DetectLocalMode {
    /// Source address inside `cluster_cidrs`; no detection when that list is empty.
    #[default]
    ClusterCidr,
    /// Source address inside the Node's `spec.podCIDRs`.
    NodeCidr,
    /// Arrives on `detect_local.bridge_interface`.
    BridgeInterface,
    /// Arrives on an interface whose name starts with `detect_local.interface_name_prefix`.
    InterfaceNamePrefix,
}

impl DetectLocalMode {
    /// The spelling used in flags and files.
    pub fn as_str(self) -> &'static str {
        match self {
            DetectLocalMode::ClusterCidr => "ClusterCIDR",
            DetectLocalMode::NodeCidr => "NodeCIDR",
            DetectLocalMode::BridgeInterface => "BridgeInterface",
            DetectLocalMode::InterfaceNamePrefix => "InterfaceNamePrefix",
        }
    }
}

/// Log output format (`logging.format`, `--logging-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// The spelling used in flags and files.
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Which node addresses accept NodePort traffic (`nodePortAddresses`, `--nodeport-addresses`).
///
/// Entries are CIDRs and the keywords `primary` (the Node object's primary IPs), `localhost`
/// (127.0.0.0/8 and ::1/128) and `all` (every local address). When the operator gives nothing
/// the default depends on the mode: `all` for iptables and ipvs, `primary` for nftables.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePortAddresses {
    /// CIDRs given, normalised to their network address, in the order given.
    pub cidrs: Vec<IpNet>,
    /// `primary` was given.
    pub primary: bool,
    /// `localhost` was given.
    pub localhost: bool,
    /// `all` was given.
    pub all: bool,
}

impl NodePortAddresses {
    /// What applies when the operator gives nothing.
    pub fn default_for(mode: ProxyMode) -> Self {
        match mode {
            ProxyMode::Nftables => NodePortAddresses {
                primary: true,
                ..Self::default()
            },
            ProxyMode::Iptables | ProxyMode::Ipvs | ProxyMode::Userspace | ProxyMode::Ebpf => {
                NodePortAddresses {
                    all: true,
                    ..Self::default()
                }
            }
        }
    }

    /// The entries as an operator writes them: keywords first, then CIDRs.
    pub fn entries(&self) -> Vec<String> {
        let keywords = [
            (self.primary, "primary"),
            (self.localhost, "localhost"),
            (self.all, "all"),
        ];
        keywords
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, k)| (*k).to_owned())
            .chain(self.cidrs.iter().map(ToString::to_string))
            .collect()
    }
}

impl ClientConnection {
    /// Whether lists are asked for as protobuf (`contentType`'s default).
    pub fn lists_as_protobuf(&self) -> bool {
        self.content_type == super::defaults::CONTENT_TYPE
    }
}

/// How to reach the API server (`clientConnection`, `--kubeconfig`, `--master`, `--kube-api-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientConnection {
    /// Path of a kubeconfig file; `None`: in-cluster configuration.
    pub kubeconfig: Option<PathBuf>,
    /// API server URL overriding the kubeconfig's (`--master`; flag only).
    pub master: Option<String>,
    /// Accept header (`acceptContentTypes`); empty: the client's default.
    pub accept_content_types: String,
    /// Request content type (`contentType`): `application/vnd.kubernetes.protobuf` (the
    /// default: lists of Services and EndpointSlices are read as protobuf) or
    /// `application/json`.
    pub content_type: String,
    /// Sustained requests per second (`qps`).
    pub qps: f32,
    /// Requests allowed in a burst (`burst`).
    pub burst: u32,
}

/// IPVS-only settings (`ipvs.*` apart from the sync periods, which are resolved into
/// [`Config::sync_period`] / [`Config::min_sync_period`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ipvs {
    /// Scheduler name (`scheduler`); empty means round robin.
    pub scheduler: String,
    /// Virtual servers in these ranges are never cleaned up (`excludeCIDRs`).
    pub exclude_cidrs: Vec<IpNet>,
    /// Set `arp_ignore`/`arp_announce` strictly (`strictARP`).
    pub strict_arp: bool,
    /// Idle TCP timeout; zero leaves the kernel's (`tcpTimeout`).
    pub tcp_timeout: Duration,
    /// TCP timeout after FIN; zero leaves the kernel's (`tcpFinTimeout`).
    pub tcp_fin_timeout: Duration,
    /// UDP timeout; zero leaves the kernel's (`udpTimeout`).
    pub udp_timeout: Duration,
}

/// Windows HNS settings (`winkernel.*`); accepted for compatibility, never used on Linux.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WinKernel {
    /// `networkName`.
    pub network_name: String,
    /// `sourceVip`.
    pub source_vip: String,
    /// `enableDSR`.
    pub enable_dsr: bool,
    /// `rootHnsEndpointName`.
    pub root_hns_endpoint_name: String,
    /// `forwardHealthCheckVip`.
    pub forward_health_check_vip: bool,
}

/// Interfaces for the interface-based local-traffic modes (`detectLocal.*`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DetectLocal {
    /// `bridgeInterface` (`--pod-bridge-interface`).
    pub bridge_interface: String,
    /// `interfaceNamePrefix` (`--pod-interface-name-prefix`).
    pub interface_name_prefix: String,
}

/// Conntrack sysctls kube-proxy sets at start (`conntrack.*`, `--conntrack-*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conntrack {
    /// Entries per CPU; 0 leaves `nf_conntrack_max` alone (`maxPerCore`).
    pub max_per_core: u32,
    /// Lower bound for `nf_conntrack_max` (`min`).
    pub min: u32,
    /// Established TCP idle timeout; zero leaves the kernel's (`tcpEstablishedTimeout`).
    pub tcp_established_timeout: Duration,
    /// CLOSE_WAIT timeout; zero leaves the kernel's (`tcpCloseWaitTimeout`).
    pub tcp_close_wait_timeout: Duration,
    /// Set `nf_conntrack_tcp_be_liberal` (`tcpBeLiberal`).
    pub tcp_be_liberal: bool,
    /// Unreplied UDP timeout; zero leaves the kernel's (`udpTimeout`).
    pub udp_timeout: Duration,
    /// Assured UDP timeout; zero leaves the kernel's (`udpStreamTimeout`).
    pub udp_stream_timeout: Duration,
}

/// Logging settings (`logging`, `-v`, `--logging-format`).
#[derive(Debug, Clone, PartialEq)]
pub struct Logging {
    /// Output format (`format`).
    pub format: LogFormat,
    /// klog-style verbosity (`verbosity`, `-v`).
    pub verbosity: u32,
    /// How often buffered logs are flushed (`flushFrequency`).
    pub flush_frequency: Duration,
    /// Per-file verbosity (`vmodule`), kept as written.
    pub vmodule: serde_json::Value,
    /// Format options (`options`), kept as written.
    pub options: serde_json::Value,
}

/// The effective configuration of one kube-proxy-rs run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The configuration file that was read (`--config`), if any.
    pub config_file: Option<PathBuf>,
    /// Write the effective configuration here and exit (`--write-config-to`).
    pub write_config_to: Option<PathBuf>,
    /// Remove everything any mode programmed, then exit (`--cleanup`).
    pub cleanup: bool,
    /// Do the root-only start-up work (sysctls), then exit (`--init-only`).
    pub init_only: bool,
    /// Read Services, EndpointSlices and Nodes from this directory instead of the API server
    /// (`--manifests`; ours, not upstream's).
    pub manifests: Option<PathBuf>,
    /// How nftables mode programs the kernel (`--nftables-encoder`; ours, not upstream's).
    pub nftables_encoder: NftablesEncoder,
    /// eBPF mode: the cgroup v2 directory its programs attach to (`--bpf-cgroup`; ours);
    /// `None`: the cgroup v2 root, found at start-up.
    pub bpf_cgroup: Option<PathBuf>,
    /// eBPF mode: where its maps and links are pinned (`--bpf-pin-root`; ours); `None`:
    /// `/sys/fs/bpf/kube-proxy-rs`. `--cleanup` removes this directory.
    pub bpf_pin_root: Option<PathBuf>,
    /// API server connection.
    pub client: ClientConnection,
    /// Node name to use instead of the hostname, trimmed and lower-cased (`hostnameOverride`).
    pub hostname_override: Option<String>,
    /// Overrides the node's primary IP; unspecified (`0.0.0.0`) means take it from the Node
    /// (`bindAddress`; nothing binds to it).
    pub bind_address: IpAddr,
    /// Health server address; `None` disables it (`healthzBindAddress`).
    pub healthz_bind_address: Option<SocketAddr>,
    /// Metrics server address (`metricsBindAddress`).
    pub metrics_bind_address: SocketAddr,
    /// Exit when a server cannot bind (`bindAddressHardFail`).
    pub bind_address_hard_fail: bool,
    /// Serve `/debug/pprof` (`enableProfiling`).
    pub enable_profiling: bool,
    /// Re-enable metrics hidden since this version (`showHiddenMetricsForVersion`).
    pub show_hidden_metrics_for_version: String,
    /// The dataplane.
    pub mode: ProxyMode,
    /// Whether the operator chose the mode (false: defaulted; upstream 1.37 warns then).
    pub mode_explicit: bool,
    /// Longest time between syncs and retry delay, for `mode` (`<mode>.syncPeriod`).
    pub sync_period: Duration,
    /// Shortest time between syncs, for `mode` (`<mode>.minSyncPeriod`).
    pub min_sync_period: Duration,
    /// The fwmark bit that marks packets for SNAT, for `mode` (`<mode>.masqueradeBit`;
    /// ipvs uses iptables').
    pub masquerade_bit: u8,
    /// SNAT all traffic to ClusterIPs, for `mode` (`<mode>.masqueradeAll`).
    pub masquerade_all: bool,
    /// Allow NodePorts on 127.0.0.1 in iptables mode (`iptables.localhostNodePorts`).
    pub localhost_node_ports: bool,
    /// IPVS-only settings.
    pub ipvs: Ipvs,
    /// Windows settings.
    pub winkernel: WinKernel,
    /// How local traffic is detected.
    pub detect_local_mode: DetectLocalMode,
    /// Interfaces for the interface-based detect-local modes.
    pub detect_local: DetectLocal,
    /// Pod CIDRs, at most one per family, normalised (`clusterCIDR`).
    pub cluster_cidrs: Vec<IpNet>,
    /// NodePort addresses, defaulted for `mode`.
    pub node_port_addresses: NodePortAddresses,
    /// OOM score adjustment for this process (`oomScoreAdj`).
    pub oom_score_adj: i32,
    /// Conntrack sysctls.
    pub conntrack: Conntrack,
    /// Informer resync period (`configSyncPeriod`).
    pub config_sync_period: Duration,
    /// The ports userspace mode's listeners take (`portRange`); empty: the kernel chooses.
    pub port_range: String,
    /// Userspace mode's relay limits (flags only; ours, beside upstream's configuration).
    pub userspace: Userspace,
    /// Run as a Windows service (`windowsRunAsService`).
    pub windows_run_as_service: bool,
    /// Effective value of every known feature gate.
    pub feature_gates: BTreeMap<String, bool>,
    /// Logging.
    pub logging: Logging,
}

impl Config {
    /// Whether a feature gate is on; unknown names are off.
    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.get(name).copied().unwrap_or(false)
    }

    /// klog-style verbosity (`-v`).
    pub fn verbosity(&self) -> u32 {
        self.logging.verbosity
    }
}

/// Userspace mode's relay: the UDP idle timeout (`--udp-timeout`, upstream's flag for the mode
/// it removed) and the connection limits (`--userspace-max-connections`,
/// `--userspace-max-connections-per-service`, ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Userspace {
    /// `--nodeport-localhost` (ours): NodePorts on 127.0.0.1 and ::1 through the relay, in
    /// nftables and userspace modes.
    pub node_port_localhost: bool,
    pub udp_idle_timeout: std::time::Duration,
    pub max_connections: u32,
    pub max_connections_per_service: u32,
}

impl Default for Userspace {
    /// Per Service, the 10,000 connections the memory goal is set for; overall, ten times
    /// that; UDP flows idle out after 250 ms, upstream's `--udp-timeout` default.
    fn default() -> Userspace {
        Userspace {
            node_port_localhost: false,
            udp_idle_timeout: std::time::Duration::from_millis(250),
            max_connections: 100_000,
            max_connections_per_service: 10_000,
        }
    }
}
