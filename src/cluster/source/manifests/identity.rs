//! Which object a manifest describes (kind, namespace, name), how it is named in warnings, and the
//! rule that a later manifest for the same object replaces an earlier one.
//!
//! Pure: no I/O, never fails.

use std::collections::HashMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::warning::{Place, Problem, Warning};
use crate::cluster::source::{Kind, Object};

/// The namespace kubectl gives a namespaced object whose manifest names none.
pub(super) const DEFAULT_NAMESPACE: &str = "default";

/// An object's identity: two manifests with the same key describe the same object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    kind: Kind,
    /// Empty for cluster-scoped kinds (Nodes).
    namespace: String,
    name: String,
}

fn namespaced(kind: Kind) -> bool {
    match kind {
        Kind::Service | Kind::EndpointSlice => true,
        Kind::Node | Kind::ServiceCidr => false,
    }
}

fn meta(object: &Object) -> &ObjectMeta {
    match object {
        Object::Service(s) => &s.metadata,
        Object::EndpointSlice(s) => &s.metadata,
        Object::Node(n) => &n.metadata,
        Object::ServiceCidr(c) => &c.metadata,
    }
}

fn meta_mut(object: &mut Object) -> &mut ObjectMeta {
    match object {
        Object::Service(s) => &mut s.metadata,
        Object::EndpointSlice(s) => &mut s.metadata,
        Object::Node(n) => &mut n.metadata,
        Object::ServiceCidr(c) => &mut c.metadata,
    }
}

/// Gives a namespaced object without a namespace the `default` one, as `kubectl apply` would, so
/// the tracker never sees an object without one.
pub(super) fn default_namespace(object: &mut Object) {
    if namespaced(object.kind()) {
        let namespace = &mut meta_mut(object).namespace;
        if namespace.as_deref().is_none_or(str::is_empty) {
            *namespace = Some(DEFAULT_NAMESPACE.to_owned());
        }
    }
}

/// The object's key, or `None` if it has no name (such an object cannot be tracked).
pub(super) fn key(object: &Object) -> Option<Key> {
    let kind = object.kind();
    let meta = meta(object);
    let name = meta.name.clone().filter(|n| !n.is_empty())?;
    let namespace = if namespaced(kind) {
        meta.namespace.clone().unwrap_or_default()
    } else {
        String::new()
    };
    Some(Key {
        kind,
        namespace,
        name,
    })
}

/// `Kind namespace/name` for a decoded object (after [`default_namespace`]).
pub(super) fn label(object: &Object) -> String {
    let meta = meta(object);
    let name = meta.name.as_deref().unwrap_or("");
    match object.kind() {
        Kind::Node | Kind::ServiceCidr => format!("{} {name}", object.kind().as_str()),
        kind => format!(
            "{} {}/{name}",
            kind.as_str(),
            meta.namespace.as_deref().unwrap_or(DEFAULT_NAMESPACE)
        ),
    }
}

/// `Kind namespace/name` read from a raw document that may not decode, as far as it can be read.
/// Objects of cluster-scoped kinds, and of kinds unknown here, get no invented namespace.
pub(super) fn raw_label(map: &Map<String, Value>) -> Option<String> {
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("object");
    let metadata = map.get("metadata").and_then(Value::as_object)?;
    let name = metadata
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?;
    let namespace = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty());
    Some(match (namespace, kind) {
        (Some(namespace), _) => format!("{kind} {namespace}/{name}"),
        (None, "Service" | "EndpointSlice") => format!("{kind} {DEFAULT_NAMESPACE}/{name}"),
        (None, _) => format!("{kind} {name}"),
    })
}

/// Keeps one object per key: a later one replaces an earlier one in place (so order stays that
/// of first appearance) and yields a warning naming both places.
pub(super) fn dedupe(found: Vec<(Place, Object)>) -> (Vec<Object>, Vec<Warning>) {
    let mut objects: Vec<(Place, Object)> = Vec::with_capacity(found.len());
    let mut index: HashMap<Key, usize> = HashMap::with_capacity(found.len());
    let mut warnings = Vec::new();
    for (place, object) in found {
        // Objects without a name never get here: the parser refuses them.
        let Some(key) = key(&object) else { continue };
        match index.get(&key) {
            Some(&i) => {
                let (earlier, _) = std::mem::replace(&mut objects[i], (place.clone(), object));
                warnings.push(Warning {
                    place,
                    object: Some(label(&objects[i].1)),
                    problem: Problem::Duplicate { earlier },
                });
            }
            None => {
                index.insert(key, objects.len());
                objects.push((place, object));
            }
        }
    }
    (objects.into_iter().map(|(_, o)| o).collect(), warnings)
}
