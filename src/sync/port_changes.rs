//! Which Service ports a snapshot added, updated or removed, for the debug lines (`-v=4`)
//! upstream's change tracker writes at its verbosity 4: "Adding new service port", "Updating
//! existing service port", "Removing service port", each with `portName` and `servicePort`
//! (`10.96.0.10:53/UDP`). A port whose endpoints alone changed is not a Service port change.
//!
//! [`changes`] is pure; [`log`] writes the lines.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::cluster::{ServicePortName, ServicePortState, Snapshot};

/// What happened to one Service port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortChange {
    Added,
    Updated,
    Removed,
}

impl PortChange {
    /// upstream's message for it.
    pub fn message(self) -> &'static str {
        match self {
            PortChange::Added => "Adding new service port",
            PortChange::Updated => "Updating existing service port",
            PortChange::Removed => "Removing service port",
        }
    }
}

/// The Service port changes among `changed` from `before` to `after`, in name order.
pub fn changes<'a>(
    before: &'a Snapshot,
    after: &'a Snapshot,
    changed: &'a BTreeSet<ServicePortName>,
) -> Vec<(PortChange, &'a ServicePortName, &'a ServicePortState)> {
    changed
        .iter()
        .filter_map(
            |name| match (before.ports.get(name), after.ports.get(name)) {
                (None, Some(new)) => Some((PortChange::Added, name, &**new)),
                (Some(old), None) => Some((PortChange::Removed, name, &**old)),
                (Some(old), Some(new)) if !same_service_port(old, new) => {
                    Some((PortChange::Updated, name, &**new))
                }
                _ => None,
            },
        )
        .collect()
}

/// Whether two states of a port differ only in their endpoints.
fn same_service_port(a: &ServicePortState, b: &ServicePortState) -> bool {
    a.port == b.port
        && a.families.len() == b.families.len()
        && a.families.iter().zip(&b.families).all(|(x, y)| {
            x.family == y.family
                && x.cluster_ip == y.cluster_ip
                && x.external_ips == y.external_ips
                && x.load_balancer_ips == y.load_balancer_ips
                && x.load_balancer_source_ranges == y.load_balancer_source_ranges
        })
}

/// upstream's `servicePort` value: each ClusterIP with the port and protocol.
pub fn service_port_text(state: &ServicePortState) -> String {
    state
        .families
        .iter()
        .map(|f| {
            format!(
                "{}/{}",
                SocketAddr::new(f.cluster_ip, state.port.port),
                state.port.name.protocol
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One debug line per change.
pub fn log(before: &Snapshot, after: &Snapshot, changed: &BTreeSet<ServicePortName>) {
    for (change, name, state) in changes(before, after, changed) {
        match change {
            PortChange::Removed => {
                tracing::debug!(portName = %name, "{}", change.message());
            }
            PortChange::Added | PortChange::Updated => tracing::debug!(
                portName = %name,
                servicePort = %service_port_text(state),
                "{}",
                change.message()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::source::Event;
    use crate::cluster::{Features, Tracker};
    use crate::testing::{ep, service, slice};

    fn applied(t: &mut Tracker, object: impl Into<crate::cluster::source::Object>) {
        t.apply(&Event::Applied(object.into()));
    }

    #[test]
    fn ports_added_updated_and_removed_are_told_apart_from_endpoint_changes() {
        let mut t = Tracker::new("node-a", Features::default());
        for kind in crate::cluster::source::Kind::ALL {
            t.apply(&Event::ListStarted(kind));
            t.apply(&Event::ListEnded(kind));
        }
        applied(
            &mut t,
            service(
                "ns",
                "web",
                "10.96.0.10",
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ),
        );
        applied(
            &mut t,
            slice(
                "ns",
                "web",
                "web-a",
                &[("http", 8080, "TCP")],
                &[ep("10.0.0.1", "node-a")],
            ),
        );
        let (before, first) = t.snapshot();
        let named: Vec<String> = changes(&Snapshot::default(), &before, &first.ports)
            .iter()
            .map(|(c, n, s)| format!("{c:?} {n} {}", service_port_text(s)))
            .collect();
        assert_eq!(
            named,
            [
                "Added ns/web:dns 10.96.0.10:53/UDP",
                "Added ns/web:http 10.96.0.10:80/TCP"
            ]
        );

        // An endpoint change alone, a port changed, a port gone.
        applied(
            &mut t,
            slice(
                "ns",
                "web",
                "web-a",
                &[("http", 8080, "TCP")],
                &[ep("10.0.0.2", "node-a")],
            ),
        );
        applied(
            &mut t,
            service("ns", "web", "10.96.0.10", &[("http", 81, "TCP")]),
        );
        let (after, second) = t.snapshot();
        let named: Vec<String> = changes(&before, &after, &second.ports)
            .iter()
            .map(|(c, n, _)| format!("{c:?} {n}"))
            .collect();
        assert_eq!(named, ["Removed ns/web:dns", "Updated ns/web:http"]);
    }
}
