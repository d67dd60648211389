//! The stand-in dataplane while no mode is implemented: it logs what the model says and
//! programs nothing.
//!
//! It exists so the runner, its schedule, health and metrics run for real before the first
//! mode lands; `main` says at start-up that no rules are programmed. Replace it by handing the
//! runner a real mode's `Box<dyn Dataplane>`.

use crate::cluster::{Changes, Snapshot};
use crate::dataplane::{Dataplane, SyncError, SyncReport};

/// See the module doc.
#[derive(Debug, Default)]
pub struct LogOnly;

impl Dataplane for LogOnly {
    fn mode(&self) -> &'static str {
        "none"
    }

    fn sync(
        &mut self,
        snapshot: &Snapshot,
        changes: &Changes,
        full: bool,
    ) -> Result<SyncReport, SyncError> {
        if full || !changes.ports.is_empty() || changes.node_topology_changed {
            tracing::info!(
                service_ports = snapshot.ports.len(),
                changed = changes.ports.len(),
                node_known = snapshot.node.known,
                full,
                "cluster model updated (no dataplane: nothing programmed)"
            );
        }
        for name in &changes.ports {
            tracing::debug!(
                service_port = %name,
                present = snapshot.ports.contains_key(name),
                "service port changed"
            );
        }
        Ok(SyncReport {
            full,
            families: Vec::new(),
        })
    }
}
