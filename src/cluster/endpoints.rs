//! EndpointSlices → the endpoints of each service port, merged across all slices of a Service.
//!
//! Pure: no I/O, never panics. The rules, from the EndpointSlice API documentation and KEP-0752:
//! - a slice belongs to the Service named by its `kubernetes.io/service-name` label; slices
//!   labelled `service.kubernetes.io/headless` and FQDN slices are ignored;
//! - an endpoint's address is its first address, which must be of the slice's address type;
//! - a slice port is matched to a service port by name and protocol; its number is the endpoint's
//!   target port, so a Service whose pods expose different ports gets them per slice;
//! - conditions default as the API says and upstream reads them: ready nil → true, serving
//!   nil → true, terminating nil → false;
//! - the same address and port in several slices is one endpoint, the ready copy preferred.

use std::net::IpAddr;
use std::sync::Arc;

use super::interner::Interner;
use super::limits::{self, shown};
use super::model::{Endpoint, IpFamily, Placement, Protocol, ServiceKey};
use super::service::shown_name;
use super::source::lean::EndpointSlice;
use super::warning::Warning;

/// Label naming the Service a slice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label on slices of headless Services; the proxy ignores them.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Annotation with the time the change behind this slice version happened, for the network
/// programming latency metric.
pub const ANNOTATION_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// One port of a slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    pub name: Arc<str>,
    pub protocol: Protocol,
    pub port: u16,
}

/// One endpoint of a slice, before it is matched to service ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceEndpoint {
    pub ip: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub placement: Arc<Placement>,
}

/// An EndpointSlice as the proxy understands it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedSlice {
    pub service: ServiceKey,
    pub name: Arc<str>,
    pub family: IpFamily,
    pub ports: Vec<SlicePort>,
    pub endpoints: Vec<SliceEndpoint>,
    /// `endpoints.kubernetes.io/last-change-trigger-time`, as written (RFC 3339).
    pub trigger_time: Option<String>,
}

/// The result of converting one slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Converted {
    Proxied(ParsedSlice),
    /// Deliberately not proxied (headless, FQDN).
    Ignored,
    /// Invalid; a warning says why.
    Refused,
}

