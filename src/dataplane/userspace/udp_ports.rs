//! The UDP ports the relay listens on now, shared with the conntrack reconciler: a flow the
//! redirect rules DNATed to any other port went to a listener that is gone (closed since, or
//! one of a relay process before this one), and would never reach a listener while its entry
//! lives ([`crate::conntrack::Translation::ToRelay`]).

use std::collections::BTreeSet;
use std::sync::{Arc, PoisonError, RwLock};

/// A cheap-to-clone handle: the dataplane sets the ports after each sync's listener changes,
/// the reconciler reads them at each pass.
#[derive(Clone, Debug, Default)]
pub struct UdpPorts(Arc<RwLock<Arc<BTreeSet<u16>>>>);

impl UdpPorts {
    /// The ports now.
    pub fn now(&self) -> Arc<BTreeSet<u16>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records `ports` as the listening ones (nothing is copied when they did not change).
    pub(super) fn set(&self, ports: Option<&BTreeSet<u16>>) {
        let empty = BTreeSet::new();
        let ports = ports.unwrap_or(&empty);
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if **current != *ports {
            *current = Arc::new(ports.clone());
        }
    }
}
