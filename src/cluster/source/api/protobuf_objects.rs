//! Services and EndpointSlices decoded from protobuf list items (k8s-pb's types, the kube-rs
//! project's generated protobuf bindings) into the [`lean`]
//! types the JSON path decodes, field for field as the API server's JSON reads.
//!
//! Protobuf and JSON say absence differently. Go fields that are not pointers are always
//! written in protobuf (an empty string, a zero) but left out of JSON when `omitempty` and
//! zero, and protobuf cannot tell an empty list from none: so a zero value of such a field is
//! read as absent here, and an empty list as none, which is what the same object's JSON decodes
//! to. Fields that are pointers in Go keep their presence in both. Only the fields the lean
//! types keep are converted; labels and annotations are filtered to the ones the proxy reads.
//! The test against the real API server (`tests/api_source.rs`) lists the same objects both
//! ways and compares.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::api::discovery::v1 as pb_discovery;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message as _;

use super::protobuf_split::{FieldHeader, MAGIC, field_header};
use crate::cluster::source::lean::{
    self, EndpointSlice, KEPT_ANNOTATIONS, KEPT_LABELS, Service, ServiceSpec, ServiceStatus,
};

/// Why a protobuf item is not an object of its kind.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Protobuf(#[from] prost::DecodeError),
    #[error("deletionTimestamp out of range: {0}")]
    Time(String),
}

/// A kind whose list items can be read from protobuf.
pub trait FromProtobuf: Sized {
    fn from_protobuf(item: &[u8]) -> Result<Self, DecodeError>;
}

impl FromProtobuf for Service {
    fn from_protobuf(item: &[u8]) -> Result<Service, DecodeError> {
        service(pb_core::Service::decode(item)?)
    }
}

impl FromProtobuf for EndpointSlice {
    fn from_protobuf(item: &[u8]) -> Result<EndpointSlice, DecodeError> {
        endpoint_slice(pb_discovery::EndpointSlice::decode(item)?)
    }
}

/// `namespace/name` of an item whose object does not decode, when its metadata (an object's
/// field 1, written first) does.
pub fn name_of(item: &[u8]) -> Option<String> {
    let FieldHeader {
        number: 1,
        len: Some(len),
        size,
    } = field_header(item).ok()??
    else {
        return None;
    };
    let meta = item.get(size..size.checked_add(usize::try_from(len).ok()?)?)?;
    let meta = pb_meta::ObjectMeta::decode(meta).ok()?;
    Some(format!(
        "{}/{}",
        meta.namespace.unwrap_or_default(),
        meta.name.unwrap_or_default()
    ))
}

/// The resourceVersion of a protobuf `ListMeta`.
pub fn list_resource_version(list_meta: &[u8]) -> Option<String> {
    pb_meta::ListMeta::decode(list_meta)
        .ok()?
        .resource_version
        .filter(|v| !v.is_empty())
}

/// The message and reason of an error response's `Status`, from its protobuf body (the same
/// envelope a list comes in).
pub fn status(body: &[u8]) -> Option<(String, String)> {
    let envelope = body.strip_prefix(&MAGIC[..])?;
    let raw = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope)
        .ok()?
        .raw?;
    let status = pb_meta::Status::decode(raw.as_slice()).ok()?;
    Some((
        status.message.unwrap_or_default(),
        status.reason.unwrap_or_default(),
    ))
}

