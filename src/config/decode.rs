//! Strict, path-aware reading of a parsed YAML/JSON document (a `serde_json::Value` tree).
//!
//! Serde's derived decoders report a wrong type without saying where, so the file schema is read
//! field by field through [`Object`], which knows the dotted path of every value
//! (`iptables.masqueradeBit`), refuses keys nobody asked for when strict (upstream decodes
//! strictly first) or skips them when lenient (its fallback), and turns every problem into one
//! [`FieldError`]. Pure: no I/O.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::duration;

/// A problem with one field: its dotted path and what is accepted, one lower-case line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path, e.g. `iptables.masqueradeBit`; empty for the document itself.
    pub field: String,
    /// What is wrong and what is accepted.
    pub message: String,
    /// Whether only strict decoding fails on it (an unknown or duplicate field): upstream then
    /// reads the document again leniently.
    pub strict: bool,
}

impl FieldError {
    /// A problem with `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
            strict: false,
        }
    }

    /// A problem only strict decoding has with `field`.
    pub fn strict(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            strict: true,
            ..FieldError::new(field, message)
        }
    }
}

/// A mapping being read; when strict, every key must be asked for before [`Object::finish`].
pub struct Object {
    path: String,
    map: Map<String, Value>,
    asked: Vec<&'static str>,
    lenient: bool,
}

impl Object {
    /// Reads `value` as the document, strictly or leniently (unknown keys skipped, in nested
    /// mappings too); null is empty.
    pub fn document(value: Value, lenient: bool) -> Result<Self, FieldError> {
        let mut root = Object::new(String::new(), value)?;
        root.lenient = lenient;
        Ok(root)
    }

    /// Reads `value` as the mapping at `path` (empty path: the document), strictly; null is
    /// empty.
    pub fn new(path: String, value: Value) -> Result<Self, FieldError> {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                let what = if path.is_empty() {
                    "the document"
                } else {
                    "value"
                };
                return Err(FieldError::new(
                    path,
                    format!("{what} must be a mapping, got {}", kind(&other)),
                ));
            }
        };
        Ok(Object {
            path,
            map,
            asked: Vec::new(),
            lenient: false,
        })
    }

    /// The dotted path of `key` in this mapping.
    pub fn path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Removes and returns `key`'s raw value; absent and null are `None`.
    pub fn raw(&mut self, key: &'static str) -> Option<Value> {
        self.asked.push(key);
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// Reads `key` as `T`; absent and null are `None`.
    pub fn get<T: DeserializeOwned>(&mut self, key: &'static str) -> Result<Option<T>, FieldError> {
        let Some(value) = self.raw(key) else {
            return Ok(None);
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|e| FieldError::new(self.path(key), e.to_string()))
    }

    /// Reads `key` as a nested mapping; absent and null give an empty one.
    pub fn object(&mut self, key: &'static str) -> Result<Object, FieldError> {
        let value = self.raw(key).unwrap_or(Value::Null);
        let mut inner = Object::new(self.path(key), value)?;
        inner.lenient = self.lenient;
        Ok(inner)
    }

    /// Reads `key` as a Go duration string (`30s`, `1h0m0s`).
    pub fn duration(&mut self, key: &'static str) -> Result<Option<Duration>, FieldError> {
        match self.raw(key) {
            None => Ok(None),
            Some(Value::String(text)) => duration::parse(&text)
                .map(Some)
                .map_err(|e| FieldError::new(self.path(key), e.to_string())),
            Some(other) => Err(FieldError::new(
                self.path(key),
                format!(
                    "invalid type: {}, expected a duration string such as 30s or 1h0m0s",
                    kind(&other)
                ),
            )),
        }
    }

    /// All remaining entries, for mappings whose keys are data (`featureGates`).
    pub fn into_entries(self) -> Map<String, Value> {
        self.map
    }

    /// When strict, fails on the first key nobody asked for, listing the accepted ones.
    pub fn finish(self) -> Result<(), FieldError> {
        let Some(key) = self.map.keys().next().filter(|_| !self.lenient) else {
            return Ok(());
        };
        let mut accepted = self.asked.clone();
        accepted.sort_unstable();
        Err(FieldError::strict(
            self.path(key),
            format!("unknown field; accepted here: {}", accepted.join(", ")),
        ))
    }
}

/// A short description of a value's type for error messages.
pub fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("number `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_owned(),
        Value::Object(_) => "mapping".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_the_path_of_wrong_types_and_unknown_fields() {
        let mut root = Object::new(String::new(), json!({"a": {"b": "x", "c": 1}})).unwrap();
        let mut a = root.object("a").unwrap();
        let err = a.get::<i64>("b").unwrap_err();
        assert_eq!(err.field, "a.b");
        assert_eq!(err.message, "invalid type: string \"x\", expected i64");
        let err = a.finish().unwrap_err();
        assert_eq!(err.field, "a.c");
        assert_eq!(err.message, "unknown field; accepted here: b");
        assert!(err.strict, "only strict decoding refuses an unknown field");
        assert!(!a_wrong_type_is_strict_too());
        assert!(root.finish().is_ok());
    }

    fn a_wrong_type_is_strict_too() -> bool {
        let mut root = Object::document(json!({"b": "x"}), true).unwrap();
        root.get::<i64>("b").unwrap_err().strict
    }

    #[test]
    fn lenient_reading_skips_unknown_keys_at_every_depth() {
        let mut root =
            Object::document(json!({"a": {"b": 1, "new": 2}, "newer": 3}), true).unwrap();
        let mut a = root.object("a").unwrap();
        assert_eq!(a.get::<i64>("b"), Ok(Some(1)));
        assert!(a.finish().is_ok());
        assert!(root.finish().is_ok());
        let mut root = Object::document(json!({"a": {"new": 2}}), false).unwrap();
        let a = root.object("a").unwrap();
        assert_eq!(a.finish().unwrap_err().field, "a.new");
    }

    #[test]
    fn reads_durations_and_nulls() {
        let mut root = Object::new(String::new(), json!({"d": "1m", "n": null, "bad": 5})).unwrap();
        assert_eq!(root.duration("d"), Ok(Some(Duration::from_secs(60))));
        assert_eq!(root.duration("n"), Ok(None));
        assert_eq!(root.get::<String>("missing"), Ok(None));
        let err = root.duration("bad").unwrap_err();
        assert_eq!(
            err.message,
            "invalid type: number `5`, expected a duration string such as 30s or 1h0m0s"
        );
        let err = Object::new(String::new(), json!([1])).err().unwrap();
        assert_eq!(err.message, "the document must be a mapping, got sequence");
    }
}
