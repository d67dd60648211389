//! Services and EndpointSlices as the proxy decodes them: only the fields the tracker reads.
//!
//! Why not k8s-openapi's types: every object of every list is decoded, and what it decodes into
//! is what the tracker folds in. k8s-openapi's `EndpointSlice` endpoint holds every field of the
//! API (`targetRef`, `deprecatedTopology` and `hostname` among them) and its `Service` more, and
//! each object's `managedFields` and `kubectl.kubernetes.io/last-applied-configuration`
//! annotation, which real clusters carry on most objects, decode into kilobytes the proxy
//! never reads. These types keep the API's field names and k8s-openapi's types for the parts
//! the tracker reads, so its conversions read the same paths, and skip the rest while
//! decoding (serde parses a skipped field without allocating for it).
//!
//! They are kube-rs resources (through k8s-openapi's `Resource` and `Metadata` traits), so the
//! watchers list and watch them directly. Values built as k8s-openapi objects (tests, the
//! manifest builders) convert with `From`, through the same JSON decoding the API server's
//! objects take.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, ServicePort, SessionAffinityConfig};
use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointHints, EndpointPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// The labels the proxy reads; the others are dropped while decoding. A label or annotation
/// the tracker starts reading must be added here (or to [`KEPT_ANNOTATIONS`]).
pub(crate) const KEPT_LABELS: [&str; 3] = [
    crate::cluster::service::LABEL_SERVICE_PROXY_NAME,
    crate::cluster::endpoints::LABEL_SERVICE_NAME,
    crate::cluster::endpoints::LABEL_HEADLESS,
];

/// The annotations the proxy reads. Real objects carry others, `kubectl apply`'s copy of the
/// whole object among them, often kilobytes.
pub(crate) const KEPT_ANNOTATIONS: [&str; 4] = [
    crate::cluster::endpoints::ANNOTATION_TRIGGER_TIME,
    crate::cluster::service::ANNOTATION_SOURCE_RANGES,
    crate::cluster::scheduler_annotation::ANNOTATION,
    crate::cluster::scheduler_annotation::ANNOTATION_FLAGS,
];

/// A Service: what the tracker reads of `core/v1` Service.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct Service {
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<ServiceSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ServiceStatus>,
}

/// The parts of a Service's spec that decide how it is proxied.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(rename = "clusterIP", default, skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<String>,
    #[serde(
        rename = "clusterIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_ips: Option<Vec<String>>,
    #[serde(
        rename = "externalIPs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub external_ips: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ServicePort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_node_port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_source_ranges: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocate_load_balancer_node_ports: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
}

/// A Service's status: its load balancer's ingress points (the LoadBalancer IPs).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

/// An EndpointSlice: what the tracker reads of `discovery/v1` EndpointSlice.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    #[serde(default, deserialize_with = "lean_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "null_as_default")]
    pub address_type: String,
    #[serde(default, deserialize_with = "null_as_default")]
    pub endpoints: Vec<Endpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<EndpointPort>>,
}

/// One endpoint of a slice, without `targetRef`, `hostname` and `deprecatedTopology`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    #[serde(default, deserialize_with = "null_as_default")]
    pub addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<EndpointConditions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<EndpointHints>,
}

/// A required field sent as `null` (the API server encodes a slice without endpoints as
/// `"endpoints": null`), read as its empty value, as k8s-openapi reads it.
fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The metadata the proxy reads: identity, resource version (the watchers resume from it),
/// the labels and annotations it reads, deletion. `managedFields`, `ownerReferences`,
/// `finalizers` and the rest are skipped while decoding. Each object's label and annotation
/// maps cost over a kilobyte once decoded (a B-tree node of eleven entries), for keys the proxy
/// never looks up.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<Kept<KeptLabels>>,
    annotations: Option<Kept<KeptAnnotations>>,
    deletion_timestamp: Option<Time>,
}

fn lean_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = LeanMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        labels: m.labels.and_then(Kept::into_map),
        annotations: m.annotations.and_then(Kept::into_map),
        deletion_timestamp: m.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// Which keys a [`Kept`] map keeps.
trait Keys {
    const KEYS: &'static [&'static str];
}

struct KeptLabels;
impl Keys for KeptLabels {
    const KEYS: &'static [&'static str] = &KEPT_LABELS;
}

struct KeptAnnotations;
impl Keys for KeptAnnotations {
    const KEYS: &'static [&'static str] = &KEPT_ANNOTATIONS;
}

/// A string map decoded keeping only the entries whose keys `K` names: the others are
/// parsed and dropped one by one, never held.
struct Kept<K> {
    entries: Vec<(String, String)>,
    keys: PhantomData<K>,
}