fn service(s: pb_core::Service) -> Result<Service, DecodeError> {
    let spec = s.spec.map(|spec| ServiceSpec {
        type_: non_empty(spec.r#type),
        cluster_ip: non_empty(spec.cluster_ip),
        cluster_ips: non_empty_list(spec.cluster_ips),
        external_ips: non_empty_list(spec.external_ips),
        ports: non_empty_list(spec.ports.into_iter().map(service_port).collect()),
        session_affinity: non_empty(spec.session_affinity),
        session_affinity_config: spec.session_affinity_config.map(|c| {
            core::SessionAffinityConfig {
                client_ip: c.client_ip.map(|ip| core::ClientIPConfig {
                    timeout_seconds: ip.timeout_seconds,
                }),
            }
        }),
        external_traffic_policy: non_empty(spec.external_traffic_policy),
        internal_traffic_policy: spec.internal_traffic_policy,
        health_check_node_port: spec.health_check_node_port.filter(|&p| p != 0),
        load_balancer_source_ranges: non_empty_list(spec.load_balancer_source_ranges),
        allocate_load_balancer_node_ports: spec.allocate_load_balancer_node_ports,
        traffic_distribution: spec.traffic_distribution,
    });
    let status = s.status.map(|status| ServiceStatus {
        load_balancer: status.load_balancer.map(|lb| core::LoadBalancerStatus {
            ingress: non_empty_list(lb.ingress.into_iter().map(ingress).collect()),
        }),
    });
    Ok(Service {
        metadata: metadata(s.metadata)?,
        spec,
        status,
    })
}

fn service_port(p: pb_core::ServicePort) -> core::ServicePort {
    core::ServicePort {
        name: non_empty(p.name),
        protocol: non_empty(p.protocol),
        app_protocol: p.app_protocol,
        port: p.port.unwrap_or_default(),
        target_port: p.target_port.map(|t| match t.r#type {
            Some(1) => IntOrString::String(t.str_val.unwrap_or_default()),
            _ => IntOrString::Int(t.int_val.unwrap_or_default()),
        }),
        node_port: p.node_port.filter(|&p| p != 0),
    }
}

fn ingress(i: pb_core::LoadBalancerIngress) -> core::LoadBalancerIngress {
    core::LoadBalancerIngress {
        ip: non_empty(i.ip),
        hostname: non_empty(i.hostname),
        ip_mode: i.ip_mode,
        ports: non_empty_list(
            i.ports
                .into_iter()
                .map(|p| core::PortStatus {
                    port: p.port.unwrap_or_default(),
                    protocol: p.protocol.unwrap_or_default(),
                    error: p.error,
                })
                .collect(),
        ),
    }
}

fn endpoint_slice(s: pb_discovery::EndpointSlice) -> Result<EndpointSlice, DecodeError> {
    Ok(EndpointSlice {
        metadata: metadata(s.metadata)?,
        address_type: s.address_type.unwrap_or_default(),
        endpoints: s.endpoints.into_iter().map(endpoint).collect(),
        ports: non_empty_list(
            s.ports
                .into_iter()
                .map(|p| discovery::EndpointPort {
                    name: p.name,
                    protocol: p.protocol,
                    port: p.port,
                    app_protocol: p.app_protocol,
                })
                .collect(),
        ),
    })
}

fn endpoint(e: pb_discovery::Endpoint) -> lean::Endpoint {
    lean::Endpoint {
        addresses: e.addresses,
        conditions: e.conditions.map(|c| discovery::EndpointConditions {
            ready: c.ready,
            serving: c.serving,
            terminating: c.terminating,
        }),
        node_name: e.node_name,
        zone: e.zone,
        hints: e.hints.map(|h| discovery::EndpointHints {
            for_zones: non_empty_list(
                h.for_zones
                    .into_iter()
                    .map(|z| discovery::ForZone {
                        name: z.name.unwrap_or_default(),
                    })
                    .collect(),
            ),
            for_nodes: non_empty_list(
                h.for_nodes
                    .into_iter()
                    .map(|n| discovery::ForNode {
                        name: n.name.unwrap_or_default(),
                    })
                    .collect(),
            ),
        }),
    }
}

/// The metadata the lean types keep (see `lean::LeanMeta`).
fn metadata(meta: Option<pb_meta::ObjectMeta>) -> Result<ObjectMeta, DecodeError> {
    let Some(m) = meta else {
        return Ok(ObjectMeta::default());
    };
    let deletion_timestamp = match m.deletion_timestamp {
        Some(t) => Some(time(t)?),
        None => None,
    };
    Ok(ObjectMeta {
        name: non_empty(m.name),
        namespace: non_empty(m.namespace),
        uid: non_empty(m.uid),
        resource_version: non_empty(m.resource_version),
        labels: kept(m.labels, &KEPT_LABELS),
        annotations: kept(m.annotations, &KEPT_ANNOTATIONS),
        deletion_timestamp,
        ..ObjectMeta::default()
    })
}

fn time(t: pb_meta::Time) -> Result<Time, DecodeError> {
    let (seconds, nanos) = (t.seconds.unwrap_or_default(), t.nanos.unwrap_or_default());
    k8s_openapi::jiff::Timestamp::new(seconds, nanos)
        .map(Time)
        .map_err(|e| DecodeError::Time(e.to_string()))
}

