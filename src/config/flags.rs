//! Upstream kube-proxy's command-line flags, parsed pflag-style by clap, plus our `--manifests`.
//!
//! Flag names are an interface we match, defined here once. Every flag is an `Option`: `Some`
//! means it was given on the command line (pflag's `Changed`), which upstream's layering needs,
//! so no `ArgMatches` has to travel with the values. Accepted spellings: `--flag=value`,
//! `--flag value`, `--bool` / `--bool=false`, `-v=4` / `--v=4`, comma lists. There are no short
//! flags other than `-v` and no global flags, so the struct can be flattened into several
//! (sub)commands. Parsing only: meaning and validation live in `from_flags` and `validate`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::validate::{Invalid, go_bool};
use super::{duration, go_values};

/// Parses a Go duration for clap (`30s`, `1m`, `2h22m`).
fn go_duration(text: &str) -> Result<Duration, duration::ParseError> {
    duration::parse(text)
}

/// Parses a whole number as pflag does, for clap.
fn go_int(text: &str) -> Result<i64, Invalid> {
    go_values::int(text)
}

/// Parses a number as pflag does, for clap.
fn go_float(text: &str) -> Result<f64, Invalid> {
    go_values::float(text)
}

/// Parses `-v`'s level for clap: 0 to 2^31 - 1, as component-base's.
fn verbosity(text: &str) -> Result<u32, Invalid> {
    go_values::int(text)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|v| i32::try_from(*v).is_ok())
        .ok_or_else(|| {
            Invalid(format!(
                "must be a whole number from 0 to 2147483647, got {text:?}"
            ))
        })
}

