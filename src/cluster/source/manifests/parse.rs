//! Manifest text → Services, EndpointSlices, Nodes and ServiceCIDRs: the pure half of the manifest source.
//!
//! Pure: no I/O, no clock, no logging. Total: every input, however hostile, yields a [`Parsed`];
//! nothing here panics. Size is bounded by [`MAX_TEXT_BYTES`], nesting and alias expansion by
//! the YAML parser's budget (and serde_json's recursion limit), so a crafted file costs bounded
//! time and memory. It must never let one bad document stop the documents after it.
//!
//! Each document goes YAML (or JSON) → `serde_json::Value` → typed object. The untyped step lets
//! us read `apiVersion`, `kind` and the name before the typed decode, so a document that fails to
//! decode is still reported by name and documents of other kinds are skipped without decoding.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use serde_json::{Map, Value};

use super::identity::{self, default_namespace, raw_label};
use super::split::split;
use super::warning::{Place, Problem, Skipped, Warning};
use crate::cluster::source::lean::{EndpointSlice, Service};
use crate::cluster::source::{Kind, Object};

/// Largest text [`parse`] accepts, in bytes. The API server refuses requests over 3 MiB, so this
/// leaves room for files holding many objects while bounding what one file can cost.
pub const MAX_TEXT_BYTES: usize = 64 * 1024 * 1024;

/// Deepest nesting of mappings and sequences accepted in one document (serde_json's own limit);
/// real objects of our kinds nest less than 10 deep.
const MAX_DEPTH: usize = 128;

/// What one text held.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// Our objects in document order, namespaced ones with a namespace, at most one per
    /// (kind, namespace, name): a later document replaces an earlier one, with a warning.
    pub objects: Vec<Object>,
    pub warnings: Vec<Warning>,
    /// Documents of other kinds, skipped on purpose (see the module doc of `manifests`).
    pub skipped: Vec<Skipped>,
}

/// Reads every document of `text`; `origin` names the text in warnings (a file path).
pub fn parse(text: &str, origin: &str) -> Parsed {
    let found = parse_found(text, origin);
    let (objects, duplicates) = identity::dedupe(found.objects);
    let mut warnings = found.warnings;
    warnings.extend(duplicates);
    Parsed {
        objects,
        warnings,
        skipped: found.skipped,
    }
}

/// Objects with the place each came from, before duplicates are resolved: the directory loader
/// resolves them across all files at once.
#[derive(Default)]
pub(super) struct Found {
    pub objects: Vec<(Place, Object)>,
    pub warnings: Vec<Warning>,
    pub skipped: Vec<Skipped>,
}

impl Found {
    fn warn(&mut self, place: Place, object: Option<String>, problem: Problem) {
        self.warnings.push(Warning {
            place,
            object,
            problem,
        });
    }
}

pub(super) fn parse_found(text: &str, origin: &str) -> Found {
    let mut found = Found::default();
    if text.len() > MAX_TEXT_BYTES {
        let problem = Problem::TooLarge {
            len: text.len(),
            max: MAX_TEXT_BYTES,
        };
        found.warn(Place::text(origin), None, problem);
        return found;
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim_start().starts_with('{') {
        parse_json(text, origin, &mut found);
    } else {
        parse_yaml(text, origin, &mut found);
    }
    found
}

/// A JSON text: one or more concatenated values. JSON has no document separators to resync on,
/// so a syntax error ends the text; values before it are kept.
fn parse_json(text: &str, origin: &str, found: &mut Found) {
    let values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    for (i, value) in values.enumerate() {
        let place = Place::document(origin, i + 1);
        match value {
            Ok(value) => read_document(value, place, found),
            Err(e) => {
                found.warn(place, None, Problem::Json(e.to_string()));
                return;
            }
        }
    }
}

fn yaml_options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    // MAX_TEXT_BYTES bounds these already; the defaults would refuse large but honest lists.
    budget.max_nodes = MAX_TEXT_BYTES / 4;
    budget.max_events = MAX_TEXT_BYTES / 2;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // YAML 1.2: `yes`, `no`, `on`, `off`, `y`, `n` are strings. Go's YAML 1.1 reading of them as
    // booleans would break names like `n` once the untyped step has lost the field's type.
    options.strict_booleans = true;
    // Warnings are one line in a log; the snippet would quote the (possibly huge) input.
    options.with_snippet = false;
    options
}