fn kept(map: BTreeMap<String, String>, keys: &[&str]) -> Option<BTreeMap<String, String>> {
    let kept: BTreeMap<String, String> = map
        .into_iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// A Go string that JSON leaves out when empty.
fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// A Go slice that JSON leaves out (or writes as `null`) when empty.
fn non_empty_list<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_values_read_as_absent_and_pointers_keep_their_presence() {
        let pb = pb_core::Service {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some("web".into()),
                namespace: Some("shop".into()),
                uid: Some(String::new()),
                labels: [
                    ("app".into(), "web".into()),
                    (
                        crate::cluster::endpoints::LABEL_HEADLESS.into(),
                        String::new(),
                    ),
                ]
                .into(),
                annotations: [(
                    "kubectl.kubernetes.io/last-applied-configuration".into(),
                    "{}".into(),
                )]
                .into(),
                ..Default::default()
            }),
            spec: Some(pb_core::ServiceSpec {
                r#type: Some("ClusterIP".into()),
                cluster_ip: Some("10.0.0.1".into()),
                session_affinity: Some(String::new()),
                health_check_node_port: Some(0),
                internal_traffic_policy: Some(String::new()),
                ports: vec![pb_core::ServicePort {
                    name: Some(String::new()),
                    protocol: Some("TCP".into()),
                    port: Some(80),
                    target_port: Some(k8s_pb::apimachinery::pkg::util::intstr::IntOrString {
                        r#type: Some(1),
                        int_val: Some(0),
                        str_val: Some("http".into()),
                    }),
                    node_port: Some(0),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(pb_core::ServiceStatus {
                load_balancer: Some(pb_core::LoadBalancerStatus::default()),
                ..Default::default()
            }),
        };
        let s = Service::from_protobuf(&pb.encode_to_vec()).unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("web"));
        assert_eq!(s.metadata.uid, None);
        assert_eq!(s.metadata.annotations, None);
        assert_eq!(
            s.metadata.labels.unwrap().keys().collect::<Vec<_>>(),
            [crate::cluster::endpoints::LABEL_HEADLESS]
        );
        let spec = s.spec.unwrap();
        assert_eq!(spec.session_affinity, None);
        assert_eq!(spec.health_check_node_port, None);
        assert_eq!(spec.internal_traffic_policy.as_deref(), Some(""));
        assert_eq!(spec.cluster_ips, None);
        let port = &spec.ports.unwrap()[0];
        assert_eq!((port.name.as_deref(), port.node_port), (None, None));
        assert_eq!(port.target_port, Some(IntOrString::String("http".into())));
        assert_eq!(
            s.status.unwrap().load_balancer,
            Some(core::LoadBalancerStatus { ingress: None })
        );
    }

    #[test]
    fn an_error_status_reads_from_its_envelope() {
        let status = pb_meta::Status {
            message: Some("services is forbidden".into()),
            reason: Some("Forbidden".into()),
            code: Some(403),
            ..Default::default()
        };
        let mut body = MAGIC.to_vec();
        k8s_pb::apimachinery::pkg::runtime::Unknown {
            raw: Some(status.encode_to_vec()),
            ..Default::default()
        }
        .encode(&mut body)
        .unwrap();
        assert_eq!(
            super::status(&body),
            Some(("services is forbidden".into(), "Forbidden".into()))
        );
        assert_eq!(super::status(br#"{"kind":"Status"}"#), None);
    }

    #[test]
    fn an_item_that_is_not_protobuf_is_an_error_and_named_when_its_metadata_reads() {
        assert!(EndpointSlice::from_protobuf(b"\xff\xff\xff").is_err());
        let named = pb_discovery::EndpointSlice {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some("s".into()),
                namespace: Some("n".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut bytes = named.encode_to_vec();
        bytes.extend_from_slice(b"\x12\x05\x0a"); // an endpoint cut short
        assert!(EndpointSlice::from_protobuf(&bytes).is_err());
        assert_eq!(name_of(&bytes).as_deref(), Some("n/s"));
        assert_eq!(name_of(b"\x12\x00"), None, "no metadata first");
    }
}
