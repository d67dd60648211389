//! A Service object → the service ports the proxy programs, and why a Service is ignored or refused.
//!
//! Pure: no I/O, never panics. Follows upstream's documented rules (Kubernetes "Virtual IPs and
//! Service Proxies", KEP-1860 for ipMode, KEP-2086 for internalTrafficPolicy) in our own code:
//! - ignored: Services labelled `service.kubernetes.io/service-proxy-name` (another proxy owns
//!   them), headless Services (no ClusterIP), and ExternalName Services;
//! - a whole Service is refused (with a warning) when its name, a ClusterIP or its affinity timeout
//!   is invalid; a bad port, externalIP, LoadBalancer IP or source range is dropped on its own.
//! - Fail closed on source ranges: when ranges were given but none of a family is valid, that
//!   family's LoadBalancer IPs are dropped rather than opened to everyone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::interner::Interner;
use super::limits::{self, shown};
use super::model::{
    IpFamily, Protocol, ServiceKey, ServicePort, ServicePortName, ServiceType, TrafficDistribution,
    TrafficPolicy,
};
use super::scheduler_annotation;
use super::source::lean::Service;
use super::warning::{EventTarget, Warning};

/// Label that hands a Service to another service proxy.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// Legacy annotation carrying source ranges when `spec.loadBalancerSourceRanges` is empty.
pub const ANNOTATION_SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// Default ClientIP affinity timeout (3 hours), and the API's upper bound (1 day).
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
pub const MAX_AFFINITY_TIMEOUT: u32 = 86_400;

/// A Service as the proxy understands it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedService {
    pub key: ServiceKey,
    pub ports: Vec<ServicePort>,
    /// At most one per family, in the Service's order.
    pub cluster_ips: Vec<IpAddr>,
    pub external_ips: Vec<IpAddr>,
    pub load_balancer_ips: Vec<IpAddr>,
    pub source_ranges: Vec<IpNet>,
}

/// Why a Service is deliberately not proxied (not an error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    ServiceProxyName,
    Headless,
    ExternalName,
}

impl Ignored {
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::ServiceProxyName => "labelled service.kubernetes.io/service-proxy-name",
            Ignored::Headless => "headless (no ClusterIP)",
            Ignored::ExternalName => "type ExternalName",
        }
    }
}

/// The result of converting one Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Converted {
    Proxied(ParsedService),
    Ignored(ServiceKey, Ignored),
    /// Invalid; a warning says why. Carries the key when one could be read.
    Refused(Option<ServiceKey>),
}

