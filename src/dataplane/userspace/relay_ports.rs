//! The ports the relay listens on now, shared with the conntrack reconciler: a flow the
//! redirect rules DNATed to any other port went to a listener that is gone (closed since, or
//! one of a relay process before this one), and would never reach a listener while its entry
//! lives ([`crate::conntrack::Translation::ToRelay`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use super::plan::Transport;
use crate::cluster::Protocol;

/// Listening ports with the protocol of each.
pub type Ports = Arc<BTreeSet<(Protocol, u16)>>;

/// A cheap-to-clone handle: the dataplane sets the ports after each sync's listener changes,
/// the reconciler reads them at each pass.
#[derive(Clone, Debug, Default)]
pub struct RelayPorts(Arc<RwLock<Ports>>);

impl RelayPorts {
    /// The ports now, with the protocol each listens for.
    pub fn now(&self) -> Ports {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Records the ports the listeners hold per transport (nothing is copied when they did
    /// not change).
    pub(super) fn set(&self, taken: &BTreeMap<Transport, BTreeSet<u16>>) {
        let ports: BTreeSet<(Protocol, u16)> = taken
            .iter()
            .flat_map(|(transport, ports)| {
                let protocol = match transport {
                    Transport::Tcp => Protocol::Tcp,
                    Transport::Udp => Protocol::Udp,
                };
                ports.iter().map(move |&p| (protocol, p))
            })
            .collect();
        let mut current = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if **current != ports {
            *current = Arc::new(ports);
        }
    }
}