impl<K> Kept<K> {
    /// The kept entries, `None` when there are none (as the API omits an empty map).
    fn into_map(self) -> Option<BTreeMap<String, String>> {
        (!self.entries.is_empty()).then(|| self.entries.into_iter().collect())
    }
}

impl<'de, K: Keys> Deserialize<'de> for Kept<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(Entries::<K>(PhantomData))
    }
}

/// Visits a map's entries, keeping those `K` names.
struct Entries<K>(PhantomData<K>);

impl<'de, K: Keys> Visitor<'de> for Entries<K> {
    type Value = Kept<K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept<K>, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key_seed(KeyOf::<K>(PhantomData))? {
            match key {
                Some(key) => entries.push((key, map.next_value()?)),
                // Checked to be a string, as the whole map would be, and not kept.
                None => {
                    map.next_value::<AnyStr>()?;
                }
            }
        }
        Ok(Kept {
            entries,
            keys: PhantomData,
        })
    }
}

/// A key, owned when `K` keeps it; others are only looked at.
struct KeyOf<K>(PhantomData<K>);

impl<'de, K: Keys> DeserializeSeed<'de> for KeyOf<K> {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<K: Keys> Visitor<'_> for KeyOf<K> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Option<String>, E> {
        Ok(K::KEYS.contains(&v).then(|| v.to_owned()))
    }
}

/// Any string, not kept.
struct AnyStr;

impl<'de> Deserialize<'de> for AnyStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyStr, D::Error> {
        d.deserialize_str(AnyStr)
    }
}

impl Visitor<'_> for AnyStr {
    type Value = AnyStr;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<AnyStr, E> {
        Ok(AnyStr)
    }
}