/// Upstream kube-proxy's flags (and `--manifests`). `None`: not given on the command line.
///
/// Most flags are ignored when `--config` is given, as upstream does; see [`super::resolve`].
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct Flags {
    /// Read a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1, YAML or JSON) from
    /// FILE; most other flags are then ignored
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Write the effective configuration to FILE as KubeProxyConfiguration YAML and exit
    #[arg(long, value_name = "FILE")]
    pub write_config_to: Option<PathBuf>,

    /// Remove the rules of every proxy mode and exit (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub cleanup: Option<bool>,

    /// Do the start-up steps that need full root (sysctls) and exit, so the long-running
    /// process needs only CAP_NET_ADMIN (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub init_only: Option<bool>,

    /// Print version information and exit; `raw` prints every build detail
    #[arg(long, value_name = "true|raw", num_args = 0..=1, require_equals = true,
          default_missing_value = "true",
          value_parser = clap::builder::PossibleValuesParser::new(["true", "false", "raw"]))]
    pub version: Option<String>,

    /// Read Services, EndpointSlices and Nodes from the manifests in DIR instead of the API
    /// server (kube-proxy-rs only)
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,

    /// How nftables mode programs the kernel: netlink, or nft (the `nft -f` text encoder, for
    /// debugging) (default: netlink; kube-proxy-rs only)
    #[arg(long, value_name = "ENCODER")]
    pub nftables_encoder: Option<String>,

    /// eBPF mode: the cgroup v2 directory its programs attach to; every process below it is
    /// balanced (default: the cgroup v2 root; kube-proxy-rs only)
    #[arg(long, value_name = "DIR")]
    pub bpf_cgroup: Option<PathBuf>,

    /// eBPF mode: the bpffs directory its maps and links are pinned under, mounted when it is
    /// below /sys/fs/bpf and bpffs is not (default: /sys/fs/bpf/kube-proxy-rs; kube-proxy-rs only)
    #[arg(long, value_name = "DIR")]
    pub bpf_pin_root: Option<PathBuf>,

    /// Kubeconfig file with the API server's address and credentials (default: in-cluster)
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,

    /// API server address; overrides the one in the kubeconfig
    #[arg(long, value_name = "URL")]
    pub master: Option<String>,

    /// Content type of requests to the API server (default: application/vnd.kubernetes.protobuf)
    #[arg(long, value_name = "TYPE")]
    pub kube_api_content_type: Option<String>,

    /// Sustained requests per second to the API server (default: 5)
    #[arg(long, value_name = "QPS", allow_negative_numbers = true, value_parser = go_float)]
    pub kube_api_qps: Option<f64>,

    /// Requests allowed in a burst to the API server (default: 10)
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = go_int)]
    pub kube_api_burst: Option<i64>,

    /// Node name to use instead of the hostname; applies even with --config
    #[arg(long, value_name = "NAME")]
    pub hostname_override: Option<String>,

    /// The node's primary IP, overriding the Node object; nothing binds to it
    /// (default: 0.0.0.0, meaning take it from the Node)
    #[arg(long, value_name = "IP")]
    pub bind_address: Option<String>,

    /// Exit when the health or metrics server cannot bind its port, instead of retrying every
    /// 5s (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub bind_address_hard_fail: Option<bool>,

    /// Address of the health server, IP:PORT; empty disables it (default: 0.0.0.0:10256)
    #[arg(long, value_name = "IP:PORT")]
    pub healthz_bind_address: Option<String>,

    /// Address of the metrics server, IP:PORT (default: 127.0.0.1:10249; 0.0.0.0:10249 or
    /// [::]:10249 serves on all interfaces)
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_bind_address: Option<String>,

    /// Upstream: serve profiling data on /debug/pprof (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub profiling: Option<bool>,

    /// Upstream: also expose metrics hidden since this previous minor version, e.g. 1.36
    /// (default: none)
    #[arg(long, value_name = "VERSION")]
    pub show_hidden_metrics_for_version: Option<String>,

    /// Dataplane: iptables, ipvs, nftables, userspace or ebpf (default: iptables)
    #[arg(long, value_name = "MODE")]
    pub proxy_mode: Option<String>,

    /// Dataplane mode that replaces --config's `mode` (and --proxy-mode); empty changes
    /// nothing. Lets a DaemonSet use an existing KubeProxyConfiguration as it is
    /// (kube-proxy-rs only)
    #[arg(long, value_name = "MODE")]
    pub proxy_mode_override: Option<String>,

    /// Bit of the packet mark that flags packets for SNAT, 0 to 31, in iptables and ipvs mode
    /// (default: 14)
    #[arg(long, value_name = "BIT", allow_negative_numbers = true,
          value_parser = go_int)]
    pub iptables_masquerade_bit: Option<i64>,

    /// SNAT all traffic sent to Service cluster IPs (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub masquerade_all: Option<bool>,

    /// Accept NodePort connections on 127.0.0.1 (iptables mode, IPv4 only) (default: true)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub iptables_localhost_nodeports: Option<bool>,

    /// Longest time between resyncs, and the retry delay, in iptables and nftables mode;
    /// more than 0 (default: 30s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub iptables_sync_period: Option<Duration>,

    /// Shortest time between syncs in iptables and nftables mode; 0 syncs on every change
    /// (default: 1s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub iptables_min_sync_period: Option<Duration>,

    /// Longest time between resyncs, and the retry delay, in ipvs mode (default: 30s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub ipvs_sync_period: Option<Duration>,

    /// Shortest time between syncs in ipvs mode; 0 syncs on every change (default: 1s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub ipvs_min_sync_period: Option<Duration>,

    /// IPVS scheduler (default: rr)
    #[arg(long, value_name = "NAME")]
    pub ipvs_scheduler: Option<String>,

    /// Comma-separated CIDRs whose IPVS services are never cleaned up (default: none)
    #[arg(long, value_name = "CIDRS", value_delimiter = ',')]
    pub ipvs_exclude_cidrs: Option<Vec<String>>,

    /// Set arp_ignore=1 and arp_announce=2 for IPVS (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub ipvs_strict_arp: Option<bool>,

    /// Idle timeout of IPVS TCP connections; 0 leaves the kernel's (default: 0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub ipvs_tcp_timeout: Option<Duration>,

    /// Timeout of IPVS TCP connections after a FIN; 0 leaves the kernel's (default: 0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub ipvs_tcpfin_timeout: Option<Duration>,

    /// Timeout of IPVS UDP flows; 0 leaves the kernel's (default: 0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub ipvs_udp_timeout: Option<Duration>,

    /// How to recognise traffic from local pods: ClusterCIDR, NodeCIDR, BridgeInterface or
    /// InterfaceNamePrefix (default: ClusterCIDR)
    #[arg(long, value_name = "MODE")]
    pub detect_local_mode: Option<String>,

    /// Bridge whose traffic is local, for --detect-local-mode=BridgeInterface
    #[arg(long, value_name = "NAME")]
    pub pod_bridge_interface: Option<String>,

    /// Interface name prefix whose traffic is local, for
    /// --detect-local-mode=InterfaceNamePrefix
    #[arg(long, value_name = "PREFIX")]
    pub pod_interface_name_prefix: Option<String>,

    /// Pod CIDR, or an IPv4,IPv6 pair, for --detect-local-mode=ClusterCIDR (default: none,
    /// no local-traffic detection)
    #[arg(long, value_name = "CIDRS")]
    pub cluster_cidr: Option<String>,

    /// Ports userspace mode's listeners take: `low-high`, `base+size` or one port (default:
    /// empty, the kernel chooses)
    #[arg(long, value_name = "RANGE")]
    pub proxy_port_range: Option<String>,

    /// Userspace mode: how long a UDP flow with no datagram either way lives (default: 250ms;
    /// upstream's flag for its userspace mode, which it removed in 1.26)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub udp_timeout: Option<Duration>,

    /// nftables and userspace modes: serve NodePorts on 127.0.0.1 and ::1 by relaying them in
    /// the proxy, where iptables mode needs route_localnet (default: false; kube-proxy-rs
    /// only)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub nodeport_localhost: Option<bool>,

    /// Userspace mode: connections and UDP flows relayed at once over every listener; more
    /// are refused (default: 100000; kube-proxy-rs only)
    #[arg(long, value_name = "COUNT", allow_negative_numbers = true,
          value_parser = go_int)]
    pub userspace_max_connections: Option<i64>,

    /// Userspace mode: connections and UDP flows one Service's listeners relay at once; more
    /// are refused (default: 10000; kube-proxy-rs only)
    #[arg(long, value_name = "COUNT", allow_negative_numbers = true,
          value_parser = go_int)]
    pub userspace_max_connections_per_service: Option<i64>,

    /// Comma-separated CIDRs and keywords (primary, localhost, all) of node addresses that
    /// accept NodePorts (default: all; primary in nftables mode)
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub nodeport_addresses: Option<Vec<String>>,

    /// OOM score adjustment of this process, -1000 to 1000 (default: -999)
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = go_int)]
    pub oom_score_adj: Option<i64>,

    /// Conntrack entries per CPU; 0 leaves the limit and ignores --conntrack-min
    /// (default: 32768)
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = go_int)]
    pub conntrack_max_per_core: Option<i64>,

    /// Lower bound of the conntrack table size (default: 131072)
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = go_int)]
    pub conntrack_min: Option<i64>,

    /// Idle timeout of established TCP connections; 0 leaves the kernel's (default: 24h0m0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub conntrack_tcp_timeout_established: Option<Duration>,

    /// Timeout of TCP connections in CLOSE_WAIT; 0 leaves the kernel's (default: 1h0m0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub conntrack_tcp_timeout_close_wait: Option<Duration>,

    /// Set nf_conntrack_tcp_be_liberal=1 (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub conntrack_tcp_be_liberal: Option<bool>,

    /// Idle timeout of unreplied UDP flows; 0 leaves the kernel's (default: 0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub conntrack_udp_timeout: Option<Duration>,

    /// Idle timeout of assured UDP flows; 0 leaves the kernel's (default: 0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub conntrack_udp_timeout_stream: Option<Duration>,

    /// Upstream: how often the watches re-deliver every object they hold; more than 0
    /// (default: 15m0s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub config_sync_period: Option<Duration>,

    /// Comma-separated Name=true|false feature gates (default: none)
    #[arg(long, value_name = "GATES", value_delimiter = ',')]
    pub feature_gates: Option<Vec<String>>,

    /// Log verbosity; applies even with --config (default: 0)
    #[arg(short = 'v', long = "v", value_name = "LEVEL", value_parser = verbosity)]
    pub verbosity: Option<u32>,

    /// Log format: text or json; applies even with --config (default: text)
    #[arg(long, value_name = "FORMAT")]
    pub logging_format: Option<String>,

    /// Upstream: per-file log verbosity, comma-separated PATTERN=N (text format only); applies
    /// even with --config (default: none)
    #[arg(long, value_name = "PATTERN=N,...", value_delimiter = ',',
          action = clap::ArgAction::Append)]
    pub vmodule: Option<Vec<String>>,

    /// Upstream: longest time between log flushes; more than 0; applies even with --config
    /// (default: 5s)
    #[arg(long, value_name = "DURATION", value_parser = go_duration)]
    pub log_flush_frequency: Option<Duration>,

    /// Upstream, alpha: in text format, errors to stderr and the rest to stdout (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub log_text_split_stream: Option<bool>,

    /// Upstream, alpha: in text format with split streams, bytes of info messages to buffer,
    /// e.g. 512, 2Ki or 5Mi (default: 0)
    #[arg(long, value_name = "QUANTITY", value_parser = go_values::quantity)]
    pub log_text_info_buffer_size: Option<String>,

    /// Upstream, alpha: in JSON format, errors to stderr and the rest to stdout (default: false)
    #[arg(long, value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool)]
    pub log_json_split_stream: Option<bool>,

    /// Upstream, alpha: in JSON format with split streams, bytes of info messages to buffer,
    /// e.g. 512, 2Ki or 5Mi (default: 0)
    #[arg(long, value_name = "QUANTITY", value_parser = go_values::quantity)]
    pub log_json_info_buffer_size: Option<String>,

    /// Deprecated upstream: the health server's port when --healthz-bind-address has none; 0
    /// disables the server (default: 10256)
    #[arg(long, value_name = "PORT", allow_negative_numbers = true, value_parser = go_int,
          hide = true)]
    pub healthz_port: Option<i64>,

    /// Deprecated upstream: the metrics server's port when --metrics-bind-address has none
    /// (default: 10249)
    #[arg(long, value_name = "PORT", allow_negative_numbers = true, value_parser = go_int,
          hide = true)]
    pub metrics_port: Option<i64>,
}

