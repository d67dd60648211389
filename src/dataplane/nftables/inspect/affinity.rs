//! Whether a client has a ClientIP affinity entry, on a live nftables node: "why does this
//! client always hit the same pod".
//!
//! The nftables mode remembers affinity in dynamic sets, one per endpoint of a port's list,
//! each holding the clients last sent to that endpoint (`plan/affinity.rs`). The adopting
//! reader leaves those elements out (they are the kernel's, not the plan's); `explain` reads
//! the port's sets, and puts this client's entries into the table it traces, so the tracer
//! follows the path the kernel takes for this client now. Pure but for [`Lookup`], which
//! asks the kernel through the mode's backend.

use std::net::{IpAddr, SocketAddr};

use crate::cluster::{IpFamily, Snapshot};
use crate::config::NftablesEncoder;
use crate::dataplane::inspect::{Error, Packet, service_port};
use crate::nft::ruleset::{
    Data, Element, Family, Field, Match, Ruleset, SetDecl, Statement, Tuple, Value,
};
use crate::nft::{self, Name};

/// What the kernel can tell of a dynamic set: its keys, or `None` when it cannot tell.
pub trait Lookup {
    fn keys(&mut self, set: &Name, decl: &SetDecl) -> Result<Option<Vec<Tuple>>, Error>;
}

/// The affinity sets of the Service port `packet` reaches, with the client's address:
/// every dynamic set whose remembering rule sends to one of the port's endpoints in this
/// family. Empty when the destination is no port with affinity.
fn sets_of(
    snapshot: &Snapshot,
    packet: &Packet,
    table: &Ruleset,
) -> Vec<(Name, SetDecl, SocketAddr)> {
    let family = IpFamily::of(&packet.to.ip());
    let Some((state, _)) = service_port(snapshot, packet.protocol, packet.to) else {
        return Vec::new();
    };
    if state.port.affinity_timeout_seconds.is_none() {
        return Vec::new();
    }
    let Some(view) = state.family(family) else {
        return Vec::new();
    };
    let endpoints: Vec<SocketAddr> = view
        .endpoints
        .iter()
        .map(|e| SocketAddr::new(e.ip, e.port))
        .collect();
    let mut out = Vec::new();
    for chain in table.chains.values() {
        for rule in &chain.rules {
            let remembered = rule.matches.iter().find_map(|m| match m {
                Match::InSet {
                    key,
                    set,
                    negate: false,
                } if key.as_slice() == [Field::Saddr] => Some(set),
                _ => None,
            });
            let Some(set) = remembered else { continue };
            let Some(decl) = table
                .sets
                .get(set)
                .map(|s| &s.decl)
                .filter(|d| d.dynamic_timeout.is_some())
            else {
                continue;
            };
            let target = rule.statements.iter().find_map(|s| match s {
                Statement::DnatTo { addr, port, .. } => Some(SocketAddr::new(*addr, *port)),
                _ => None,
            });
            if let Some(target) = target.filter(|t| endpoints.contains(t)) {
                out.push((set.clone(), decl.clone(), target));
            }
        }
    }
    out
}

/// The client's affinity entries of the port `packet` reaches, put into `table` for the
/// tracer. Returns the endpoints the kernel remembers this client for (`Some(empty)`: none),
/// or `None` when the port has no affinity or the kernel cannot tell.
pub fn add_entries(
    snapshot: &Snapshot,
    packet: &Packet,
    table: &mut Ruleset,
    lookup: &mut dyn Lookup,
) -> Result<Option<Vec<SocketAddr>>, Error> {
    let sets = sets_of(snapshot, packet, table);
    if sets.is_empty() {
        return Ok(None);
    }
    let client: IpAddr = packet.source;
    let key = Tuple::new(&[Value::Addr(client)]);
    // Every set is read before the table is touched: an error leaves it as it was.
    let mut holding = Vec::new();
    for (name, decl, endpoint) in sets {
        let Some(keys) = lookup.keys(&name, &decl)? else {
            return Ok(None);
        };
        if keys.contains(&key) {
            holding.push((name, endpoint));
        }
    }
    let mut remembered = Vec::new();
    for (name, endpoint) in holding {
        if let Some(set) = table.sets.get_mut(&name) {
            set.elements_mut().insert(
                key,
                Element {
                    data: Data::None,
                    comment: None,
                },
            );
        }
        remembered.push(endpoint);
    }
    remembered.sort();
    remembered.dedup();
    Ok(Some(remembered))
}