fn parse_yaml(text: &str, origin: &str, found: &mut Found) {
    for document in split(text) {
        let place = Place::document(origin, document.number);
        let parsed = serde_saphyr::from_str_multiple_with_options::<Value, Vec<Value>>(
            document.text,
            yaml_options(),
        );
        match parsed {
            // Empty and comment-only documents parse to nothing (or null) and are fine.
            Ok(values) => values
                .into_iter()
                .for_each(|v| read_document(v, place.clone(), found)),
            Err(e) => found.warn(place, None, Problem::Yaml(one_line(&e.to_string()))),
        }
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a document's `apiVersion` and `kind` make of it.
enum Type {
    Object(Kind),
    /// A list; items without `apiVersion`/`kind` get these (typed lists omit them per item).
    List(Option<(&'static str, &'static str)>),
    /// One of our kinds (or its list) in a version we do not read.
    Unsupported(&'static str),
    Other,
}

const SERVICE: (&str, &str) = ("v1", "Service");
const NODE: (&str, &str) = ("v1", "Node");
const ENDPOINT_SLICE: (&str, &str) = ("discovery.k8s.io/v1", "EndpointSlice");
const SERVICE_CIDR: (&str, &str) = ("networking.k8s.io/v1", "ServiceCIDR");

fn classify(api_version: &str, kind: &str) -> Type {
    let (group, _) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    match (group, api_version, kind) {
        (_, "v1", "Service") => Type::Object(Kind::Service),
        (_, "v1", "Node") => Type::Object(Kind::Node),
        (_, "discovery.k8s.io/v1", "EndpointSlice") => Type::Object(Kind::EndpointSlice),
        (_, "networking.k8s.io/v1", "ServiceCIDR") => Type::Object(Kind::ServiceCidr),
        (_, "v1", "List") => Type::List(None),
        (_, "v1", "ServiceList") => Type::List(Some(SERVICE)),
        (_, "v1", "NodeList") => Type::List(Some(NODE)),
        (_, "discovery.k8s.io/v1", "EndpointSliceList") => Type::List(Some(ENDPOINT_SLICE)),
        (_, "networking.k8s.io/v1", "ServiceCIDRList") => Type::List(Some(SERVICE_CIDR)),
        ("", _, "Service" | "ServiceList" | "Node" | "NodeList") => Type::Unsupported("v1"),
        ("discovery.k8s.io", _, "EndpointSlice" | "EndpointSliceList") => {
            Type::Unsupported("discovery.k8s.io/v1")
        }
        ("networking.k8s.io", _, "ServiceCIDR" | "ServiceCIDRList") => {
            Type::Unsupported("networking.k8s.io/v1")
        }
        _ => Type::Other,
    }
}

fn value_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

fn read_document(value: Value, place: Place, found: &mut Found) {
    match value {
        Value::Null => {}
        Value::Object(map) => read_manifest(map, place, None, found),
        other => found.warn(place, None, Problem::NotAMapping(value_name(&other))),
    }
}

/// Reads one manifest. `in_list` carries the defaults of the enclosing list; a list inside a
/// list is refused, which also bounds the recursion.
fn read_manifest(
    mut map: Map<String, Value>,
    place: Place,
    in_list: Option<Option<(&str, &str)>>,
    found: &mut Found,
) {
    if let Some(Some((api_version, kind))) = in_list {
        map.entry("apiVersion")
            .or_insert_with(|| api_version.into());
        map.entry("kind").or_insert_with(|| kind.into());
    }
    let object = raw_label(&map);
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return found.warn(place, object, Problem::MissingType);
    }
    match classify(api_version, kind) {
        Type::Object(kind) => decode(kind, map, place, object, found),
        Type::List(_) if in_list.is_some() => found.warn(place, object, Problem::NestedList),
        Type::List(defaults) => match map.remove("items") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.into_iter().enumerate() {
                    match item {
                        Value::Object(item) => {
                            read_manifest(item, place.item(i), Some(defaults), found)
                        }
                        other => found.warn(
                            place.item(i),
                            None,
                            Problem::NotAMapping(value_name(&other)),
                        ),
                    }
                }
            }
            Some(_) => found.warn(place, object, Problem::ItemsNotAList),
        },
        Type::Unsupported(supported) => {
            let problem = Problem::UnsupportedVersion {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
                supported,
            };
            found.warn(place, object, problem);
        }
        Type::Other => {
            let type_name = format!("{api_version} {kind}");
            found.skipped.push(Skipped {
                place,
                type_name,
                object,
            });
        }
    }
}

fn decode(
    kind: Kind,
    map: Map<String, Value>,
    place: Place,
    label: Option<String>,
    found: &mut Found,
) {
    let value = Value::Object(map);
    let decoded = match kind {
        Kind::Service => {
            serde_json::from_value::<Service>(value).map(|s| Object::Service(Box::new(s)))
        }
        Kind::EndpointSlice => serde_json::from_value::<EndpointSlice>(value)
            .map(|s| Object::EndpointSlice(Box::new(s))),
        Kind::Node => serde_json::from_value::<Node>(value).map(|n| Object::Node(Box::new(n))),
        Kind::ServiceCidr => {
            serde_json::from_value::<ServiceCIDR>(value).map(|c| Object::ServiceCidr(Box::new(c)))
        }
    };
    match decoded {
        Err(e) => found.warn(place, label, Problem::Decode(e.to_string())),
        Ok(mut object) => {
            if identity::key(&object).is_none() {
                return found.warn(place, label, Problem::MissingName);
            }
            default_namespace(&mut object);
            found.objects.push((place, object));
        }
    }
}

#[cfg(test)]
mod tests;
