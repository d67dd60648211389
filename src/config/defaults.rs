//! Upstream kube-proxy's default values, defined once.
//!
//! These are interfaces we match (v1alpha1 defaulting and the flag defaults): an operator moving
//! from upstream keeps the same behaviour for every setting left out. Pure constants and
//! constructors.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use super::model::{
    ClientConnection, Config, Conntrack, DetectLocal, DetectLocalMode, Ipvs, LogFormat, Logging,
    NftablesEncoder, NodePortAddresses, ProxyMode, WinKernel,
};

/// `apiVersion` of the only configuration file version upstream ships.
pub const API_VERSION: &str = "kubeproxy.config.k8s.io/v1alpha1";
/// `kind` of the configuration file.
pub const KIND: &str = "KubeProxyConfiguration";

/// Port of the health server (`healthzBindAddress`).
pub const HEALTHZ_PORT: u16 = 10256;
/// Port of the metrics server (`metricsBindAddress`).
pub const METRICS_PORT: u16 = 10249;

/// Default `syncPeriod` of every mode.
pub const SYNC_PERIOD: Duration = Duration::from_secs(30);
/// Default `minSyncPeriod` of iptables and nftables, and of the `--*-min-sync-period` flags.
pub const MIN_SYNC_PERIOD: Duration = Duration::from_secs(1);
/// Default `ipvs.minSyncPeriod` in a file: upstream does not default it, so it stays zero.
pub const IPVS_FILE_MIN_SYNC_PERIOD: Duration = Duration::ZERO;
/// Default `configSyncPeriod`.
pub const CONFIG_SYNC_PERIOD: Duration = Duration::from_secs(15 * 60);
/// Default `masqueradeBit` (mark 0x4000).
pub const MASQUERADE_BIT: u8 = 14;
/// Default `oomScoreAdj`.
pub const OOM_SCORE_ADJ: i32 = -999;
/// Default `conntrack.maxPerCore`.
pub const CONNTRACK_MAX_PER_CORE: u32 = 32 * 1024;
/// Default `conntrack.min`.
pub const CONNTRACK_MIN: u32 = 128 * 1024;
/// Default `conntrack.tcpEstablishedTimeout`.
pub const CONNTRACK_TCP_ESTABLISHED: Duration = Duration::from_secs(24 * 3600);
/// Default `conntrack.tcpCloseWaitTimeout`.
pub const CONNTRACK_TCP_CLOSE_WAIT: Duration = Duration::from_secs(3600);
/// Default `clientConnection.contentType`.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// Default `clientConnection.qps`.
pub const QPS: f32 = 5.0;
/// Default `clientConnection.burst`.
pub const BURST: u32 = 10;
/// Default `logging.flushFrequency`.
pub const LOG_FLUSH_FREQUENCY: Duration = Duration::from_secs(5);
/// Default `bindAddress`.
pub const BIND_ADDRESS: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// Default health server address: all addresses of `bind_address`'s family.
pub fn healthz_bind_address(bind_address: IpAddr) -> SocketAddr {
    let ip = match bind_address {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, HEALTHZ_PORT)
}

/// Default metrics server address: loopback of `bind_address`'s family.
pub fn metrics_bind_address(bind_address: IpAddr) -> SocketAddr {
    let ip = match bind_address {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    };
    SocketAddr::new(ip, METRICS_PORT)
}

impl Default for ClientConnection {
    fn default() -> Self {
        ClientConnection {
            kubeconfig: None,
            master: None,
            accept_content_types: String::new(),
            content_type: CONTENT_TYPE.to_owned(),
            qps: QPS,
            burst: BURST,
        }
    }
}

impl Default for Conntrack {
    fn default() -> Self {
        Conntrack {
            max_per_core: CONNTRACK_MAX_PER_CORE,
            min: CONNTRACK_MIN,
            tcp_established_timeout: CONNTRACK_TCP_ESTABLISHED,
            tcp_close_wait_timeout: CONNTRACK_TCP_CLOSE_WAIT,
            tcp_be_liberal: false,
            udp_timeout: Duration::ZERO,
            udp_stream_timeout: Duration::ZERO,
        }
    }
}

impl Default for Logging {
    fn default() -> Self {
        Logging {
            format: LogFormat::Text,
            verbosity: 0,
            flush_frequency: LOG_FLUSH_FREQUENCY,
            vmodule: serde_json::Value::Null,
            options: serde_json::Value::Null,
        }
    }
}

/// Upstream's defaults: what kube-proxy does with no flags and no file (iptables mode).
impl Default for Config {
    fn default() -> Self {
        let mode = ProxyMode::default();
        Config {
            config_file: None,
            write_config_to: None,
            cleanup: false,
            init_only: false,
            manifests: None,
            bpf_cgroup: None,
            bpf_pin_root: None,
            nftables_encoder: NftablesEncoder::default(),
            client: ClientConnection::default(),
            hostname_override: None,
            bind_address: BIND_ADDRESS,
            healthz_bind_address: Some(healthz_bind_address(BIND_ADDRESS)),
            metrics_bind_address: metrics_bind_address(BIND_ADDRESS),
            bind_address_hard_fail: false,
            enable_profiling: false,
            show_hidden_metrics_for_version: String::new(),
            mode,
            mode_explicit: false,
            sync_period: SYNC_PERIOD,
            min_sync_period: MIN_SYNC_PERIOD,
            masquerade_bit: MASQUERADE_BIT,
            masquerade_all: false,
            localhost_node_ports: true,
            ipvs: Ipvs::default(),
            winkernel: WinKernel::default(),
            detect_local_mode: DetectLocalMode::default(),
            detect_local: DetectLocal::default(),
            cluster_cidrs: Vec::new(),
            node_port_addresses: NodePortAddresses::default_for(mode),
            oom_score_adj: OOM_SCORE_ADJ,
            conntrack: Conntrack::default(),
            config_sync_period: CONFIG_SYNC_PERIOD,
            port_range: String::new(),
            userspace: super::model::Userspace::default(),
            windows_run_as_service: false,
            feature_gates: super::feature_gates::resolve(&BTreeMap::new()).unwrap_or_default(),
            logging: Logging::default(),
        }
    }
}
