//! Walks the first packet of a connection through userspace mode and says where it ends: the
//! redirect rules through the nftables tracer, then the relay's own part, which no rule shows.
//!
//! Pure. Backs `explain` in this mode. A packet the redirect rules DNAT to a listener's port is
//! relayed to one of that listener's endpoints (round-robin: each an equal share), and the
//! endpoint sees the node's address, not the client's (the relay dials from the node): every
//! relayed branch is a masqueraded one. A listener without endpoints has its frontends refused
//! by the rules themselves, so the relay's refusal shows only when a table and the model
//! disagree (a sync pending).
//!
//! Which listener a port is cannot be read from the table: the ports are the kernel's choice
//! (or the first free ones of `portRange`), known only to the running proxy. [`RelayPorts::
//! read`] finds it from the frontends instead: it plans the redirect rules for the model's
//! listeners on stand-in ports, the same planner the applier runs, and pairs each frontend's
//! stand-in port with the port the table sends that frontend to. The same pairing gives the
//! table the proxy would program with those ports, so drift can be told apart from the ports.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::plan::{Key, Listeners};
use super::redirect::{self, Listening, RELAY_PORTS, SERVICE_LISTENERS, SHORT_CIRCUIT};
use crate::cluster::{IpFamily, Protocol, Snapshot};
use crate::nft::Ruleset;
use crate::nft::ruleset::{Data, Value};
use crate::nft::trace::{self as nft, Branch, Fate, Packet, Trace};

/// One family's listener ports (protocol . port, as the redirect rules send to them) and the
/// endpoints each listener relays to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RelayPorts {
    ports: BTreeMap<(Protocol, u16), Vec<SocketAddr>>,
}

/// What [`RelayPorts::read`] found in a table.
#[derive(Debug)]
pub struct Read {
    pub relay: RelayPorts,
    /// The listeners as the table shows them open: each with the port its frontends go to.
    pub ports: BTreeMap<Key, u16>,
    /// The redirect rules the proxy would program now, on the ports the table uses.
    pub want: Ruleset,
}

impl RelayPorts {
    /// The listener ports of a table planned by [`redirect::plan`] over `listening`.
    pub fn planned(listeners: &Listeners, listening: &BTreeMap<Key, Listening>) -> RelayPorts {
        let ports = listening
            .iter()
            .filter_map(|(key, l)| {
                let spec = listeners.get(key)?;
                Some(((protocol(key), l.port), spec.endpoints.clone()))
            })
            .collect();
        RelayPorts { ports }
    }

    /// The listener ports of `table` (one family's redirect rules, as the kernel holds them),
    /// with the endpoints the model selects for each listener now.
    pub fn read(
        table: &Ruleset,
        snapshot: &Snapshot,
        listeners: &Listeners,
        settings: &redirect::Settings,
        family: IpFamily,
    ) -> Read {
        let stand_in = stand_in_ports(listeners, family);
        let by_stand_in: BTreeMap<(Protocol, u16), &Key> = stand_in
            .iter()
            .map(|(key, l)| ((protocol(key), l.port), key))
            .collect();
        let planned = redirect::plan_family(snapshot, &stand_in, settings, family);
        let mut ports: BTreeMap<Key, u16> = BTreeMap::new();
        for map in [SERVICE_LISTENERS, SHORT_CIRCUIT] {
            let (Some(planned), Some(kernel)) = (elements(&planned, map), elements(table, map))
            else {
                continue;
            };
            for (frontend, data) in planned.iter() {
                let Some(standing) = target_port(&data.data) else {
                    continue;
                };
                let proto = frontend_protocol(frontend.values().as_slice());
                let Some(key) = proto.and_then(|p| by_stand_in.get(&(p, standing))) else {
                    continue;
                };
                if let Some(port) = kernel.get(frontend).and_then(|e| target_port(&e.data)) {
                    ports.entry((*key).clone()).or_insert(port);
                }
            }
        }
        // A listener without endpoints has no frontend sent to it: its port is the element of
        // `relay-ports` that bears its name.
        if let Some(kernel) = elements(table, RELAY_PORTS) {
            let unpaired: Vec<&Key> = stand_in
                .keys()
                .filter(|k| !ports.contains_key(*k))
                .collect();
            for key in unpaired {
                let comment = redirect::relay_comment(key);
                let found = kernel.iter().find_map(|(port, element)| {
                    let values = port.values();
                    let named = element.comment.as_ref() == Some(&comment);
                    (named && frontend_protocol(values.as_slice()) == Some(protocol(key)))
                        .then(|| target_port(&Data::Values(*port)))
                        .flatten()
                });
                if let Some(port) = found {
                    ports.insert(key.clone(), port);
                }
            }
        }
        let listening: BTreeMap<Key, Listening> = stand_in
            .into_iter()
            .map(|(key, l)| {
                let port = ports.get(&key).copied().unwrap_or(l.port);
                (key, Listening { port, ..l })
            })
            .collect();
        let want = redirect::plan_family(snapshot, &listening, settings, family);
        let relay = RelayPorts {
            ports: ports
                .iter()
                .filter_map(|(key, &port)| {
                    let spec = listeners.get(key)?;
                    Some(((protocol(key), port), spec.endpoints.clone()))
                })
                .collect(),
        };
        Read { relay, ports, want }
    }