/// Converts a slice, appending a warning for everything refused.
/// Repeated strings (node names, zones, hints) and placements are shared through `names`.
pub fn convert(
    slice: &EndpointSlice,
    names: &mut Interner,
    warnings: &mut Vec<Warning>,
) -> Converted {
    let meta = &slice.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or("");
    let mut warn = |message: String| {
        let object = format!(
            "endpointslice {}/{}",
            shown_name(namespace),
            shown_name(name)
        );
        warnings.push(Warning::new(&object, message));
    };

    let labels = meta.labels.as_ref();
    if labels.is_some_and(|l| l.contains_key(LABEL_HEADLESS)) {
        return Converted::Ignored;
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Converted::Ignored,
        other => {
            warn(format!(
                "addressType {} is not IPv4, IPv6 or FQDN",
                shown(other)
            ));
            return Converted::Refused;
        }
    };
    if !limits::is_dns_label(namespace) || !limits::is_dns_subdomain(name) {
        warn("invalid namespace or name".to_string());
        return Converted::Refused;
    }
    let Some(service) = labels.and_then(|l| l.get(LABEL_SERVICE_NAME)) else {
        warn(format!("no {LABEL_SERVICE_NAME} label"));
        return Converted::Refused;
    };
    if !limits::is_dns_label(service) {
        warn(format!(
            "label {LABEL_SERVICE_NAME} {} is not a Service name",
            shown(service)
        ));
        return Converted::Refused;
    }
    let raw_ports = slice.ports.as_deref().unwrap_or(&[]);
    if raw_ports.len() > limits::MAX_SLICE_PORTS
        || slice.endpoints.len() > limits::MAX_SLICE_ENDPOINTS
    {
        warn(format!(
            "{} ports and {} endpoints, more than the API allows ({} and {})",
            raw_ports.len(),
            slice.endpoints.len(),
            limits::MAX_SLICE_PORTS,
            limits::MAX_SLICE_ENDPOINTS
        ));
        return Converted::Refused;
    }

    let mut ports = Vec::with_capacity(raw_ports.len());
    for (i, p) in raw_ports.iter().enumerate() {
        let port_name = p.name.as_deref().unwrap_or("");
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            warn(format!(
                "ports[{i}].protocol {} is not TCP, UDP or SCTP; skipped",
                shown(p.protocol.as_deref().unwrap_or(""))
            ));
            continue;
        };
        if !limits::is_port_name(port_name) {
            warn(format!(
                "ports[{i}].name {} is not a DNS label; skipped",
                shown(port_name)
            ));
            continue;
        }
        match p
            .port
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n != 0)
        {
            Some(port) => ports.push(SlicePort {
                name: names.get(port_name),
                protocol,
                port,
            }),
            None => warn(format!(
                "ports[{i}].port {} is not in 1..=65535; skipped",
                p.port
                    .map_or_else(|| "(none)".to_string(), |n| n.to_string())
            )),
        }
    }

    let mut endpoints = Vec::with_capacity(slice.endpoints.len());
    for (i, ep) in slice.endpoints.iter().enumerate() {
        let Some(first) = ep.addresses.first() else {
            warn(format!("endpoints[{i}] has no address; skipped"));
            continue;
        };
        let ip = match first.parse::<IpAddr>() {
            Ok(ip) if IpFamily::of(&ip) == family => ip,
            Ok(ip) => {
                warn(format!(
                    "endpoints[{i}] address {ip} is not {family}; skipped"
                ));
                continue;
            }
            Err(_) => {
                warn(format!(
                    "endpoints[{i}] address {} is not an IP address; skipped",
                    shown(first)
                ));
                continue;
            }
        };
        let node_name = match ep.node_name.as_deref() {
            Some(n) if !limits::is_dns_subdomain(n) => {
                warn(format!(
                    "endpoints[{i}].nodeName {} is invalid; endpoint skipped",
                    shown(n)
                ));
                continue;
            }
            n => n.map(|n| names.get(n)),
        };
        let zone = match ep.zone.as_deref() {
            Some(z) if !limits::is_label_value(z) => {
                warn(format!(
                    "endpoints[{i}].zone {} is invalid; zone ignored",
                    shown(z)
                ));
                None
            }
            z => z.map(|z| names.get(z)),
        };
        let hints = ep.hints.as_ref();
        let zone_hints = hint_names(
            hints
                .and_then(|h| h.for_zones.as_deref())
                .unwrap_or(&[])
                .iter()
                .map(|z| z.name.as_str()),
            limits::is_label_value,
            names,
        );
        let node_hints = hint_names(
            hints
                .and_then(|h| h.for_nodes.as_deref())
                .unwrap_or(&[])
                .iter()
                .map(|n| n.name.as_str()),
            limits::is_dns_subdomain,
            names,
        );
        let conditions = ep.conditions.as_ref();
        let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
        let serving = conditions.and_then(|c| c.serving).unwrap_or(true);
        let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
        let placement = names.placement(Placement {
            node_name,
            zone,
            zone_hints,
            node_hints,
        });
        endpoints.push(SliceEndpoint {
            ip,
            ready,
            serving,
            terminating,
            placement,
        });
    }

    let trigger_time = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TRIGGER_TIME))
        .filter(|t| t.len() <= 64)
        .cloned();
    Converted::Proxied(ParsedSlice {
        service: ServiceKey {
            namespace: names.get(namespace),
            name: names.get(service),
        },
        name: name.into(),
        family,
        ports,
        endpoints,
        trigger_time,
    })
}

/// Hint names, keeping only valid ones; an invalid hint is dropped silently because hints only
/// narrow traffic and the rest of the list still applies.
fn hint_names<'a>(
    hints: impl Iterator<Item = &'a str>,
    valid: fn(&str) -> bool,
    names: &mut Interner,
) -> Vec<Arc<str>> {
    hints.filter(|n| valid(n)).map(|n| names.get(n)).collect()
}

/// Merges the endpoints of one service port (by port name and protocol) of one family from all
/// of a Service's slices. The result is sorted by address and port, one entry per pair.
pub fn merge<'a>(
    slices: impl IntoIterator<Item = &'a ParsedSlice>,
    port_name: &str,
    protocol: Protocol,
    family: IpFamily,
    node_name: &str,
) -> Vec<Endpoint> {
    let mut merged: Vec<Endpoint> = Vec::new();
    for slice in slices.into_iter().filter(|s| s.family == family) {
        let Some(port) = slice
            .ports
            .iter()
            .find(|p| &*p.name == port_name && p.protocol == protocol)
        else {
            continue;
        };
        for ep in &slice.endpoints {
            let endpoint = Endpoint {
                ip: ep.ip,
                port: port.port,
                ready: ep.ready,
                serving: ep.serving,
                terminating: ep.terminating,
                is_local: ep.placement.node_name.as_deref() == Some(node_name),
                placement: ep.placement.clone(),
            };
            merged.push(endpoint);
        }
    }
    // Stable sort keeps slice order among equal keys; ready copies sort first so `dedup` keeps
    // them.
    merged.sort_by_key(|e| (e.ip, e.port, !e.ready));
    merged.dedup_by(|later, kept| (later.ip, later.port) == (kept.ip, kept.port));
    merged
}

#[cfg(test)]
#[path = "endpoints_tests.rs"]
mod tests;
