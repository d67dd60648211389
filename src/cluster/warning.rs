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
}

impl Warning {
    pub fn new(object: &str, message: impl Into<String>) -> Warning {
        Warning {
            object: object.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.message)
    }
}