/// The same kube-rs identity as k8s-openapi's type `$full`.
macro_rules! resource {
    ($lean:ty, $full:ty) => {
        impl k8s_openapi::Resource for $lean {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::ListableResource for $lean {
            const LIST_KIND: &'static str = <$full as k8s_openapi::ListableResource>::LIST_KIND;
        }

        impl k8s_openapi::Metadata for $lean {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        /// Through the JSON the API server would send, so a value built in full decodes as
        /// the API server's objects do.
        impl From<$full> for $lean {
            fn from(full: $full) -> $lean {
                reencode(&full)
            }
        }
    };
}

resource!(Service, k8s_openapi::api::core::v1::Service);
resource!(
    EndpointSlice,
    k8s_openapi::api::discovery::v1::EndpointSlice
);

/// `from` as JSON, decoded as `T`. Every field these types keep has k8s-openapi's own type, so
/// a value k8s-openapi encodes always decodes here.
fn reencode<F: Serialize, T: DeserializeOwned>(from: &F) -> T {
    serde_json::to_value(from)
        .and_then(serde_json::from_value)
        .expect("the lean types decode every object k8s-openapi encodes")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An EndpointSlice as a real API server sends it, with the fields the proxy skips.
    const SLICE: &str = r#"{
        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
        "metadata": {
            "name": "web-abcde", "namespace": "shop", "uid": "1c2d", "resourceVersion": "42",
            "generateName": "web-", "generation": 3,
            "labels": {"kubernetes.io/service-name": "web", "app": "web",
                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
            "annotations": {
                "endpoints.kubernetes.io/last-change-trigger-time": "2026-12-05T06:00:00Z",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"a\":\"very long\"}"
            },
            "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                 "uid": "9f", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                               "apiVersion": "discovery.k8s.io/v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:endpoints": {}}}]
        },
        "addressType": "IPv4",
        "endpoints": [{
            "addresses": ["10.1.0.5"],
            "conditions": {"ready": true, "serving": true, "terminating": false},
            "hostname": "web-0", "nodeName": "node-a", "zone": "z1",
            "hints": {"forZones": [{"name": "z1"}]},
            "targetRef": {"kind": "Pod", "namespace": "shop", "name": "web-0", "uid": "77"},
            "deprecatedTopology": {"kubernetes.io/hostname": "node-a"}
        }],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
    }"#;

    #[test]
    fn a_slice_keeps_what_the_tracker_reads_and_drops_the_rest() {
        let s: EndpointSlice = serde_json::from_str(SLICE).unwrap();
        assert_eq!(s.metadata.name.as_deref(), Some("web-abcde"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(s.metadata.resource_version.as_deref(), Some("42"));
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(
            labels.iter().collect::<Vec<_>>(),
            [(
                &"kubernetes.io/service-name".to_string(),
                &"web".to_string()
            )]
        );
        let annotations = s.metadata.annotations.as_ref().unwrap();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["endpoints.kubernetes.io/last-change-trigger-time"]
        );
        assert!(s.metadata.managed_fields.is_none());
        assert!(
            serde_json::from_str::<EndpointSlice>(r#"{"metadata": {"labels": {"a": 1}}}"#).is_err(),
            "a label that is not a string is refused, as k8s-openapi refuses it"
        );
        assert!(s.metadata.owner_references.is_none());
        assert_eq!(s.address_type, "IPv4");
        let ep = &s.endpoints[0];
        assert_eq!(ep.addresses, ["10.1.0.5"]);
        assert_eq!(ep.node_name.as_deref(), Some("node-a"));
        assert_eq!(ep.zone.as_deref(), Some("z1"));
        assert_eq!(ep.conditions.as_ref().unwrap().ready, Some(true));
        assert_eq!(
            ep.hints.as_ref().unwrap().for_zones.as_ref().unwrap()[0].name,
            "z1"
        );
        assert_eq!(s.ports.as_ref().unwrap()[0].port, Some(8080));
    }

    #[test]
    fn a_slice_without_endpoints_may_say_null() {
        let json = r#"{"metadata": {"name": "web-abcde", "namespace": "shop"},
                       "addressType": "IPv4", "endpoints": null, "ports": null}"#;
        let lean: EndpointSlice = serde_json::from_str(json).unwrap();
        assert!(lean.endpoints.is_empty() && lean.ports.is_none());
        let full: k8s_openapi::api::discovery::v1::EndpointSlice =
            serde_json::from_str(json).unwrap();
        assert_eq!(EndpointSlice::from(full), lean);
        let endpoint: Endpoint = serde_json::from_str(r#"{"addresses": null}"#).unwrap();
        assert!(endpoint.addresses.is_empty());
    }

    #[test]
    fn a_full_slice_converts_to_what_its_json_decodes_to() {
        let full: k8s_openapi::api::discovery::v1::EndpointSlice =
            serde_json::from_str(SLICE).unwrap();
        let decoded: EndpointSlice = serde_json::from_str(SLICE).unwrap();
        assert_eq!(EndpointSlice::from(full), decoded);
    }

    #[test]
    fn a_service_keeps_the_api_spellings_of_its_fields() {
        let json = r#"{
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"},
                         "annotations": {"ipvs.kube-proxy-rs.io/scheduler": "mh",
                                         "example.com/owner": "team-a"}},
            "spec": {
                "type": "LoadBalancer", "clusterIP": "10.0.0.1",
                "clusterIPs": ["10.0.0.1", "fd00::1"], "externalIPs": ["192.0.2.1"],
                "ipFamilies": ["IPv4", "IPv6"], "selector": {"app": "web"},
                "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}],
                "sessionAffinity": "ClientIP",
                "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Cluster",
                "healthCheckNodePort": 31000, "loadBalancerSourceRanges": ["203.0.113.0/24"],
                "allocateLoadBalancerNodePorts": false, "trafficDistribution": "PreferClose"
            },
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7", "ipMode": "VIP"}]}}
        }"#;
        let s: Service = serde_json::from_str(json).unwrap();
        assert_eq!(s.metadata.labels, None, "no label the proxy reads");
        assert_eq!(
            s.metadata.annotations,
            Some([("ipvs.kube-proxy-rs.io/scheduler".into(), "mh".into())].into())
        );
        let spec = s.spec.as_ref().unwrap();
        assert_eq!(spec.type_.as_deref(), Some("LoadBalancer"));
        assert_eq!(spec.cluster_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(spec.cluster_ips.as_ref().unwrap().len(), 2);
        assert_eq!(spec.external_ips.as_ref().unwrap(), &["192.0.2.1"]);
        assert_eq!(spec.ports.as_ref().unwrap()[0].node_port, Some(30080));
        assert_eq!(spec.session_affinity.as_deref(), Some("ClientIP"));
        let timeout = spec.session_affinity_config.as_ref().unwrap();
        assert_eq!(
            timeout.client_ip.as_ref().unwrap().timeout_seconds,
            Some(60)
        );
        assert_eq!(spec.external_traffic_policy.as_deref(), Some("Local"));
        assert_eq!(spec.internal_traffic_policy.as_deref(), Some("Cluster"));
        assert_eq!(spec.health_check_node_port, Some(31000));
        assert_eq!(
            spec.load_balancer_source_ranges.as_ref().unwrap(),
            &["203.0.113.0/24"]
        );
        assert_eq!(spec.allocate_load_balancer_node_ports, Some(false));
        assert_eq!(spec.traffic_distribution.as_deref(), Some("PreferClose"));
        let ingress = s.status.unwrap().load_balancer.unwrap().ingress.unwrap();
        assert_eq!(ingress[0].ip.as_deref(), Some("198.51.100.7"));
        let full: k8s_openapi::api::core::v1::Service = serde_json::from_str(json).unwrap();
        assert_eq!(
            Service::from(full),
            serde_json::from_str::<Service>(json).unwrap()
        );
    }
}
