//! What the manifest source reports about input it could not use, and where that input was.
//!
//! Plain values: building or formatting them does no I/O and cannot fail. Logging them is the
//! caller's choice ([`Loaded::log`](super::Loaded::log), the watcher).

use std::fmt;

/// Where a piece of manifest text came from, precise enough to find it in an editor.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Place {
    /// What the caller named the text: a file path for the directory loader.
    pub origin: String,
    /// The document within the text, counted from 1 as `---` separators are counted by eye
    /// (comments and directives before the first `---` belong to document 1); for JSON, the
    /// n-th top-level value. `None` when the problem concerns the whole text or file.
    pub document: Option<usize>,
    /// The index within a list's `items`, counted from 0 as in `items[0]`.
    pub item: Option<usize>,
}

impl Place {
    pub(super) fn text(origin: &str) -> Place {
        Place {
            origin: origin.to_owned(),
            document: None,
            item: None,
        }
    }

    pub(super) fn document(origin: &str, document: usize) -> Place {
        Place {
            origin: origin.to_owned(),
            document: Some(document),
            item: None,
        }
    }

    pub(super) fn item(&self, item: usize) -> Place {
        Place {
            item: Some(item),
            ..self.clone()
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.origin)?;
        if let Some(document) = self.document {
            write!(f, " document {document}")?;
        }
        if let Some(item) = self.item {
            write!(f, " items[{item}]")?;
        }
        Ok(())
    }
}

/// One piece of input that was skipped (or, for [`Problem::Duplicate`], overridden).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub place: Place,
    /// `Kind namespace/name` (or `Node name`) when it could be read from the raw document, so a
    /// user can find the object even when the document failed to decode.
    pub object: Option<String>,
    pub problem: Problem,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.place)?;
        if let Some(object) = &self.object {
            write!(f, " ({object})")?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// Why a piece of input was not used. Messages carry the parser's or decoder's own text, since
/// that text names the line, column or expected type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("text is {len} bytes, more than the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("cannot read: {0}")]
    Unreadable(String),
    #[error("not valid YAML: {0}")]
    Yaml(String),
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("a manifest must be a mapping, found {0}")]
    NotAMapping(&'static str),
    #[error("missing apiVersion or kind")]
    MissingType,
    #[error("{api_version} {kind} is not supported; use {supported}")]
    UnsupportedVersion {
        api_version: String,
        kind: String,
        supported: &'static str,
    },
    #[error("a list inside a list is not supported")]
    NestedList,
    #[error("items must be a list")]
    ItemsNotAList,
    #[error("cannot decode: {0}")]
    Decode(String),
    #[error("missing metadata.name")]
    MissingName,
    #[error("overrides the same object from {earlier}")]
    Duplicate { earlier: Place },
}

/// A document of a kind this source does not deliver (a Deployment, a ConfigMap…): skipped on
/// purpose, recorded so a debug log can still say what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub place: Place,
    /// `apiVersion kind` as written, e.g. `apps/v1 Deployment`.
    pub type_name: String,
    pub object: Option<String>,
}
