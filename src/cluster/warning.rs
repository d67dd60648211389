//! Why the tracker skipped an object or part of one: the warning an operator reads.

use std::fmt;

use serde::Serialize;

/// One refused object, or one refused part of an object (an address, a port), named so that an
/// operator can find it: `service default/web`, `endpointslice default/web-abc12`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Warning {
    /// The object, as `kind namespace/name` (or `kind name` for Nodes).
    pub object: String,
    /// What was refused and why, naming the field and value.
    pub message: String,
    /// Also published as a Kubernetes Event on the object: for what its owner chose in our own
    /// annotations, so `kubectl describe` tells them. Not part of `plan`'s JSON.
    #[serde(skip)]
    pub event: Option<EventTarget>,
}

/// The object a warning's Event is about, and the Event's reason.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventTarget {
    /// `Service`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    /// The object's UID, which `kubectl describe` matches Events by.
    pub uid: Option<String>,
    /// The Event's reason (`InvalidIPVSScheduler`).
    pub reason: &'static str,
}

impl Warning {
    pub fn new(object: &str, message: impl Into<String>) -> Warning {
        Warning {
            object: object.to_string(),
            message: message.into(),
            event: None,
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}
