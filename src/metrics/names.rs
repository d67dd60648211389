//! Every metric name, type, help text and bucket layout we expose: the interface dashboards and
//! alerts are written against.
//!
//! Upstream's `kubeproxy_*` names, types, labels and buckets follow the Kubernetes metrics
//! reference (v1.34–v1.36) and `pkg/proxy/metrics`; help texts carry upstream's `[ALPHA]`
//! stability marker. Names here are spelled as exposed (counters with `_total`); the registry
//! strips that suffix on registration because prometheus-client appends it. Metrics of our
//! own start with `kubeproxy_rs_`.

use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;

/// The exposition type, as the `# TYPE` line spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric: its exposed name, type, labels and help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Spec {
    /// The name to register: without `_total` for counters, which the encoder appends.
    pub fn registered_name(&self) -> &'static str {
        match self.kind {
            Kind::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            Kind::Gauge | Kind::Histogram => self.name,
        }
    }

    /// Writes this metric's `# HELP` and `# TYPE` lines for a collector that reads its
    /// samples at scrape time, and hands back the encoder for them.
    pub fn descriptor<'a>(
        &self,
        encoder: &'a mut DescriptorEncoder,
    ) -> Result<MetricEncoder<'a>, std::fmt::Error> {
        let kind = match self.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
            Kind::Histogram => MetricType::Histogram,
        };
        encoder.encode_descriptor(self.registered_name(), self.help, None, kind)
    }
}

