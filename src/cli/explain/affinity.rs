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

use super::source::Source;
use super::{Error, Request, find};
use crate::cluster::{IpFamily, Snapshot};
use crate::dataplane::node::NodePolicy;
use crate::nft::Name;
use crate::nft::ruleset::{Data, Element, Field, Match, Ruleset, SetDecl, Statement, Tuple, Value};

/// What the kernel can tell of a dynamic set: its keys, or `None` when it cannot tell.
pub trait Lookup {
    fn keys(&mut self, set: &Name, decl: &SetDecl) -> Result<Option<Vec<Tuple>>, String>;
}

/// The affinity sets of the Service port `request` reaches, with the client's address:
/// every dynamic set whose remembering rule sends to one of the port's endpoints in this
/// family. Empty when the destination is no port with affinity.
fn sets_of(
    snapshot: &Snapshot,
    request: &Request,
    table: &Ruleset,
) -> Vec<(Name, SetDecl, SocketAddr)> {
    let family = IpFamily::of(&request.to.ip());
    let Some((state, _)) = find(snapshot, request, family) else {
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

/// The client's affinity entries of the port `request` reaches, put into `table` for the
/// tracer. Returns the endpoints the kernel remembers this client for (`Some(empty)`: none),
/// or `None` when the port has no affinity or the kernel cannot tell.
pub fn add_entries(
    snapshot: &Snapshot,
    node: &NodePolicy,
    request: &Request,
    table: &mut Ruleset,
    lookup: &mut dyn Lookup,
) -> Result<Option<Vec<SocketAddr>>, String> {
    let family = IpFamily::of(&request.to.ip());
    let sets = sets_of(snapshot, request, table);
    if sets.is_empty() {
        return Ok(None);
    }
    let client: IpAddr = Source::resolve(snapshot, node, request, family)
        .map_err(|e: Error| e.to_string())?
        .address;
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

/// The reason an entry (or none) gives.
pub fn reason(client: IpAddr, remembered: &[SocketAddr], timeout_seconds: u32) -> String {
    match remembered {
        [] => format!(
            "ClientIP affinity: the kernel has no entry for {client}: its next connection \
             picks an endpoint, and the ones within {timeout_seconds} s follow it"
        ),
        eps => format!(
            "ClientIP affinity: the kernel remembers {client} for {}: its new connections go \
             there until {timeout_seconds} s pass without one",
            eps.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::explain::{Planned, Rules, RulesFrom, Verdict, explain};
    use crate::testing::snapshots::{node, node_policy, snapshot, svc};

    /// The kernel as a map of set → keys.
    struct Kernel(Vec<(Name, Vec<Tuple>)>, bool);

    impl Lookup for Kernel {
        fn keys(&mut self, set: &Name, _: &SetDecl) -> Result<Option<Vec<Tuple>>, String> {
            if !self.1 {
                return Ok(None);
            }
            Ok(Some(
                self.0
                    .iter()
                    .find(|(n, _)| n == set)
                    .map(|(_, k)| k.clone())
                    .unwrap_or_default(),
            ))
        }
    }

    #[test]
    fn a_remembered_client_is_traced_to_its_endpoint_alone() {
        let snap = snapshot(
            node(),
            vec![
                svc("default/sticky", "10.96.0.10", 80)
                    .affinity(600)
                    .ep("10.244.1.2", 8080, "node-a")
                    .ep("10.244.2.2", 8080, "node-b")
                    .ep("10.244.3.2", 8080, "node-c"),
                svc("default/plain", "10.96.0.20", 80).ep("10.244.2.2", 8080, "node-b"),
            ],
        );
        let policy = node_policy();
        let [nft, ..] = Planned::every_mode(&snap, &policy);
        let Rules::Nftables(planned) = nft.rules(IpFamily::V4) else {
            unreachable!()
        };
        let request = Request::parse("10.96.0.10:80", Some("10.244.1.7"), None).unwrap();
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
        let found = add_entries(&snap, &policy, &request, &mut table, &mut kernel).unwrap();
        assert_eq!(found, Some(vec![]));
        let e = explain(
            &snap,
            &policy,
            Rules::Nftables(&table),
            RulesFrom::Kernel,
            &request,
        );
        assert_eq!(e.unwrap().outcome.endpoints.len(), 3);

        // Its own entry sends it to that endpoint only.
        let mut table = planned.clone();
        let mut kernel = Kernel(vec![(b.0.clone(), vec![other, client])], true);
        let found = add_entries(&snap, &policy, &request, &mut table, &mut kernel).unwrap();
        assert_eq!(found, Some(vec!["10.244.2.2:8080".parse().unwrap()]));
        let e = explain(
            &snap,
            &policy,
            Rules::Nftables(&table),
            RulesFrom::Kernel,
            &request,
        )
        .unwrap();
        assert_eq!(e.outcome.verdict, Verdict::Forwarded);
        let reached: Vec<String> = e
            .outcome
            .endpoints
            .iter()
            .map(|s| s.endpoint.to_string())
            .collect();
        assert_eq!(reached, ["10.244.2.2:8080"]);

        // A kernel that cannot tell: unknown, and the table is left as it was.
        let mut table = planned.clone();
        let found = add_entries(
            &snap,
            &policy,
            &request,
            &mut table,
            &mut Kernel(Vec::new(), false),
        )
        .unwrap();
        assert_eq!(found, None);
        assert_eq!(&table, planned);

        // A port without affinity has no sets to look in.
        let plain = Request::parse("10.96.0.20:80", Some("10.244.1.7"), None).unwrap();
        assert!(sets_of(&snap, &plain, planned).is_empty());
    }

    #[test]
    fn the_reason_names_the_remembered_endpoints() {
        let client: IpAddr = "10.244.1.7".parse().unwrap();
        assert!(reason(client, &[], 600).contains("no entry for 10.244.1.7"));
        let r = reason(client, &["10.244.2.2:8080".parse().unwrap()], 600);
        assert!(
            r.contains("remembers 10.244.1.7 for 10.244.2.2:8080"),
            "{r}"
        );
    }
}
