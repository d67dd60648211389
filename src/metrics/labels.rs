//! Label sets and label values, spelled as upstream spells them (`ip_family="IPv4"`,
//! `table="nat"`, `traffic_policy="internal"`, `code="503"`).

use std::fmt::Write;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::cluster::IpFamily;

impl EncodeLabelValue for IpFamily {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// An iptables table whose rules are counted (`table` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Table {
    Filter,
    Nat,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }
}

impl EncodeLabelValue for Table {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// Which traffic policy has no local endpoint (`traffic_policy` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    Internal,
    External,
}

impl EncodeLabelValue for Policy {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            Policy::Internal => "internal",
            Policy::External => "external",
        })
    }
}

/// The state of a Service health check (`state` label of `kubeproxy_rs_service_health_checks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CheckState {
    Open,
    Failing,
}

impl EncodeLabelValue for CheckState {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            CheckState::Open => "open",
            CheckState::Failing => "failing",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FamilyLabels {
    pub ip_family: IpFamily,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TableLabels {
    pub ip_family: IpFamily,
    pub table: Table,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PolicyLabels {
    pub ip_family: IpFamily,
    pub traffic_policy: Policy,
}

/// An HTTP status code, as upstream labels probe answers.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StateLabels {
    pub state: CheckState,
}

/// One kind of frontend of one service port (`kubeproxy_rs_ipvs_connections_total`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct TrafficLabels {
    pub ip_family: IpFamily,
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub protocol: String,
    pub frontend: String,
}

/// Which way packets went through a virtual service (`direction` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From clients to the endpoints.
    In,
    /// From the endpoints back to clients.
    Out,
}

impl EncodeLabelValue for Direction {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(match self {
            Direction::In => "in",
            Direction::Out => "out",
        })
    }
}

/// [`TrafficLabels`] and a direction (`kubeproxy_rs_ipvs_packets_total`, `..._bytes_total`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectedTrafficLabels {
    pub ip_family: IpFamily,
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub protocol: String,
    pub frontend: String,
    pub direction: Direction,
}

impl TrafficLabels {
    pub fn directed(&self, direction: Direction) -> DirectedTrafficLabels {
        DirectedTrafficLabels {
            ip_family: self.ip_family,
            namespace: self.namespace.clone(),
            service: self.service.clone(),
            port: self.port.clone(),
            protocol: self.protocol.clone(),
            frontend: self.frontend.clone(),
            direction,
        }
    }
}

/// One listener of the userspace relay: its service port, family and endpoint list
/// (`listener`: `cluster`, `local`, or `loopback` for a NodePort on 127.0.0.1 or ::1;
/// `kubeproxy_rs_userspace_*`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RelayLabels {
    pub ip_family: IpFamily,
    pub namespace: String,
    pub service: String,
    pub port: String,
    pub protocol: String,
    pub listener: &'static str,
}

/// [`RelayLabels`] and a direction (`kubeproxy_rs_userspace_bytes_total`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DirectedRelayLabels {
    #[prometheus(flatten)]
    pub relay: RelayLabels,
    pub direction: Direction,
}

/// [`RelayLabels`] and why a connection was turned away
/// (`kubeproxy_rs_userspace_refused_total`: `limit`, `no-endpoint`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RefusedRelayLabels {
    #[prometheus(flatten)]
    pub relay: RelayLabels,
    pub reason: &'static str,
}

/// One series of client-go's `rest_client_requests_total`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct RestClientLabels {
    pub code: String,
    pub host: String,
    pub method: String,
}