    /// The endpoints of the listener on `port`, if one of this family's listeners holds it.
    pub fn endpoints(&self, protocol: Protocol, port: u16) -> Option<&[SocketAddr]> {
        self.ports.get(&(protocol, port)).map(Vec::as_slice)
    }
}

/// Every listener of `family` on its own stand-in port (its place in plan order, from 1), as
/// open and serving when it has endpoints. Listeners past the 65,535th get none (no table
/// holds that many ports).
fn stand_in_ports(listeners: &Listeners, family: IpFamily) -> BTreeMap<Key, Listening> {
    listeners
        .iter()
        .filter(|(key, _)| key.family == family)
        .zip(1..=u16::MAX)
        .map(|((key, spec), port)| {
            let serving = !spec.endpoints.is_empty();
            (key.clone(), Listening { port, serving })
        })
        .collect()
}

fn protocol(key: &Key) -> Protocol {
    key.port.protocol
}

fn elements<'a>(rules: &'a Ruleset, map: &str) -> Option<&'a crate::nft::ruleset::Elements> {
    rules
        .sets
        .iter()
        .find(|(name, _)| name.as_str() == map)
        .map(|(_, s)| &*s.elements)
}

/// The port of a DNAT map's `address . port` data (or of a listener's `protocol . port`).
fn target_port(data: &Data) -> Option<u16> {
    match data {
        Data::Values(t) => t.values().as_slice().iter().find_map(|v| match v {
            Value::Port(p) => Some(*p),
            _ => None,
        }),
        _ => None,
    }
}

/// The protocol of a frontend key (`address . protocol . port`) or a listener's port
/// (`protocol . port`).
fn frontend_protocol(values: &[Value]) -> Option<Protocol> {
    values.iter().find_map(|v| match v {
        Value::Proto(p) => Some(*p),
        _ => None,
    })
}

/// Traces `packet` through `rules` (one family's redirect table) and, where they send it to a
/// listener of `relay`, on through the relay. `local`: the node's addresses.
pub fn trace(rules: &Ruleset, relay: &RelayPorts, packet: &Packet, local: &[IpAddr]) -> Trace {
    let walked = nft::trace(rules, packet, local);
    let branches = walked
        .branches
        .into_iter()
        .flat_map(|branch| relayed(branch, relay, packet.protocol, local))
        .collect();
    Trace { branches }
}