/// Flags upstream honours even when `--config` is given: the one-shot modes, our own flags,
/// `--master`, `--hostname-override` and the logging flags (which win over the file's
/// `logging`).
pub const HONOURED_WITH_CONFIG: &[&str] = &[
    "bpf-cgroup",
    "bpf-pin-root",
    "cleanup",
    "config",
    "hostname-override",
    "init-only",
    "log-flush-frequency",
    "log-json-info-buffer-size",
    "log-json-split-stream",
    "log-text-info-buffer-size",
    "log-text-split-stream",
    "logging-format",
    "manifests",
    "master",
    "nftables-encoder",
    "nodeport-localhost",
    "proxy-mode-override",
    "udp-timeout",
    "userspace-max-connections",
    "userspace-max-connections-per-service",
    "v",
    "version",
    "vmodule",
    "write-config-to",
];

macro_rules! given {
    ($flags:ident; $($field:ident => $name:literal),* $(,)?) => {{
        let mut out = std::collections::BTreeSet::new();
        $(if $flags.$field.is_some() { out.insert($name); })*
        out
    }};
}

impl Flags {
    /// Names (without dashes) of the flags given on the command line: pflag's `Changed`.
    pub fn changed(&self) -> std::collections::BTreeSet<&'static str> {
        given!(self;
            config => "config", write_config_to => "write-config-to", cleanup => "cleanup",
            init_only => "init-only", version => "version", manifests => "manifests",
            nftables_encoder => "nftables-encoder",
            bpf_cgroup => "bpf-cgroup", bpf_pin_root => "bpf-pin-root",
            kubeconfig => "kubeconfig", master => "master",
            kube_api_content_type => "kube-api-content-type", kube_api_qps => "kube-api-qps",
            kube_api_burst => "kube-api-burst", hostname_override => "hostname-override",
            bind_address => "bind-address", bind_address_hard_fail => "bind-address-hard-fail",
            healthz_bind_address => "healthz-bind-address",
            metrics_bind_address => "metrics-bind-address", profiling => "profiling",
            show_hidden_metrics_for_version => "show-hidden-metrics-for-version",
            proxy_mode => "proxy-mode", proxy_mode_override => "proxy-mode-override",
            iptables_masquerade_bit => "iptables-masquerade-bit",
            masquerade_all => "masquerade-all",
            iptables_localhost_nodeports => "iptables-localhost-nodeports",
            iptables_sync_period => "iptables-sync-period",
            iptables_min_sync_period => "iptables-min-sync-period",
            ipvs_sync_period => "ipvs-sync-period", ipvs_min_sync_period => "ipvs-min-sync-period",
            ipvs_scheduler => "ipvs-scheduler", ipvs_exclude_cidrs => "ipvs-exclude-cidrs",
            ipvs_strict_arp => "ipvs-strict-arp", ipvs_tcp_timeout => "ipvs-tcp-timeout",
            ipvs_tcpfin_timeout => "ipvs-tcpfin-timeout", ipvs_udp_timeout => "ipvs-udp-timeout",
            detect_local_mode => "detect-local-mode", pod_bridge_interface => "pod-bridge-interface",
            pod_interface_name_prefix => "pod-interface-name-prefix",
            cluster_cidr => "cluster-cidr", nodeport_addresses => "nodeport-addresses",
            oom_score_adj => "oom-score-adj", conntrack_max_per_core => "conntrack-max-per-core",
            conntrack_min => "conntrack-min",
            conntrack_tcp_timeout_established => "conntrack-tcp-timeout-established",
            conntrack_tcp_timeout_close_wait => "conntrack-tcp-timeout-close-wait",
            conntrack_tcp_be_liberal => "conntrack-tcp-be-liberal",
            conntrack_udp_timeout => "conntrack-udp-timeout",
            conntrack_udp_timeout_stream => "conntrack-udp-timeout-stream",
            config_sync_period => "config-sync-period", feature_gates => "feature-gates",
            verbosity => "v", logging_format => "logging-format", vmodule => "vmodule",
            log_flush_frequency => "log-flush-frequency",
            log_text_split_stream => "log-text-split-stream",
            log_text_info_buffer_size => "log-text-info-buffer-size",
            log_json_split_stream => "log-json-split-stream",
            log_json_info_buffer_size => "log-json-info-buffer-size",
            healthz_port => "healthz-port", metrics_port => "metrics-port",
            proxy_port_range => "proxy-port-range", udp_timeout => "udp-timeout",
            nodeport_localhost => "nodeport-localhost",
            userspace_max_connections => "userspace-max-connections",
            userspace_max_connections_per_service => "userspace-max-connections-per-service",
        )
    }

    /// Whether `--version` asks for version output, and whether in raw form.
    pub fn version_requested(&self) -> Option<VersionStyle> {
        match self.version.as_deref() {
            Some("true") => Some(VersionStyle::Short),
            Some("raw") => Some(VersionStyle::Raw),
            _ => None,
        }
    }
}

/// What `--version` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionStyle {
    /// `--version` / `--version=true`: one line.
    Short,
    /// `--version=raw`: every build detail.
    Raw,
}