/// Converts a Service, appending a warning for everything refused. Namespace, name and port names
/// are shared through `names` with the Service's slices.
pub fn convert(svc: &Service, names: &mut Interner, warnings: &mut Vec<Warning>) -> Converted {
    let meta = &svc.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or("");
    // Ours, parsed before `warn` borrows `warnings`: its warning also becomes an Event.
    let ipvs_scheduler = match scheduler_annotation::parse(meta.annotations.as_ref()) {
        Ok(choice) => choice,
        Err(why) => {
            let mut w = Warning::new(
                &format!("service {}/{}", shown_name(namespace), shown_name(name)),
                why.to_string(),
            );
            let named = limits::is_dns_label(namespace) && limits::is_dns_label(name);
            w.event = named.then(|| EventTarget {
                kind: "Service",
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: meta.uid.clone().filter(|u| limits::is_uid(u)),
                reason: scheduler_annotation::EVENT_REASON,
            });
            warnings.push(w);
            None
        }
    };
    // The object's label is only built when there is something to say: this runs for every
    // Service on every relist.
    let mut warn = |message: String| {
        let object = format!("service {}/{}", shown_name(namespace), shown_name(name));
        warnings.push(Warning::new(&object, message));
    };

    if !limits::is_dns_label(namespace) || !limits::is_dns_label(name) {
        warn("invalid namespace or name: must be DNS labels".to_string());
        return Converted::Refused(None);
    }
    let key = ServiceKey {
        namespace: names.get(namespace),
        name: names.get(name),
    };
    if meta
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_SERVICE_PROXY_NAME))
    {
        return Converted::Ignored(key, Ignored::ServiceProxyName);
    }
    let Some(spec) = &svc.spec else {
        warn("no spec".to_string());
        return Converted::Refused(Some(key));
    };
    let service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIP,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => return Converted::Ignored(key, Ignored::ExternalName),
        Some(other) => {
            warn(format!(
                "spec.type {} is not ClusterIP, NodePort, LoadBalancer or ExternalName",
                shown(other)
            ));
            return Converted::Refused(Some(key));
        }
    };

    // ClusterIPs: `clusterIPs` when set, else the legacy single `clusterIP`.
    let raw_ips: Vec<&str> = match &spec.cluster_ips {
        Some(ips) if !ips.is_empty() => ips.iter().map(String::as_str).collect(),
        _ => spec.cluster_ip.as_deref().into_iter().collect(),
    };
    if raw_ips.is_empty() || raw_ips.iter().any(|ip| ip.is_empty() || *ip == "None") {
        return Converted::Ignored(key, Ignored::Headless);
    }
    let mut cluster_ips: Vec<IpAddr> = Vec::new();
    for raw in raw_ips.iter().take(2) {
        let Ok(ip) = raw.parse::<IpAddr>() else {
            warn(format!(
                "spec.clusterIPs: {} is not an IP address",
                shown(raw)
            ));
            return Converted::Refused(Some(key));
        };
        if cluster_ips
            .iter()
            .any(|c| IpFamily::of(c) == IpFamily::of(&ip))
        {
            warn(format!(
                "spec.clusterIPs: second {} address {ip} ignored",
                IpFamily::of(&ip)
            ));
            continue;
        }
        cluster_ips.push(ip);
    }

    let affinity_timeout_seconds = match spec.session_affinity.as_deref() {
        Some("ClientIP") => {
            let timeout = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .map_or(Ok(DEFAULT_AFFINITY_TIMEOUT), |t| {
                    u32::try_from(t)
                        .ok()
                        .filter(|t| (1..=MAX_AFFINITY_TIMEOUT).contains(t))
                        .ok_or(t)
                });
            match timeout {
                Ok(t) => Some(t),
                Err(t) => {
                    warn(format!(
                        "spec.sessionAffinityConfig.clientIP.timeoutSeconds {t} is outside 1..={MAX_AFFINITY_TIMEOUT}"
                    ));
                    return Converted::Refused(Some(key));
                }
            }
        }
        _ => None,
    };

    // Upstream's rule for which Services the external policy applies to: NodePort and
    // LoadBalancer Services, and ClusterIP Services with externalIPs.
    let externally_accessible = match service_type {
        ServiceType::NodePort | ServiceType::LoadBalancer => true,
        ServiceType::ClusterIP => spec
            .external_ips
            .as_ref()
            .is_some_and(|ips| !ips.is_empty()),
    };
    let external_policy = match spec.external_traffic_policy.as_deref() {
        Some("Local") if externally_accessible => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let internal_policy = match spec.internal_traffic_policy.as_deref() {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let health_check_node_port = match spec.health_check_node_port {
        Some(p)
            if service_type == ServiceType::LoadBalancer
                && external_policy == TrafficPolicy::Local =>
        {
            match port_number(p) {
                Some(p) => Some(p),
                None => {
                    warn(format!(
                        "spec.healthCheckNodePort {p} is outside 1..=65535; no health check server"
                    ));
                    None
                }
            }
        }
        _ => None,
    };
    let traffic_distribution = spec.traffic_distribution.as_deref().map(|d| match d {
        "PreferClose" => TrafficDistribution::PreferClose,
        "PreferSameZone" => TrafficDistribution::PreferSameZone,
        "PreferSameNode" => TrafficDistribution::PreferSameNode,
        other => TrafficDistribution::Other(other.chars().take(limits::MAX_LABEL).collect()),
    });

    let spec_ports = spec.ports.as_deref().unwrap_or(&[]);
    if spec_ports.len() > limits::MAX_SERVICE_PORTS {
        warn(format!(
            "{} ports, more than the {} accepted",
            spec_ports.len(),
            limits::MAX_SERVICE_PORTS
        ));
        return Converted::Refused(Some(key));
    }
    let mut seen = BTreeSet::new();
    let mut seen_numbers = BTreeMap::new();
    let mut ports = Vec::with_capacity(spec_ports.len());
    for (i, sp) in spec_ports.iter().enumerate() {
        let port_name = sp.name.as_deref().unwrap_or("");
        if !limits::is_port_name(port_name) {
            warn(format!(
                "spec.ports[{i}].name {} is not a DNS label; port skipped",
                shown(port_name)
            ));
            continue;
        }
        let Some(protocol) = Protocol::parse(sp.protocol.as_deref()) else {
            warn(format!(
                "spec.ports[{i}].protocol {} is not TCP, UDP or SCTP; port skipped",
                shown(sp.protocol.as_deref().unwrap_or(""))
            ));
            continue;
        };
        let Some(port) = port_number(sp.port) else {
            warn(format!(
                "spec.ports[{i}].port {} is outside 1..=65535; port skipped",
                sp.port
            ));
            continue;
        };
        let node_port = match sp.node_port {
            None | Some(0) => None,
            Some(n) => match port_number(n) {
                Some(n) if service_type != ServiceType::ClusterIP => Some(n),
                Some(_) => None,
                None => {
                    warn(format!(
                        "spec.ports[{i}].nodePort {n} is outside 1..=65535; port skipped"
                    ));
                    continue;
                }
            },
        };
        if seen.contains(&(port_name, protocol)) {
            warn(format!(
                "spec.ports[{i}]: duplicate port {} {protocol}; skipped",
                shown(port_name)
            ));
            continue;
        }
        // The API server refuses two ports with one (port, protocol); a manifest is not checked
        // by it, so the first such port wins here.
        if let Some(first) = seen_numbers.get(&(port, protocol)) {
            warn(format!(
                "spec.ports[{i}] {}: port {port}/{protocol} duplicates spec.ports[{first}]; skipped",
                shown(port_name)
            ));
            continue;
        }
        seen.insert((port_name, protocol));
        seen_numbers.insert((port, protocol), i);
        ports.push(ServicePort {
            name: ServicePortName {
                service: key.clone(),
                port: names.get(port_name),
                protocol,
            },
            service_type,
            port,
            node_port,
            affinity_timeout_seconds,
            internal_policy,
            external_policy,
            health_check_node_port,
            traffic_distribution: traffic_distribution.clone(),
            allocate_load_balancer_node_ports: spec
                .allocate_load_balancer_node_ports
                .unwrap_or(true),
            ipvs_scheduler,
        });
    }

    let external_ips = parse_ips(
        spec.external_ips.as_deref().unwrap_or(&[]),
        "spec.externalIPs",
        &mut warn,
    );
    let mut load_balancer_ips = Vec::new();
    let mut source_ranges = Vec::new();
    if service_type == ServiceType::LoadBalancer {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_deref())
            .unwrap_or(&[]);
        let vips: Vec<String> = ingress
            .iter()
            .filter(|i| matches!(i.ip_mode.as_deref(), None | Some("VIP")))
            .filter_map(|i| i.ip.clone())
            .collect();
        load_balancer_ips = parse_ips(&vips, "status.loadBalancer.ingress", &mut warn);

        let annotated: Vec<String>;
        let raw_ranges: &[String] = match spec.load_balancer_source_ranges.as_deref() {
            Some(r) if !r.is_empty() => r,
            _ => {
                annotated = meta
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_SOURCE_RANGES))
                    .map(|v| {
                        v.split(',')
                            .map(|s| s.trim().to_string())
                            .filter(|s| !s.is_empty())
                            .collect()
                    })
                    .unwrap_or_default();
                &annotated
            }
        };
        for raw in raw_ranges.iter().take(limits::MAX_SERVICE_ADDRESSES) {
            match raw.trim().parse::<IpNet>() {
                Ok(net) => source_ranges.push(net.trunc()),
                Err(_) => warn(format!(
                    "loadBalancerSourceRanges: {} is not a CIDR; skipped",
                    shown(raw)
                )),
            }
        }
        if !raw_ranges.is_empty() {
            load_balancer_ips.retain(|ip| {
                let family = IpFamily::of(ip);
                let open = source_ranges.iter().any(|n| IpFamily::of_net(n) == family);
                if !open {
                    warn(format!(
                        "loadBalancer IP {ip} dropped: source ranges were given but none valid for {family}"
                    ));
                }
                open
            });
        }
    }

    Converted::Proxied(ParsedService {
        key,
        ports,
        cluster_ips,
        external_ips,
        load_balancer_ips,
        source_ranges,
    })
}

fn port_number(p: i32) -> Option<u16> {
    u16::try_from(p).ok().filter(|p| *p != 0)
}

fn parse_ips(raw: &[String], field: &str, warn: &mut impl FnMut(String)) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    for s in raw.iter().take(limits::MAX_SERVICE_ADDRESSES) {
        match s.trim().parse::<IpAddr>() {
            Ok(ip) if !ips.contains(&ip) => ips.push(ip),
            Ok(_) => {}
            Err(_) => warn(format!(
                "{field}: {} is not an IP address; skipped",
                shown(s)
            )),
        }
    }
    if raw.len() > limits::MAX_SERVICE_ADDRESSES {
        warn(format!(
            "{field}: only the first {} addresses used",
            limits::MAX_SERVICE_ADDRESSES
        ));
    }
    ips
}

/// A name for a warning: the name itself when it is tame, else quoted and escaped.
pub(crate) fn shown_name(s: &str) -> String {
    if s.len() <= limits::MAX_SUBDOMAIN
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        s.to_string()
    } else {
        shown(s)
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