/// The dynamic sets of our nftables table as the kernel holds them, for the affinity lookup.
pub struct NftablesSets {
    backend: Box<dyn nft::backend::Backend>,
    family: Family,
}

impl NftablesSets {
    pub fn new(encoder: NftablesEncoder, netns: Option<&str>, family: Family) -> NftablesSets {
        NftablesSets {
            backend: nft::backend::for_encoder(encoder, netns),
            family,
        }
    }
}

impl Lookup for NftablesSets {
    fn keys(
        &mut self,
        set: &nft::Name,
        decl: &nft::ruleset::SetDecl,
    ) -> Result<Option<Vec<nft::ruleset::Tuple>>, Error> {
        self.backend
            .dynamic_keys(self.family, set, decl)
            .map_err(|e| Error::kernel(format!("reading set {set}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataplane::inspect::sticky::{listed, sticky};
    use crate::dataplane::inspect::{Rules as _, Verdict};
    use crate::dataplane::nftables::inspect::Planned;
    use crate::testing::plans::packet;
    use crate::testing::snapshots::{node, node_policy, snapshot, svc};

    /// The kernel as a map of set → keys.
    struct Kernel(Vec<(Name, Vec<Tuple>)>, bool);

    impl Lookup for Kernel {
        fn keys(&mut self, set: &Name, _: &SetDecl) -> Result<Option<Vec<Tuple>>, Error> {
            if !self.1 {
                return Ok(None);
            }
            Ok(Some(listed(&self.0, set)))
        }
    }

    #[test]
    fn a_remembered_client_is_traced_to_its_endpoint_alone() {
        let snap = snapshot(
            node(),
            vec![
                sticky(600).ep("10.244.3.2", 8080, "node-c"),
                svc("default/plain", "10.96.0.20", 80).ep("10.244.2.2", 8080, "node-b"),
            ],
        );
        let policy = node_policy();
        let plan = Planned::with_policy(&snap, &policy);
        let planned = &plan.0[IpFamily::V4.index()];
        let request = packet(&snap, &policy, "10.96.0.10:80", Some("10.244.1.7"));
        let sets = sets_of(&snap, &request, planned);
        assert_eq!(sets.len(), 3, "one set per endpoint: {sets:?}");
        let client = Tuple::new(&[Value::Addr("10.244.1.7".parse().unwrap())]);
        let other = Tuple::new(&[Value::Addr("10.244.1.8".parse().unwrap())]);
        let b = sets
            .iter()
            .find(|(_, _, ep)| ep.to_string() == "10.244.2.2:8080")
            .unwrap();

        // Another client's entry changes nothing for this one.
        let mut table = planned.clone();
        let mut kernel = Kernel(vec![(b.0.clone(), vec![other])], true);
        let found = add_entries(&snap, &request, &mut table, &mut kernel).unwrap();
        assert_eq!(found, Some(vec![]));
        assert_eq!(table.walk(&request).endpoints.len(), 3);

        // Its own entry sends it to that endpoint only.
        let mut table = planned.clone();
        let mut kernel = Kernel(vec![(b.0.clone(), vec![other, client])], true);
        let found = add_entries(&snap, &request, &mut table, &mut kernel).unwrap();
        assert_eq!(found, Some(vec!["10.244.2.2:8080".parse().unwrap()]));
        let outcome = table.walk(&request);
        assert_eq!(outcome.verdict, Verdict::Forwarded);
        let reached: Vec<String> = outcome
            .endpoints
            .iter()
            .map(|s| s.endpoint.to_string())
            .collect();
        assert_eq!(reached, ["10.244.2.2:8080"]);

        // A kernel that cannot tell: unknown, and the table is left as it was.
        let mut table = planned.clone();
        let found =
            add_entries(&snap, &request, &mut table, &mut Kernel(Vec::new(), false)).unwrap();
        assert_eq!(found, None);
        assert_eq!(&table, planned);

        // A port without affinity has no sets to look in.
        let plain = packet(&snap, &policy, "10.96.0.20:80", Some("10.244.1.7"));
        assert!(sets_of(&snap, &plain, planned).is_empty());
    }
}
