//! Per-Service traffic counters a dataplane can read from the kernel on demand (IPVS keeps
//! them per virtual service), for `kubeproxy_rs_ipvs_*_total`.
//!
//! Read at scrape time rather than during syncs: a sync with nothing changed must not touch
//! the kernel, and a counter is only as fresh as its last read.

use crate::cluster::{IpFamily, ServicePortName};

/// Traffic through one kind of frontend of one service port in one family, as the kernel
/// counted it since the frontend's object was created. Totals: one that goes down means the
/// object was re-created, which Prometheus reads as a counter reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceTraffic {
    pub family: IpFamily,
    pub port: ServicePortName,
    /// `cluster-ip`, `external-ip`, `load-balancer` or `node-port`.
    pub frontend: &'static str,
    pub connections: u64,
    pub packets_in: u64,
    pub packets_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Where the metrics read [`ServiceTraffic`] at each scrape.
pub trait TrafficSource: Send + Sync {
    /// Every frontend's counters now; empty when they cannot be read (the reason is logged).
    fn read(&self) -> Vec<ServiceTraffic>;
}
