//! The changes of a failed sync, carried into the next one.
//!
//! Pure. A failed sync has consumed its [`Changes`] from the tracker; without them the next sync
//! would not know which service ports still differ from the kernel, and the trigger times of
//! the slices it failed to program would never be measured. The runner keeps them and merges
//! them with the next snapshot's (the next sync is full as well, see `schedule`).

use crate::cluster::Changes;

/// `older` and `newer` as one set of changes: the union of the ports, either topology change,
/// all trigger times (older first) and the summed change counts.
pub fn merge(older: Changes, mut newer: Changes) -> Changes {
    let mut ports = older.ports;
    ports.append(&mut newer.ports);
    let mut trigger_times = older.trigger_times;
    trigger_times.append(&mut newer.trigger_times);
    Changes {
        ports,
        node_topology_changed: older.node_topology_changed || newer.node_topology_changed,
        trigger_times,
        service_changes: older.service_changes + newer.service_changes,
        endpoint_changes: older.endpoint_changes + newer.endpoint_changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Protocol, ServiceKey, ServicePortName};

    fn port(name: &str) -> ServicePortName {
        ServicePortName {
            service: ServiceKey::new("ns", name),
            port: "http".into(),
            protocol: Protocol::Tcp,
        }
    }

    #[test]
    fn merging_keeps_every_port_trigger_time_and_count() {
        let older = Changes {
            ports: [port("a"), port("b")].into(),
            node_topology_changed: true,
            trigger_times: vec![(ServiceKey::new("ns", "a"), "t1".into())],
            service_changes: 1,
            endpoint_changes: 2,
        };
        let newer = Changes {
            ports: [port("b"), port("c")].into(),
            node_topology_changed: false,
            trigger_times: vec![(ServiceKey::new("ns", "c"), "t2".into())],
            service_changes: 3,
            endpoint_changes: 4,
        };
        let merged = merge(older, newer);
        assert_eq!(merged.ports, [port("a"), port("b"), port("c")].into());
        assert!(merged.node_topology_changed);
        let times: Vec<&str> = merged
            .trigger_times
            .iter()
            .map(|(_, t)| t.as_str())
            .collect();
        assert_eq!(times, ["t1", "t2"]);
        assert_eq!((merged.service_changes, merged.endpoint_changes), (4, 6));
    }
}