/// How one path through the rules continues: through a listener to its endpoints, or as it is.
fn relayed(
    branch: Branch,
    relay: &RelayPorts,
    protocol: Protocol,
    local: &[IpAddr],
) -> Vec<Branch> {
    let to_listener = match branch.dnat {
        Some((addr, port)) if branch.fate == Fate::Accept && local.contains(&addr) => {
            relay.endpoints(protocol, port)
        }
        _ => None,
    };
    match to_listener {
        None => vec![branch],
        // A listener with nothing to relay to refuses the connection (TCP: accepted, then
        // closed; UDP: the datagram is dropped). Told as a refusal.
        Some([]) => vec![Branch {
            fate: Fate::Reject,
            dnat: None,
            masquerade: false,
        }],
        Some(endpoints) => endpoints
            .iter()
            .map(|e| Branch {
                fate: Fate::Accept,
                dnat: Some((e.ip(), e.port())),
                masquerade: true,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodePortAddresses;
    use crate::dataplane::node::DetectLocal;
    use crate::dataplane::userspace::plan;
    use crate::nft::trace::Origin;
    use crate::testing::snapshots::{ip, node, snapshot, svc};

    fn settings() -> redirect::Settings {
        redirect::Settings {
            bind: "0.0.0.0".parse().unwrap(),
            node_ports: NodePortAddresses {
                all: true,
                ..NodePortAddresses::default()
            },
            detect_local: DetectLocal::ClusterCidrs(vec!["10.244.0.0/16".parse().unwrap()]),
        }
    }

    /// Opens every listener on ports from 41000, as a running proxy might.
    fn open(listeners: &Listeners) -> BTreeMap<Key, Listening> {
        listeners
            .iter()
            .zip(41000..)
            .map(|((key, spec), port)| {
                let serving = !spec.endpoints.is_empty();
                (key.clone(), Listening { port, serving })
            })
            .collect()
    }

    fn from_pod(dst: &str, dport: u16) -> Packet {
        Packet {
            protocol: Protocol::Tcp,
            src: ip("10.244.1.7"),
            dst: ip(dst),
            dport,
            origin: Origin::Interface("cni0".into()),
        }
    }

    fn web() -> Snapshot {
        snapshot(
            node(),
            vec![
                svc("default/web", "10.96.0.10", 80)
                    .node_port(30080)
                    .external_local()
                    .ep("10.244.2.5", 8080, "node-b")
                    .ep("10.244.1.5", 8080, "node-a"),
                svc("default/empty", "10.96.0.11", 80),
            ],
        )
    }

    /// `packet` through [`web`]'s redirect rules and relay, every listener open.
    fn trace_web(packet: &Packet) -> Trace {
        let snap = web();
        let listeners = plan::plan(&snap);
        let open = open(&listeners);
        let [table, _] = redirect::plan(&snap, &open, &settings());
        let relay = RelayPorts::planned(&listeners, &open);
        let local = snap.node.local_addresses().into_iter().collect::<Vec<_>>();
        trace(&table, &relay, packet, &local)
    }

    #[test]
    fn a_relayed_connection_reaches_the_listeners_endpoints_from_the_node() {
        let t = trace_web(&from_pod("10.96.0.10", 80));
        let eps: Vec<(IpAddr, u16)> = t.endpoints().into_iter().collect();
        assert_eq!(
            eps,
            [(ip("10.244.1.5"), 8080), (ip("10.244.2.5"), 8080)],
            "{t:?}"
        );
        assert_eq!(t.masquerade(), Some(true));
        assert_eq!(t.fate(), Some(Fate::Accept));
    }

    #[test]
    fn a_port_without_endpoints_is_refused_by_the_rules() {
        let t = trace_web(&from_pod("10.96.0.11", 80));
        assert_eq!(t.fate(), Some(Fate::Reject), "{t:?}");
    }

    #[test]
    fn reading_a_table_finds_each_listeners_port_and_no_drift() {
        let snap = web();
        let listeners = plan::plan(&snap);
        let open = open(&listeners);
        let [kernel, _] = redirect::plan(&snap, &open, &settings());
        let read = RelayPorts::read(&kernel, &snap, &listeners, &settings(), IpFamily::V4);
        // A listener without endpoints has no redirect (its frontends are refused): its port
        // is read from `relay-ports` by its name.
        assert!(open.values().any(|l| !l.serving));
        assert_eq!(read.relay, RelayPorts::planned(&listeners, &open));
        let ports: BTreeMap<Key, u16> = open.iter().map(|(k, l)| (k.clone(), l.port)).collect();
        assert_eq!(read.ports, ports);
        assert!(
            crate::nft::diff(&kernel, &read.want).ops.is_empty(),
            "the table read back is the one planned on its own ports"
        );
    }

    #[test]
    fn a_table_missing_a_listener_shows_as_a_difference() {
        let snap = web();
        let listeners = plan::plan(&snap);
        let mut open = open(&listeners);
        let internal = open
            .keys()
            .find(|k| k.list == plan::List::Cluster && &*k.port.service.name == "web")
            .cloned()
            .unwrap();
        let [full, _] = redirect::plan(&snap, &open, &settings());
        open.remove(&internal);
        let [kernel, _] = redirect::plan(&snap, &open, &settings());
        let read = RelayPorts::read(&kernel, &snap, &listeners, &settings(), IpFamily::V4);
        assert!(!read.ports.contains_key(&internal));
        assert!(!crate::nft::diff(&kernel, &read.want).ops.is_empty());
        // The kernel's table without the listener is not what the proxy would program.
        assert_ne!(kernel, full);
    }
}