const fn spec(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Spec {
    Spec {
        name,
        kind,
        labels,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

const FAMILY: &[&str] = &["ip_family"];
const NONE: &[&str] = &[];

pub const SYNC_DURATION: Spec = spec(
    "kubeproxy_sync_proxy_rules_duration_seconds",
    Histogram,
    FAMILY,
    "[ALPHA] SyncProxyRules latency in seconds",
);
pub const SYNC_FULL_DURATION: Spec = spec(
    "kubeproxy_sync_full_proxy_rules_duration_seconds",
    Histogram,
    FAMILY,
    "[ALPHA] SyncProxyRules latency in seconds for full resyncs",
);
pub const SYNC_PARTIAL_DURATION: Spec = spec(
    "kubeproxy_sync_partial_proxy_rules_duration_seconds",
    Histogram,
    FAMILY,
    "[ALPHA] SyncProxyRules latency in seconds for partial resyncs",
);
pub const NETWORK_PROGRAMMING_DURATION: Spec = spec(
    "kubeproxy_network_programming_duration_seconds",
    Histogram,
    FAMILY,
    "[ALPHA] In Cluster Network Programming Latency in seconds",
);
pub const LAST_SYNC_TIMESTAMP: Spec = spec(
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
    Gauge,
    FAMILY,
    "[ALPHA] The last time proxy rules were successfully synced",
);
pub const LAST_QUEUED_TIMESTAMP: Spec = spec(
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    Gauge,
    FAMILY,
    "[ALPHA] The last time a sync of proxy rules was queued",
);
pub const ENDPOINT_CHANGES_PENDING: Spec = spec(
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
    Gauge,
    NONE,
    "[ALPHA] Pending proxy rules Endpoint changes",
);
pub const ENDPOINT_CHANGES_TOTAL: Spec = spec(
    "kubeproxy_sync_proxy_rules_endpoint_changes_total",
    Counter,
    NONE,
    "[ALPHA] Cumulative proxy rules Endpoint changes",
);
pub const SERVICE_CHANGES_PENDING: Spec = spec(
    "kubeproxy_sync_proxy_rules_service_changes_pending",
    Gauge,
    NONE,
    "[ALPHA] Pending proxy rules Service changes",
);
pub const SERVICE_CHANGES_TOTAL: Spec = spec(
    "kubeproxy_sync_proxy_rules_service_changes_total",
    Counter,
    NONE,
    "[ALPHA] Cumulative proxy rules Service changes",
);
/// A gauge despite the `_total` suffix, as upstream has it.
pub const NO_LOCAL_ENDPOINTS: Spec = spec(
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
    Gauge,
    &["ip_family", "traffic_policy"],
    "[ALPHA] Number of services with a Local traffic policy and no endpoints",
);
pub const IPTABLES_RESTORE_FAILURES: Spec = spec(
    "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
    Counter,
    FAMILY,
    "[ALPHA] Cumulative proxy iptables restore failures",
);
pub const IPTABLES_PARTIAL_RESTORE_FAILURES: Spec = spec(
    "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
    Counter,
    FAMILY,
    "[ALPHA] Cumulative proxy iptables partial restore failures",
);
/// A gauge despite the `_total` suffix, as upstream has it.
pub const IPTABLES_RULES_TOTAL: Spec = spec(
    "kubeproxy_sync_proxy_rules_iptables_total",
    Gauge,
    &["ip_family", "table"],
    "[ALPHA] Total number of iptables rules owned by kube-proxy",
);
pub const IPTABLES_RULES_LAST: Spec = spec(
    "kubeproxy_sync_proxy_rules_iptables_last",
    Gauge,
    &["ip_family", "table"],
    "[ALPHA] Number of iptables rules written by kube-proxy in last sync",
);
pub const NFTABLES_SYNC_FAILURES: Spec = spec(
    "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
    Counter,
    FAMILY,
    "[ALPHA] Cumulative proxy nftables sync failures",
);
pub const NFTABLES_CLEANUP_FAILURES: Spec = spec(
    "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
    Counter,
    FAMILY,
    "[ALPHA] Cumulative proxy nftables cleanup failures",
);
pub const HEALTHZ_TOTAL: Spec = spec(
    "kubeproxy_proxy_healthz_total",
    Counter,
    &["code"],
    "[ALPHA] Cumulative proxy healthz HTTP status",
);
pub const LIVEZ_TOTAL: Spec = spec(
    "kubeproxy_proxy_livez_total",
    Counter,
    &["code"],
    "[ALPHA] Cumulative proxy livez HTTP status",
);
pub const CONNTRACK_SYNC_DURATION: Spec = spec(
    "kubeproxy_conntrack_reconciler_sync_duration_seconds",
    Histogram,
    FAMILY,
    "[ALPHA] ReconcileConntrackFlowsLatency latency in seconds",
);
pub const CONNTRACK_DELETED_ENTRIES: Spec = spec(
    "kubeproxy_conntrack_reconciler_deleted_entries_total",
    Counter,
    FAMILY,
    "[ALPHA] Cumulative conntrack flows deleted by conntrack reconciler",
);

// Ours, beyond upstream.

pub const RS_OBJECTS: Spec = spec(
    "kubeproxy_rs_sync_objects",
    Gauge,
    FAMILY,
    "Kernel objects (chains, sets, maps, elements, rules or virtual servers) the proxy owns after its last successful sync",
);
pub const RS_OPERATIONS: Spec = spec(
    "kubeproxy_rs_sync_operations_total",
    Counter,
    FAMILY,
    "Kernel objects created, changed or deleted by successful syncs",
);
pub const RS_NETLINK_MESSAGES: Spec = spec(
    "kubeproxy_rs_sync_netlink_messages_total",
    Counter,
    NONE,
    "Netlink messages the dataplane sent to the kernel during successful syncs: requests and dump requests",
);
pub const RS_NFTABLES_REPAIRS: Spec = spec(
    "kubeproxy_rs_nftables_repairs_total",
    Counter,
    NONE,
    "Full syncs that found our nftables tables changed by another program and repaired them",
);
pub const RS_IPTABLES_REPAIRS: Spec = spec(
    "kubeproxy_rs_iptables_repairs_total",
    Counter,
    NONE,
    "Full syncs started by the nf_tables monitor (iptables-nft) that rewrote our iptables rules after another program deleted some",
);
pub const RS_HEALTH_CHECKS: Spec = spec(
    "kubeproxy_rs_service_health_checks",
    Gauge,
    &["state"],
    "Service health check servers by state: open (serving) or failing (port could not be bound, retried)",
);

const TRAFFIC: &[&str] = &[
    "ip_family",
    "namespace",
    "service",
    "port",
    "protocol",
    "frontend",
];
const DIRECTED_TRAFFIC: &[&str] = &[
    "ip_family",
    "namespace",
    "service",
    "port",
    "protocol",
    "frontend",
    "direction",
];

pub const RS_IPVS_CONNECTIONS: Spec = spec(
    "kubeproxy_rs_ipvs_connections_total",
    Counter,
    TRAFFIC,
    "Connections IPVS scheduled through a kind of frontend of a service port, from the kernel's counters read at scrape time (NodePorts summed over node addresses)",
);
pub const RS_IPVS_PACKETS: Spec = spec(
    "kubeproxy_rs_ipvs_packets_total",
    Counter,
    DIRECTED_TRAFFIC,
    "Packets through a kind of frontend of a service port, in (to the endpoints) or out, from the kernel's counters read at scrape time",
);
pub const RS_IPVS_BYTES: Spec = spec(
    "kubeproxy_rs_ipvs_bytes_total",
    Counter,
    DIRECTED_TRAFFIC,
    "Bytes through a kind of frontend of a service port, in (to the endpoints) or out, from the kernel's counters read at scrape time",
);

/// client-go's, which upstream kube-proxy exposes for its API client.
pub const REST_CLIENT_REQUESTS: Spec = spec(
    "rest_client_requests_total",
    Counter,
    &["code", "host", "method"],
    "[ALPHA] Number of HTTP requests, partitioned by status code, method, and host.",
);

const RELAYED: &[&str] = &[
    "ip_family",
    "namespace",
    "service",
    "port",
    "protocol",
    "listener",
];
const DIRECTED_RELAYED: &[&str] = &[
    "ip_family",
    "namespace",
    "service",
    "port",
    "protocol",
    "listener",
    "direction",
];
const REFUSED_RELAYED: &[&str] = &[
    "ip_family",
    "namespace",
    "service",
    "port",
    "protocol",
    "listener",
    "reason",
];

pub const RS_USERSPACE_CONNECTIONS: Spec = spec(
    "kubeproxy_rs_userspace_connections",
    Gauge,
    RELAYED,
    "Userspace mode: connections (UDP: flows) a service port's listener relays now; listener is cluster (the cluster-wide endpoints), local (this node's) or loopback (NodePorts on 127.0.0.1 and ::1, --nodeport-localhost)",
);
pub const RS_USERSPACE_CONNECTIONS_TOTAL: Spec = spec(
    "kubeproxy_rs_userspace_connections_total",
    Counter,
    RELAYED,
    "Userspace mode: connections (UDP: flows) a service port's listener admitted since it opened",
);
pub const RS_USERSPACE_BYTES: Spec = spec(
    "kubeproxy_rs_userspace_bytes_total",
    Counter,
    DIRECTED_RELAYED,
    "Userspace mode: bytes relayed in (clients to endpoints) or out",
);
pub const RS_USERSPACE_DIAL_FAILURES: Spec = spec(
    "kubeproxy_rs_userspace_dial_failures_total",
    Counter,
    RELAYED,
    "Userspace mode: dials to an endpoint that were refused, unreachable or past the dial timeout (UDP: flows ended by an ICMP error)",
);
pub const RS_USERSPACE_DIAL_RETRIES: Spec = spec(
    "kubeproxy_rs_userspace_dial_retries_total",
    Counter,
    RELAYED,
    "Userspace mode: dials after a connection's first, to the next endpoint",
);
pub const RS_USERSPACE_REFUSED: Spec = spec(
    "kubeproxy_rs_userspace_refused_total",
    Counter,
    REFUSED_RELAYED,
    "Userspace mode: connections (UDP: datagrams starting a flow) turned away, by reason: limit (a connection limit) or no-endpoint (none left to try)",
);

pub const RS_EBPF_DATAPATH: Spec = spec(
    "kubeproxy_rs_ebpf_datapath_total",
    Counter,
    &["reason"],
    "eBPF mode: socket calls and new flows from outside the programs acted on, by reason: translated (connect or sendmsg to a Service, or a new flow from outside, given a backend), refused (a Service without endpoints), affine (of the translated, the backend ClientIP affinity remembered), reversed (recvmsg or getpeername shown the Service address), bind-refused (a bind to a NodePort in the node's namespace), dropped (a policy that drops: Local without a local endpoint, a source outside loadBalancerSourceRanges, no route to the backend), nat-port-exhausted (a new flow from outside dropped: no free source port for its SNAT to the backend); counted since the programs were loaded with this set of reasons",
);
pub const RS_EBPF_MAP_ENTRIES: Spec = spec(
    "kubeproxy_rs_ebpf_map_entries",
    Gauge,
    &["map"],
    "eBPF mode: entries in the maps the proxy writes (kp_svc: frontends, kp_slot: backend slots) after the last sync",
);
pub const RS_EBPF_MAP_MAX_ENTRIES: Spec = spec(
    "kubeproxy_rs_ebpf_map_max_entries",
    Gauge,
    &["map"],
    "eBPF mode: the bound of each map the proxy writes; a sync needing more fails",
);
pub const RS_EBPF_UDP_SOCKETS_DESTROYED: Spec = spec(
    "kubeproxy_rs_ebpf_udp_sockets_destroyed_total",
    Counter,
    NONE,
    "eBPF mode: connected UDP sockets the programs had sent to a backend that stopped serving its Service, destroyed (their owners get ECONNABORTED and reconnect); the socket-level counterpart of the conntrack reconciler's deleted entries",
);
pub const RS_EBPF_SYNC_FAILURES: Spec = spec(
    "kubeproxy_rs_ebpf_sync_failures_total",
    Counter,
    FAMILY,
    "eBPF mode: syncs that failed (a map write refused, such as one past a map's bound); the maps keep the Services as the last good sync left them, and the retry is a full sync",
);

/// Every metric the registry holds, upstream's first, then ours.
pub const ALL: &[Spec] = &[
    SYNC_DURATION,
    SYNC_FULL_DURATION,
    SYNC_PARTIAL_DURATION,
    NETWORK_PROGRAMMING_DURATION,
    LAST_SYNC_TIMESTAMP,
    LAST_QUEUED_TIMESTAMP,
    ENDPOINT_CHANGES_PENDING,
    ENDPOINT_CHANGES_TOTAL,
    SERVICE_CHANGES_PENDING,
    SERVICE_CHANGES_TOTAL,
    NO_LOCAL_ENDPOINTS,
    IPTABLES_RESTORE_FAILURES,
    IPTABLES_PARTIAL_RESTORE_FAILURES,
    IPTABLES_RULES_TOTAL,
    IPTABLES_RULES_LAST,
    NFTABLES_SYNC_FAILURES,
    NFTABLES_CLEANUP_FAILURES,
    HEALTHZ_TOTAL,
    LIVEZ_TOTAL,
    CONNTRACK_SYNC_DURATION,
    CONNTRACK_DELETED_ENTRIES,
    REST_CLIENT_REQUESTS,
    RS_OBJECTS,
    RS_OPERATIONS,
    RS_NETLINK_MESSAGES,
    RS_HEALTH_CHECKS,
    RS_NFTABLES_REPAIRS,
    RS_IPTABLES_REPAIRS,
    RS_IPVS_CONNECTIONS,
    RS_IPVS_PACKETS,
    RS_IPVS_BYTES,
    RS_USERSPACE_CONNECTIONS,
    RS_USERSPACE_CONNECTIONS_TOTAL,
    RS_USERSPACE_BYTES,
    RS_USERSPACE_DIAL_FAILURES,
    RS_USERSPACE_DIAL_RETRIES,
    RS_USERSPACE_REFUSED,
    RS_EBPF_DATAPATH,
    RS_EBPF_MAP_ENTRIES,
    RS_EBPF_MAP_MAX_ENTRIES,
    RS_EBPF_UDP_SOCKETS_DESTROYED,
    RS_EBPF_SYNC_FAILURES,
];

/// Sync durations: 1 ms doubling to about 16 s (15 buckets), as upstream.
pub fn sync_buckets() -> impl Iterator<Item = f64> {
    (0..15).map(|k| 0.001 * f64::from(1u32 << k))
}

/// Network programming latency: 0.25 s, 0.5 s, 1–59 s by 1, 60–115 s by 5, 120–300 s by 30,
/// as upstream.
pub fn network_programming_buckets() -> impl Iterator<Item = f64> {
    [0.25, 0.5]
        .into_iter()
        .chain((1..60).map(f64::from))
        .chain((60..120).step_by(5).map(f64::from))
        .chain((120..=300).step_by(30).map(f64::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_match_upstream_boundaries() {
        let sync: Vec<f64> = sync_buckets().collect();
        assert_eq!(sync.len(), 15);
        assert_eq!(sync[0], 0.001);
        assert_eq!(sync[14], 16.384);
        let np: Vec<f64> = network_programming_buckets().collect();
        assert_eq!(&np[..3], &[0.25, 0.5, 1.0]);
        assert!(np.contains(&59.0) && np.contains(&60.0) && np.contains(&115.0));
        assert!(!np.contains(&61.0) && !np.contains(&116.0));
        assert_eq!(&np[np.len() - 3..], &[240.0, 270.0, 300.0]);
        assert_eq!(np.len(), 2 + 59 + 12 + 7);
    }

    #[test]
    fn names_are_unique_and_counters_end_in_total() {
        let mut names: Vec<&str> = ALL.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        for s in ALL.iter().filter(|s| s.kind == Kind::Counter) {
            assert!(s.name.ends_with("_total"), "{}", s.name);
        }
    }
}
